"""The emulators held to code no one here wrote: the official `runpod` and `vastai` packages drive them over
loopback HTTP through list / create / stop / terminate / offers / user, and what they do is read back
through gpuc (and the other way round). Both clients are pointed at the emulator through their own
base-URL settings (runpod-python: RUNPOD_API_BASE_URL, read at each call; vastai: `server_url` / the CLI's
--url). Nothing here leaves the machine: proxies are cleared, the vastai update check is off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.providers import RUNPOD_KEY, VAST_KEY, spec

from gpuc.core.clock import FakeClock
from gpuc.core.pod import OWNER_ENV
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

runpod = pytest.importorskip("runpod")
vastai = pytest.importorskip("vastai")
RTX4090 = "NVIDIA GeForce RTX 4090"
OFFER = 11684738
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("VASTAI_NO_UPDATE_CHECK", "1")


# ---- RunPod: runpod-python -------------------------------------------------------------------------


@pytest.fixture
def official_runpod(runpod_server: EmulatorServer, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RUNPOD_API_BASE_URL", runpod_server.url)  # runpod-python appends /graphql
    monkeypatch.setattr(runpod, "api_key", RUNPOD_KEY)
    return runpod


@pytest.fixture
def gpuc_runpod(runpod_server: EmulatorServer, clock: FakeClock) -> Iterator[RunPodProvider]:
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=f"{runpod_server.url}/graphql",
        rest_url=f"{runpod_server.url}/v2",
        clock=clock,
        backoff=zero_backoff,
    )
    yield provider
    provider.close()


def test_runpod_python_creates_lists_stops_and_terminates_and_gpuc_sees_each_step(
    official_runpod: Any, gpuc_runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    created = official_runpod.create_pod(
        "my-notebook", "runpod/pytorch", RTX4090, ports="22/tcp", env={"MODEL": "tiny"}, container_disk_in_gb=20
    )
    pod_id = created["id"]
    assert created["imageName"] == "runpod/pytorch" and created["machine"]["podHostId"].startswith(pod_id)
    assert "MODEL=tiny" in created["env"]
    assert [p["id"] for p in official_runpod.get_pods()] == [pod_id]
    assert official_runpod.get_pod(pod_id)["machine"]["gpuDisplayName"] == "RTX 4090"
    [seen] = gpuc_runpod.list_pods()
    assert (seen.id, seen.managed, seen.gpu) == (pod_id, False, "RTX 4090")  # never gpuc's to destroy

    assert official_runpod.stop_pod(pod_id)["desiredStatus"] == "EXITED"
    assert gpuc_runpod.get(pod_id).status == "stopped"  # type: ignore[union-attr]
    official_runpod.terminate_pod(pod_id)
    assert gpuc_runpod.get(pod_id) is None and runpod_emu.alive() == []


def test_runpod_python_reads_a_pod_gpuc_created_and_terminates_it(
    official_runpod: Any, gpuc_runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = gpuc_runpod.create(spec("runpod"))
    theirs = official_runpod.get_pod(pod.id)
    assert theirs["name"] == "gpuc-run0001" and f"{OWNER_ENV}=1" in theirs["env"]
    assert theirs["ports"] == "22/tcp" and theirs["volumeMountPath"] == "/workspace"
    official_runpod.terminate_pod(pod.id)
    assert gpuc_runpod.destroy(pod.id) == "already_gone"


def test_runpod_python_gpu_types_user_and_network_volume_placement(
    official_runpod: Any, runpod_emu: RunPodEmulator
) -> None:
    assert {g["id"] for g in official_runpod.get_gpus()} >= {RTX4090, "NVIDIA L4"}
    gpu = official_runpod.get_gpu(RTX4090)
    assert gpu["securePrice"] == 0.74 and gpu["lowestPrice"]["uninterruptablePrice"] == 0.34
    runpod_emu.network_volumes.append({"id": "vol1", "name": "data", "size": 50, "dataCenterId": "EU-RO-1"})
    user = official_runpod.get_user()
    assert user["id"] and user["networkVolumes"][0]["dataCenterId"] == "EU-RO-1"
    # A network volume makes runpod-python read the user first, then send dataCenterId from it.
    created = official_runpod.create_pod("with-volume", "runpod/pytorch", RTX4090, network_volume_id="vol1")
    [sent] = [r for r in runpod_emu.ops("create")]
    assert 'dataCenterId: "EU-RO-1"' in json.loads(sent.body)["query"] and created["id"]


def test_runpod_python_hears_the_errors_it_knows(official_runpod: Any, runpod_emu: RunPodEmulator) -> None:
    with pytest.raises(official_runpod.error.QueryError, match="pod not found to terminate"):
        official_runpod.terminate_pod("nosuchpod0001")
    runpod_emu.set_stock(RTX4090, 0)
    with pytest.raises(official_runpod.error.QueryError, match="no longer any instances"):
        official_runpod.create_pod("full", "runpod/pytorch", RTX4090)
    official_runpod.api_key = "rpa_WRONG"
    with pytest.raises(official_runpod.error.AuthenticationError):
        official_runpod.get_pods()


def test_runpod_v2_lists_acts_and_deletes_as_the_spec_says(
    runpod_server: EmulatorServer, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    import httpx

    ids = []
    for n in range(5):
        ids.append(runpod_emu.add_foreign_pod(f"p{n}"))
        clock.advance(1)
    headers = {"Authorization": f"Bearer {RUNPOD_KEY}"}
    with httpx.Client(base_url=runpod_server.url, headers=headers) as http:
        # No paging, and no v1 `includeMachine`: the parameters are ignored, the whole list comes back.
        first = http.get("/v2/pods", params={"limit": 2, "includeMachine": "true"}).json()
        assert [p["id"] for p in first["pods"]] == ids and set(first) == {"pods"}
        assert "machine" not in first["pods"][0]
        assert http.get("/v2/pods", params={"limit": 0}).status_code == 200
        assert http.post(f"/v2/pods/{ids[0]}/action", json={"action": "stop"}).json()["status"] == "EXITED"
        assert http.post(f"/v2/pods/{ids[0]}/action", json={"action": "restart"}).status_code == 409
        assert http.post(f"/v2/pods/{ids[0]}/action", json={"action": "reboot"}).status_code == 422
        assert http.post(f"/v2/pods/{ids[1]}/action", json={"action": "terminate"}).status_code == 204
        assert http.delete(f"/v2/pods/{ids[2]}").status_code == 204
        assert http.delete(f"/v2/pods/{ids[2]}").status_code == 404
        pod_key = runpod_emu.pod_environ(ids[3])["RUNPOD_API_KEY"]
        refused = http.delete(f"/v2/pods/{ids[3]}", headers={"Authorization": f"Bearer {pod_key}"})
        assert refused.status_code == 403
    assert {p.id for p in runpod_emu.alive()} == {ids[0], ids[3], ids[4]}


# ---- Vast: the vastai SDK and CLI ------------------------------------------------------------------


@pytest.fixture
def sdk(vast_server: EmulatorServer) -> Any:
    from vastai import VastAI  # type: ignore[import-untyped]

    return VastAI(api_key=VAST_KEY, server_url=vast_server.url, retry=2)


@pytest.fixture
def gpuc_vast(vast_server: EmulatorServer, clock: FakeClock) -> Iterator[VastProvider]:
    provider = VastProvider(VAST_KEY, url=vast_server.url, clock=clock, backoff=zero_backoff)
    yield provider
    provider.close()


def test_the_sdk_searches_creates_lists_stops_and_destroys_and_gpuc_sees_each_step(
    sdk: Any, gpuc_vast: VastProvider, vast_emu: VastEmulator
) -> None:
    offers = sdk.search_offers(query="gpu_name=RTX_4090 num_gpus=1 reliability>0.98", order="dph_total")
    assert OFFER in [o["id"] for o in offers]
    assert OFFER in [o["id"] for o in sdk.search_offers_new(query={"gpu_name": {"eq": "RTX 4090"}})]
    made = sdk.create_instance(id=OFFER, image="pytorch/pytorch", disk=20, label="my-notebook", ssh=True, direct=True)
    assert made["success"] is True
    instance_id = made["new_contract"]
    sent = json.loads(vast_emu.ops("create")[-1].body)
    assert sent["price"] is None and sent["onstart"] is None  # optional keys go as null: accepted

    [row] = sdk.show_instances()
    assert row["id"] == instance_id and row["label"] == "my-notebook" and isinstance(row["extra_env"], dict)
    assert sdk.show_instance(instance_id)["image_runtype"] == "ssh_direc ssh_proxy"
    [seen] = gpuc_vast.list_pods()
    assert (seen.id, seen.managed) == (str(instance_id), False)

    assert sdk.stop_instance(instance_id)["success"] is True
    assert gpuc_vast.get(str(instance_id)).status == "stopped"  # type: ignore[union-attr]
    assert sdk.start_instance(instance_id)["success"] is True
    assert sdk.reboot_instance(instance_id)["success"] is True
    assert sdk.label_instance(instance_id, "renamed")["success"] is True
    assert sdk.destroy_instance(instance_id)["success"] is True
    assert gpuc_vast.get(str(instance_id)) is None and sdk.show_instance(instance_id) is None


def test_the_sdk_reads_an_instance_gpuc_created_and_destroys_it(
    sdk: Any, gpuc_vast: VastProvider, vast_emu: VastEmulator
) -> None:
    pod = gpuc_vast.create(spec("vast", offer_id=str(OFFER)))
    [row] = sdk.show_instances()
    assert row["label"] == "gpuc-run0001" and row["extra_env"][OWNER_ENV] == "1"
    assert sdk.destroy_instance(int(pod.id))["success"] is True
    assert gpuc_vast.destroy(pod.id) == "already_gone"


def test_the_sdk_bulk_calls_bids_filters_and_user(sdk: Any, vast_emu: VastEmulator) -> None:
    a = sdk.create_instance(id=OFFER, image="img", disk=10)["new_contract"]
    b = sdk.create_instance(id=11684741, image="img", disk=10, price=0.09)["new_contract"]  # a bid
    assert sdk.change_bid(b, price=0.10)["success"] is True and vast_emu.instances[b].bid == 0.10
    assert sdk.change_bid(b)["success"] is True  # null: the going price
    with pytest.raises(Exception, match="400"):
        sdk.change_bid(a, price=0.5)  # on-demand cannot become a bid
    filters = sdk.show_instance_filters()
    assert isinstance(filters, list) and filters  # answered, not shadowed by "show instance filters"
    assert sdk.stop_instances([a, b])["success"] is True
    assert {i.actual for i in vast_emu.instances.values()} == {"stopped"}
    assert sdk.destroy_instances([a, b])["success"] is True and vast_emu.alive() == []
    user = sdk.show_user()
    assert user["credit"] == 25.0 and "api_key" not in user


def test_the_retired_v0_list_answers_410_and_a_spent_quota_stops_the_sdk_too(sdk: Any, vast_emu: VastEmulator) -> None:
    retired = sdk.client.get("/instances/", query_args={"owner": "me"})
    assert (retired.status_code, retired.json()["error"]) == (410, "deprecated_endpoint")
    vast_emu.faults.add(op="offers", kind="search_quota", times=None)
    answer = sdk.client.post("/bundles/", json_data={"limit": 1})
    assert answer.status_code == 429 and len(vast_emu.ops("offers")) == 1  # the SDK does not retry it


def vastai_cli(server: EmulatorServer, tmp_path: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS and not k.startswith("VAST")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path), VASTAI_NO_UPDATE_CHECK="1", NO_PROXY="127.0.0.1")
    env["VAST_API_KEY"] = VAST_KEY  # the CLI's --api-key default: keys stay out of argv
    entry = "import sys; from vastai.cli.main import main; sys.argv[0] = 'vastai'; sys.exit(main())"
    argv = [sys.executable, "-c", entry, "--url", server.url, "--raw", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout) if done.stdout.strip().startswith(("[", "{")) else done.stdout


def test_the_cli_searches_with_new_and_reboots(vast_server: EmulatorServer, tmp_path: Path) -> None:
    emu = vast_server.emulator
    assert isinstance(emu, VastEmulator)
    found = vastai_cli(vast_server, tmp_path, "search", "offers", "--new", "gpu_name=RTX_4090")
    assert OFFER in [o["id"] for o in found]
    assert [r.path for r in emu.ops("offers")] == ["/api/v0/search/asks/"]
    made = vastai_cli(vast_server, tmp_path, "create", "instance", str(OFFER), "--image", "img", "--disk", "10")
    instance_id = made["new_contract"]
    vastai_cli(vast_server, tmp_path, "reboot", "instance", str(instance_id))
    [listed] = vastai_cli(vast_server, tmp_path, "show", "instances")
    assert listed["id"] == instance_id
    assert [r.path for r in emu.ops("reboot")] == [f"/api/v0/instances/reboot/{instance_id}/"]
