"""RunPodProvider against the RunPod emulator (in-process transport, and over real HTTP)."""

from __future__ import annotations

import json

import httpx
import pytest
from fakes.providers import RUNPOD_KEY, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import (
    ConfigError,
    ProviderError,
    ProviderSchemaError,
    ProviderUnavailable,
    SafetyRefusal,
)
from gpuc.core.pod import OWNER_ENV
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.podkey import RunPodSelfDestroyer
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.settings import Settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer


def create_request(emu: RunPodEmulator) -> dict[str, object]:
    [request] = emu.ops("create")
    assert (request.method, request.path) == ("POST", "/v2/pods")
    return json.loads(request.body)  # type: ignore[no-any-return]


def test_it_creates_an_on_demand_pod_with_ssh_only_disks_and_owner_marker_through_v2(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    pod = runpod.create(spec("runpod", env={"HF_HOME": "/workspace/hf"}, max_hours=2))
    sent = create_request(runpod_emu)
    # Exactly a CreatePodRequest: no terminateAfter, supportPublicIp or host floor (v2 has none of them).
    assert sent == {
        "name": "gpuc-run0001",
        "image": sent["image"],
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},  # the id, resolved from the display name
        "cloud": "SECURE",
        "disk": 20,
        "mounts": {"persistent": {"size": 30, "path": "/workspace"}},
        "ports": ["22/tcp"],
        "env": {**sent["env"], OWNER_ENV: "1", "HF_HOME": "/workspace/hf"},  # type: ignore[dict-item]
        "startSsh": True,
    }
    assert (pod.name, pod.status, pod.managed, pod.experiment, pod.price_per_hour) == (
        "gpuc-run0001",
        "provisioning",
        True,
        "tiny-llama",
        0.74,
    )
    assert pod.created_at == clock.now() and pod.disk_gb == 30


