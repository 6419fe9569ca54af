"""`get` answers None only when the provider POSITIVELY says the pod is gone (core/providers/base.py);
any doubt raises. Gone means the reaper stops watching a pod, or takes a destroy as done: a pod read as
gone while it lives bills unwatched. Through the emulators: an empty answer, an unreadable pod next to a
"not found", one RunPod API lagging behind the other, a 404 from the wrong place, a status nobody listed;
and inside the pod, a "not found" to its own key next to a read of itself that fails."""

from __future__ import annotations

import pytest
from providerfakes import RUNPOD_GRAPHQL_URL, RUNPOD_KEY, VAST_OFFER, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.runpod import RunPodProvider, RunPodSelfDestroyer, status_from_graphql, status_from_v2
from gpuc.core.providers.vast import VastInstance, VastProvider, VastSelfDestroyer, status_of
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator

# -- RunPod: REST v2 GET /v2/pods/{id} first (404 problem = gone), GraphQL `pod` for the detail --------------


def test_a_pod_graphql_does_not_show_yet_is_not_gone(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.set_status(pod.id, "running")
    runpod_emu.graphql_lag.add(pod.id)  # REST v2 sees it running; GraphQL's `pod` answers null
    found = runpod.get(pod.id)
    assert found is not None and found.status == "running"
    assert found.managed  # v2 carries the env: it is still known as gpuc's
    assert [p.id for p in runpod.list_pods()] == [pod.id]


def test_a_pod_graphql_answers_with_empty_data_for_is_not_gone(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.set_status(pod.id, "running")
    runpod_emu.faults.add("get", "empty_data")  # {"data": {}}
    found = runpod.get(pod.id)
    assert found is not None and found.status == "running"


def test_a_pod_rest_v2_does_not_show_yet_is_not_gone(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.set_status(pod.id, "running")
    runpod_emu.v2_lag.add(pod.id)  # GraphQL (which created it) shows it; REST v2 answers a 404 problem
    found = runpod.get(pod.id)
    assert found is not None and found.status == "running" and found.managed
    runpod_emu.v2_lag.clear()
    runpod_emu.vanish(pod.id)
    assert runpod.get(pod.id) is None  # both agree: gone


@pytest.mark.parametrize("kind", ["empty_object", "empty_list", "schema_drift"])
def test_an_empty_or_unreadable_v2_pod_next_to_a_graphql_null_raises(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, kind: str
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.graphql_lag.add(pod.id)  # GraphQL says null: "not found"
    runpod_emu.faults.add("get_v2", kind, times=None)  # and REST v2 answers 200 with nothing readable
    with pytest.raises(ProviderError):
        runpod.get(pod.id)


@pytest.mark.parametrize("kind", ["empty_object", "empty_item"])
def test_an_empty_graphql_answer_raises_rather_than_reading_as_a_pod(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, kind: str
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add("get", kind, times=None)  # {} / {"data": {"pod": {}}}
    with pytest.raises(ProviderError):
        runpod.get(pod.id)


def test_a_404_from_the_wrong_rest_url_is_never_read_as_gone(runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=RUNPOD_GRAPHQL_URL,
        rest_url="https://api.runpod.test/api/v2",  # answers the emulator's plain-text "404 page not found"
        transport=runpod_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    try:
        pod = provider.create(spec("runpod"))
        runpod_emu.vanish(pod.id)  # GraphQL says null too: only the 404's shape tells the two apart
        with pytest.raises(ProviderError, match="404"):
            provider.get(pod.id)
    finally:
        provider.close()


@pytest.mark.parametrize("status", ["MIGRATING", "", "terminated"])
def test_a_runpod_status_nobody_listed_reads_as_unknown_never_as_gone(status: str) -> None:
    assert status_from_graphql(status, runtime_up=True, spot=False) in ("unknown", "running")
    assert status_from_graphql(status, runtime_up=False, spot=False) == "unknown"
    assert status_from_v2(status, spot=False) == "unknown"
    assert status_from_v2(None, spot=False) == "unknown"


# -- Vast: GET /api/v0/instances/{id}/?owner=me, {"instances": null} = gone ---------------------------


@pytest.mark.parametrize("kind", ["empty_object", "empty_list", "empty_data", "empty_item", "schema_drift"])
def test_an_empty_vast_answer_raises_never_reads_as_gone(vast: VastProvider, vast_emu: VastEmulator, kind: str) -> None:
    pod = vast.create(spec("vast", offer_id=VAST_OFFER))
    vast_emu.faults.add("get", kind, times=None)  # {} / [] / {"instances": []} / {"instances": {}} / renamed
    with pytest.raises(ProviderError):
        vast.get(pod.id)


@pytest.mark.parametrize("kind", ["404", "success_false"])
def test_a_vast_refusal_or_404_of_a_read_is_not_gone(vast: VastProvider, vast_emu: VastEmulator, kind: str) -> None:
    pod = vast.create(spec("vast", offer_id=VAST_OFFER))
    vast_emu.faults.add("get", kind, times=None)
    with pytest.raises(ProviderError):
        vast.get(pod.id)


def test_only_instances_null_is_gone(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=VAST_OFFER))
    assert vast.get(pod.id) is not None
    vast_emu.vanish(pod.id)
    assert vast.get(pod.id) is None


@pytest.mark.parametrize("actual", ["hibernating", "", "TERMINATED"])
def test_a_vast_status_nobody_listed_reads_as_unknown_never_as_gone(actual: str) -> None:
    assert status_of(VastInstance(id=1, actual_status=actual)) == "unknown"


# -- inside the pod: "not found" from its own key plus a read of itself that fails ---------------------------
# The pod key may hear "not found" because it is refused. If the pod then cannot read itself, nothing says
# it is gone: it stops itself (only its disk bills) and says so, for the reaper to destroy.


def test_a_runpod_pod_told_not_found_that_cannot_read_itself_stops_itself(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.pod_key_not_found = True
    runpod_emu.faults.add("get", "500", times=None)  # its own `pod` read fails
    destroyer = RunPodSelfDestroyer.from_environ(
        runpod_emu.pod_environ(pod.id), transport=runpod_emu.transport(), backoff=zero_backoff
    )
    said = destroyer.destroy_self()
    assert isinstance(said, StoppedInstead) and "still there" in said
    assert runpod_emu.pods[pod.id].state == "exited"


def test_a_vast_instance_told_not_found_that_cannot_read_itself_stops_itself(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    pod = vast.create(spec("vast", offer_id=VAST_OFFER))
    vast_emu.pod_key_not_found = True
    vast_emu.faults.add("get", "500", times=None)
    destroyer = VastSelfDestroyer.from_environ(
        vast_emu.pod_environ(pod.id), transport=vast_emu.transport(), backoff=zero_backoff
    )
    said = destroyer.destroy_self()
    assert isinstance(said, StoppedInstead) and "still there" in said
    assert vast_emu.ops("stop") != []
