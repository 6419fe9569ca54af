"""RunPodProvider against the RunPod emulator (in-process transport, and over real HTTP)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from providerfakes import RUNPOD_KEY, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import (
    ConfigError,
    ProviderError,
    ProviderSchemaError,
    ProviderUnavailable,
    SafetyRefusal,
)
from gpuc.core.models import OWNER_ENV
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider, RunPodSelfDestroyer
from gpuc.core.settings import Settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer


def create_input(emu: RunPodEmulator) -> dict[str, object]:
    [request] = emu.ops("create")
    body = json.loads(request.body)
    assert "podFindAndDeployOnDemand(input: $input)" in body["query"]
    return body["variables"]["input"]  # type: ignore[no-any-return]


def test_it_creates_an_on_demand_pod_with_ssh_only_disks_backstop_and_owner_marker(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    pod = runpod.create(spec("runpod", env={"HF_HOME": "/workspace/hf"}, max_hours=2))
    sent = create_input(runpod_emu)
    assert sent["name"] == "gpuc-run0001" == pod.name
    assert sent["gpuTypeId"] == "NVIDIA GeForce RTX 4090"  # the id, resolved from the display name
    assert (sent["startSsh"], sent["ports"], sent["cloudType"]) == (True, "22/tcp", "SECURE")
    assert (sent["containerDiskInGb"], sent["volumeInGb"], sent["volumeMountPath"]) == (20, 30, "/workspace")
    assert "startJupyter" not in sent and "bidPerGpu" not in sent
    terminate_after = datetime.fromisoformat(str(sent["terminateAfter"]).replace("Z", "+00:00")).timestamp()
    assert terminate_after == clock.now() + 2 * 3600
    assert {"key": OWNER_ENV, "value": "1"} in sent["env"]  # type: ignore[operator]
    assert {"key": "HF_HOME", "value": "/workspace/hf"} in sent["env"]  # type: ignore[operator]
    assert (pod.status, pod.managed, pod.experiment, pod.price_per_hour) == (
        "provisioning",
        True,
        "tiny-llama",
        0.74,
    )


def test_an_interruptible_pod_is_rented_with_its_bid(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod", interruptible=True, bid_per_gpu=0.25))
    [request] = runpod_emu.ops("create")
    body = json.loads(request.body)
    assert "podRentInterruptable" in body["query"] and body["variables"]["input"]["bidPerGpu"] == 0.25
    assert pod.interruptible
    runpod_emu.set_status(pod.id, "outbid")
    assert runpod.get(pod.id).status == "paused"  # type: ignore[union-attr]


def test_an_interruptible_pod_without_a_bid_is_refused_before_any_call(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    with pytest.raises(ConfigError, match="bid"):
        runpod.create(spec("runpod", interruptible=True))
    assert runpod_emu.requests == []


def test_a_secret_looking_env_never_reaches_the_provider(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    with pytest.raises(SafetyRefusal):
        runpod.create(spec("runpod", env={"HF_TOKEN": "x"}))
    with pytest.raises(SafetyRefusal):
        runpod.create(spec("runpod", env={"NOTE": "hf_abcdefghijklmnop"}))
    assert runpod_emu.ops("create") == []


def test_a_pod_goes_from_provisioning_to_running_with_its_ssh_port_and_created_at(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    created = runpod.create(spec("runpod"))
    clock.advance(30)
    pod = runpod.get(created.id)
    assert pod is not None and pod.status == "running"  # two observations: v2 then GraphQL
    assert pod.ssh_host == "203.0.113.10" and pod.ssh_port
    assert pod.created_at == clock.now() - 30
    runpod_emu.set_gpu_util(created.id, 87)
    assert runpod.get(created.id).gpu_util_pct == 87  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("state", "status"),
    [("running", "running"), ("exited", "stopped"), ("error", "exited"), ("provisioning", "provisioning")],
)
def test_status_mapping_follows_the_reference(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, state: str, status: str
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.set_status(pod.id, state)
    runpod_emu.boot_polls = 99  # stay where the test put it
    runpod_emu.pods[pod.id].polls_left = 99
    [listed] = runpod.list_pods()
    assert listed.status == status


def test_a_vanished_pod_is_positively_gone(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.vanish(pod.id)
    assert runpod.get(pod.id) is None
    assert runpod.list_pods() == []


def test_foreign_pods_are_listed_but_never_managed(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.add_foreign_pod("my-notebook")
    runpod_emu.add_foreign_pod("gpuc-looksalike1")  # our prefix, but no owner marker
    runpod_emu.add_foreign_pod("their-pod", env={OWNER_ENV: "1"})  # the marker, but not our name
    ours = runpod.create(spec("runpod"))
    managed = {p.name: p.managed for p in runpod.list_pods()}
    assert managed == {"my-notebook": False, "gpuc-looksalike1": False, "their-pod": False, ours.name: True}


def test_a_create_that_times_out_after_the_pod_was_made_leaves_exactly_one_pod(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.faults.add(op="create", kind="timeout_after_commit")
    pod = runpod.create(spec("runpod"))
    assert [p.id for p in runpod_emu.alive()] == [pod.id]
    assert len(runpod_emu.ops("create")) == 1  # found by name: never sent twice
    assert pod.name == "gpuc-run0001" and pod.managed


def test_a_create_that_failed_before_commit_is_sent_once_more_after_looking(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.faults.add(op="create", kind="503")
    pod = runpod.create(spec("runpod"))
    assert [p.id for p in runpod_emu.alive()] == [pod.id]
    assert len(runpod_emu.ops("create")) == 2
    assert len(runpod_emu.ops("list")) >= 1  # looked before sending again


def test_a_create_that_keeps_failing_ambiguously_stops_and_says_where_to_look(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.faults.add(op="create", kind="timeout", times=None)
    with pytest.raises(ProviderUnavailable, match="no pod by that name") as caught:
        runpod.create(spec("runpod"))
    assert len(runpod_emu.ops("create")) == 2
    assert "gpuc ls" in (caught.value.hint or "")
    assert runpod_emu.alive() == []


def test_a_create_is_never_retried_when_the_lookup_itself_fails(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.faults.add(op="create", kind="timeout_after_commit")
    runpod_emu.faults.add(op="list", kind="500")
    with pytest.raises(ProviderUnavailable):
        runpod.create(spec("runpod"))
    assert len(runpod_emu.ops("create")) == 1 and len(runpod_emu.alive()) == 1


def test_no_capacity_is_a_plain_provider_error_and_nothing_is_retried(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.set_stock("NVIDIA GeForce RTX 4090", 0)
    with pytest.raises(ProviderError, match="no longer any instances"):
        runpod.create(spec("runpod"))
    assert len(runpod_emu.ops("create")) == 1


def test_destroy_terminates_and_confirms(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    assert runpod.destroy(pod.id) == "destroyed"
    assert runpod_emu.alive() == []
    assert runpod_emu.ops("stop") == []  # never a stop: a stopped pod bills its volume


def test_destroy_of_a_gone_pod_is_success(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.vanish(pod.id)
    assert runpod.destroy(pod.id) == "already_gone"
    assert runpod.destroy(pod.id) == "already_gone"


def test_a_destroy_whose_answer_was_lost_is_still_success(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="destroy", kind="timeout_after_commit")
    assert runpod.destroy(pod.id) == "already_gone"  # the retry finds it gone: success, once
    assert runpod_emu.alive() == []


def test_a_refused_destroy_raises(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="destroy", kind="success_false")
    with pytest.raises(ProviderError, match="Something went wrong"):
        runpod.destroy(pod.id)
    assert len(runpod_emu.alive()) == 1


def test_a_drifted_list_raises_instead_of_reading_an_empty_account(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="list", kind="schema_drift")
    with pytest.raises(ProviderSchemaError):
        runpod.list_pods()
    runpod_emu.faults.add(op="list_v2", kind="schema_drift")
    with pytest.raises(ProviderSchemaError):
        runpod.list_pods()


def test_balance_reads_credit_spend_and_limit(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    runpod.create(spec("runpod"))
    balance = runpod.balance()
    assert (balance.balance_usd, balance.spend_per_hour, balance.spend_limit) == (25.0, 0.74, 80.0)


def test_offers_give_secure_community_spot_and_stock(runpod: RunPodProvider) -> None:
    all_offers = runpod.offers()
    assert [o.price_per_hour for o in all_offers] == sorted(o.price_per_hour for o in all_offers)
    [rtx] = runpod.offers("RTX 4090")
    assert (rtx.price_per_hour, rtx.community_price, rtx.min_bid, rtx.stock) == (0.74, 0.34, 0.2, "High")
    assert [o.gpu for o in runpod.offers("NVIDIA GeForce RTX 4090")] == ["RTX 4090"]


def test_stop_stops(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod.stop(pod.id)
    assert runpod.get(pod.id).status == "stopped"  # type: ignore[union-attr]


def test_terminate_after_is_enforced_by_the_provider_itself(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    pod = runpod.create(spec("runpod", max_hours=1))
    clock.advance(3601)
    assert runpod.get(pod.id) is None


def test_self_destroy_uses_the_pod_scoped_key(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    environ = runpod_emu.pod_environ(pod.id)
    assert environ["RUNPOD_API_KEY"] != RUNPOD_KEY
    destroyer = RunPodSelfDestroyer.from_environ(
        environ, transport=runpod_emu.transport(), backoff=zero_backoff
    )
    assert destroyer.destroy_self() == f"terminated pod {pod.id}"
    assert runpod_emu.alive() == []


def test_self_destroy_falls_back_to_stop_and_says_so(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.pod_key_can_terminate = False
    destroyer = RunPodSelfDestroyer.from_environ(
        runpod_emu.pod_environ(pod.id), transport=runpod_emu.transport(), backoff=zero_backoff
    )
    said = destroyer.destroy_self()
    assert said.startswith("podTerminate was refused") and "stopped pod" in said and "reaper" in said
    assert runpod_emu.pods[pod.id].state == "exited"


def test_the_pod_key_cannot_list_the_account(runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    pod_id = runpod_emu.add_foreign_pod("gpuc-run0002")
    key = runpod_emu.pod_environ(pod_id)["RUNPOD_API_KEY"]
    scoped = RunPodProvider(
        key,
        graphql_url="http://x/graphql",
        rest_url="http://x/v2",
        transport=runpod_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    with pytest.raises(ProviderError, match="Unauthorized"):
        scoped.list_pods()


def test_self_destroy_needs_both_variables() -> None:
    with pytest.raises(ConfigError, match="RUNPOD_POD_ID"):
        RunPodSelfDestroyer.from_environ({"RUNPOD_API_KEY": "x"})


def test_a_missing_key_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError) as caught:
        RunPodProvider.from_settings(Settings())
    assert "RUNPOD_API_KEY" in (caught.value.hint or "") and ".env" in (caught.value.hint or "")


def test_it_works_over_real_http(
    runpod_server: EmulatorServer, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    settings = Settings(
        runpod_api_key=RUNPOD_KEY,  # type: ignore[arg-type]
        runpod_graphql_url=f"{runpod_server.url}/graphql",
        runpod_rest_url=f"{runpod_server.url}/v2",
    )
    provider = RunPodProvider.from_settings(settings, clock=clock, backoff=zero_backoff)
    try:
        pod = provider.create(spec("runpod"))
        assert provider.get(pod.id) is not None
        assert [p.id for p in provider.list_pods()] == [pod.id]
        assert provider.destroy(pod.id) == "destroyed"
        assert provider.list_pods() == []
    finally:
        provider.close()


def test_a_real_timeout_after_commit_leaves_one_pod(
    runpod_server: EmulatorServer, runpod_emu: RunPodEmulator
) -> None:
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=f"{runpod_server.url}/graphql",
        rest_url=f"{runpod_server.url}/v2",
        timeout_s=0.3,
        clock=FakeClock(),
        backoff=zero_backoff,
    )
    runpod_emu.faults.add(op="create", kind="timeout_after_commit")
    try:
        pod = provider.create(spec("runpod"))
    finally:
        provider.close()
    assert [p.id for p in runpod_emu.alive()] == [pod.id]


def test_the_emulator_can_point_ssh_at_a_real_endpoint(clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock, boot_polls=0, ssh_endpoint=("127.0.0.1", 2222))
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url="http://x/graphql",
        rest_url="http://x/v2",
        transport=emu.transport(),
        clock=clock,
    )
    pod = provider.create(spec("runpod"))
    found = provider.get(pod.id)
    assert found is not None and (found.status, found.ssh_host, found.ssh_port) == (
        "running",
        "127.0.0.1",
        2222,
    )