def test_the_gpu_count_is_sent_and_priced(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod", gpu_count=2))
    assert create_request(runpod_emu)["gpu"] == {"id": "NVIDIA GeForce RTX 4090", "count": 2}
    assert (pod.gpu, pod.gpu_count, pod.price_per_hour) == ("RTX 4090", 2, 1.48)


def test_a_community_pod_is_asked_for_in_the_community_cloud(runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url="http://x/graphql",
        rest_url="http://x/v2",
        cloud_type="COMMUNITY",
        transport=runpod_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    created = provider.create(spec("runpod"))
    assert create_request(runpod_emu)["cloud"] == "COMMUNITY" and created.price_per_hour == 0.34
    runpod_emu.set_status(created.id, "running")
    pod = provider.get(created.id)
    assert pod is not None and pod.status == "running"
    assert (pod.ssh_host, pod.ssh_port) == ("203.0.113.10", runpod_emu.pods[created.id].ssh_port)


def test_cloud_all_asks_for_the_cheaper_cloud_that_offers_the_gpu(runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    # v2 takes SECURE or COMMUNITY and never falls back: gpuc picks from the catalog's prices.
    provider = RunPodProvider(
        RUNPOD_KEY, rest_url="http://x/v2", cloud_type="ALL", transport=runpod_emu.transport(), clock=clock
    )
    provider.create(spec("runpod", gpu_type="L4"))  # L4: secure only in the emulator's catalog
    provider.create(spec("runpod", run_id="run0002"))  # RTX 4090: community is cheaper
    assert [json.loads(r.body)["cloud"] for r in runpod_emu.ops("create")] == ["SECURE", "COMMUNITY"]


@pytest.mark.parametrize("bid", [0.25, None])
def test_interruptible_is_refused_with_a_clear_message_before_any_call(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, bid: float | None
) -> None:
    assert runpod.supports_interruptible is False
    with pytest.raises(ConfigError, match="no longer offered") as caught:
        runpod.create(spec("runpod", interruptible=True, bid_per_gpu=bid))
    assert "--provider vast" in (caught.value.hint or "")
    assert runpod_emu.requests == []


def test_a_stopped_pod_shows_what_its_volume_bills_not_v2s_zero_cost(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod.stop(pod.id)
    [request] = runpod_emu.ops("stop")
    assert (request.path, json.loads(request.body)) == (f"/v2/pods/{pod.id}/action", {"action": "stop"})
    [listed] = runpod.list_pods()
    assert listed.status == "stopped" and listed.disk_gb == 30
    assert listed.price_per_hour == round(30 * 0.20 / 720, 6) > 0  # v2 answers cost 0.0 when EXITED


def test_a_secret_looking_env_never_reaches_the_provider(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
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
    assert runpod.get(created.id).status == "provisioning"  # type: ignore[union-attr]  # v2 STARTING
    pod = runpod.get(created.id)
    assert pod is not None and pod.status == "running"
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


def test_foreign_pods_are_listed_but_never_managed(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
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


def test_a_destroy_whose_answer_was_lost_is_still_success(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="destroy", kind="timeout_after_commit")
    assert runpod.destroy(pod.id) == "already_gone"  # the retry finds it gone: success, once
    assert runpod_emu.alive() == []


def test_a_refused_destroy_raises(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="destroy", kind="success_false")
    with pytest.raises(ProviderError, match="still listed after its DELETE"):
        runpod.destroy(pod.id)
    assert len(runpod_emu.alive()) == 1


def test_a_drifted_list_raises_instead_of_reading_an_empty_account(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="list", kind="schema_drift")
    with pytest.raises(ProviderSchemaError):
        runpod.list_pods()


@pytest.mark.parametrize(
    "kind", ["schema_drift", "500", "403", "422", "timeout", "broken_pagination", "empty_object", "empty_list"]
)
def test_a_list_that_fails_or_cannot_be_read_raises_never_an_empty_account(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, kind: str
) -> None:
    runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="list", kind=kind, times=None)
    with pytest.raises(ProviderError):
        runpod.list_pods()


def test_the_v2_list_is_one_answer_and_gpuc_asks_with_no_parameter(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    for n in range(60):
        runpod_emu.add_foreign_pod(f"other-{n}")
        clock.advance(1)
    pods = runpod.list_pods()
    assert len(pods) == 60 and all(p.created_at is not None for p in pods)  # createdAt is v2's alone
    [request] = runpod_emu.ops("list")
    assert request.query == {}  # no `limit`, no `cursor`: v2 takes neither (it would ignore them)


def test_should_runpod_ever_page_the_list_gpuc_follows_the_cursor(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock
) -> None:
    """The opt-in fault: the day GET /v2/pods pages, every page is read (never the first page as the account)."""
    runpod_emu.page_size = 20
    for n in range(60):
        runpod_emu.add_foreign_pod(f"other-{n}")
        clock.advance(1)
    assert len(runpod.list_pods()) == 60
    pages = runpod_emu.ops("list")
    assert len(pages) == 3 and "cursor" not in pages[0].query and all(r.query.get("cursor") for r in pages[1:])
    assert not any("limit" in r.query for r in pages)


def test_balance_reads_credit_spend_and_limit(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    runpod.create(spec("runpod"))
    balance = runpod.balance()
    assert (balance.balance_usd, balance.spend_per_hour, balance.spend_limit) == (25.0, 0.74, 80.0)
    [request] = runpod_emu.ops("balance")
    assert request.path == "/graphql"  # v2 has no balance: the one GraphQL read the account key makes


def test_offers_give_secure_community_and_stock_but_no_spot_price(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    all_offers = runpod.offers()
    assert [o.price_per_hour for o in all_offers] == sorted(o.price_per_hour for o in all_offers)
    [rtx] = runpod.offers("RTX 4090")
    assert (rtx.price_per_hour, rtx.community_price, rtx.stock) == (0.74, 0.34, "High")
    assert all(o.min_bid is None and o.interruptible_price is None for o in [*all_offers, rtx])
    assert [o.gpu for o in runpod.offers("NVIDIA GeForce RTX 4090")] == ["RTX 4090"]
    assert {r.path for r in runpod_emu.ops("offers")} == {"/v2/catalog/gpus"}
    with pytest.raises(ConfigError, match="no longer offered"):
        runpod.offers("RTX 4090", interruptible=True)


def test_stop_stops(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod.stop(pod.id)
    assert runpod.get(pod.id).status == "stopped"  # type: ignore[union-attr]


def test_a_terminate_after_that_is_not_a_date_time_is_refused(runpod_emu: RunPodEmulator) -> None:
    with httpx.Client(transport=runpod_emu.transport(), base_url="https://api.runpod.test") as http:
        answer = http.post(
            "/graphql",
            headers={"Authorization": f"Bearer {RUNPOD_KEY}"},
            json={
                "query": 'mutation { podFindAndDeployOnDemand(input: {gpuTypeId: "NVIDIA GeForce RTX 4090", '
                'gpuCount: 1, cloudType: SECURE, imageName: "x", name: "gpuc-x", terminateAfter: "soon"}) { id } }'
            },
        )
    errors = answer.json().get("errors") or []
    assert errors and "terminateAfter is not a date-time" in errors[0]["message"], answer.text


def test_self_destroy_uses_the_pod_scoped_key(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    environ = runpod_emu.pod_environ(pod.id)
    assert environ["RUNPOD_API_KEY"] != RUNPOD_KEY
    destroyer = RunPodSelfDestroyer.from_environ(environ, send=runpod_emu.pod_send(), clock=FakeClock())
    assert destroyer.destroy_self() == f"terminated pod {pod.id}"
    assert runpod_emu.alive() == []


def test_self_destroy_falls_back_to_stop_and_says_so(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.pod_key_can_terminate = False
    destroyer = RunPodSelfDestroyer.from_environ(
        runpod_emu.pod_environ(pod.id), send=runpod_emu.pod_send(), clock=FakeClock()
    )
    said = destroyer.destroy_self()
    assert said.startswith("podTerminate was refused") and "stopped pod" in said and "reaper" in said
    assert isinstance(said, StoppedInstead)  # the ending turns it into a notification
    assert runpod_emu.pods[pod.id].state == "exited"


def test_a_not_found_that_is_a_refusal_is_not_believed(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.pod_key_not_found = True  # the pod key hears "pod not found to terminate"; the pod lives on
    destroyer = RunPodSelfDestroyer.from_environ(
        runpod_emu.pod_environ(pod.id), send=runpod_emu.pod_send(), clock=FakeClock()
    )
    said = destroyer.destroy_self()
    assert isinstance(said, StoppedInstead)
    assert "pod not found to terminate" in said and "still there" in said and "reaper" in said
    assert runpod_emu.pods[pod.id].state == "exited"  # stopped: only its volume bills until the reaper
    assert [r.op for r in runpod_emu.requests][-3:] == ["destroy", "get", "stop"]  # it read itself first
    assert runpod.destroy(pod.id) == "destroyed"  # the account key (the reaper's) still can


def test_a_not_found_for_a_pod_that_is_gone_is_believed(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    environ = runpod_emu.pod_environ(pod.id)
    runpod_emu.vanish(pod.id)
    destroyer = RunPodSelfDestroyer.from_environ(environ, send=runpod_emu.pod_send(), clock=FakeClock())
    said = destroyer.destroy_self()
    assert said == f"pod {pod.id} was already gone" and not isinstance(said, StoppedInstead)
    assert runpod_emu.ops("stop") == []


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
    with pytest.raises(ProviderError, match="access denied") as caught:  # 403 problem: a scoped key
        scoped.list_pods()
    assert caught.value.status == 403


def test_self_destroy_needs_both_variables() -> None:
    with pytest.raises(ConfigError, match="RUNPOD_POD_ID"):
        RunPodSelfDestroyer.from_environ({"RUNPOD_API_KEY": "x"})


def test_a_missing_key_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError) as caught:
        RunPodProvider.from_settings(Settings())
    assert "RUNPOD_API_KEY" in (caught.value.hint or "") and ".env" in (caught.value.hint or "")


def test_it_works_over_real_http(runpod_server: EmulatorServer, runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
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


def test_a_real_timeout_after_commit_leaves_one_pod(runpod_server: EmulatorServer, runpod_emu: RunPodEmulator) -> None:
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=f"{runpod_server.url}/graphql",
        rest_url=f"{runpod_server.url}/v2",
        # Wall clock, and it covers the connect and the lookups after: 2 s holds on a loaded machine (0.3 s
        # ran out before the create was sent); the emulator hangs 5 s, past it.
        timeout_s=2.0,
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


def test_the_drill_row_for_a_pod_key_told_not_found() -> None:
    # End to end: the real self-destroyer with the pod key, the real Ender (its notification), the real
    # reaper with the account key, against the emulator in pod_key_not_found mode.
    from gpuc.testkit.drill import run_drill
    from gpuc.testkit.drill_results import f9n_pod_key_hears_not_found

    [row] = run_drill(scenarios=[f9n_pod_key_hears_not_found]).rows
    assert (row.row, row.problems, row.within_bound) == ("F9n", [], True), row
    assert row.billed_min is not None and row.notifications >= 3  # job exit, "only stopped", destroyed
