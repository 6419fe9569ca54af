"""`get` answers None only when the provider POSITIVELY says the pod is gone (core/providers/base.py);
any doubt raises. Gone means the reaper stops watching a pod, or takes a destroy as done: a pod read as
gone while it lives bills unwatched. Through the emulators: an empty answer, an unreadable pod, a RunPod
"not found" read only once, a listing lagging behind the read by id, a 404 from the wrong place, a status
nobody listed;
and inside the pod, a "not found" to its own key next to a read of itself that fails."""

from __future__ import annotations

import pytest
from fakes.providers import RUNPOD_GRAPHQL_URL, RUNPOD_KEY, RUNPOD_REST_URL, VAST_OFFER, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.podkey import RunPodSelfDestroyer, VastSelfDestroyer
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_pods import status_from_v2
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_instances import VastInstance, status_of
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator

# -- RunPod: REST v2 GET /v2/pods/{id}; a 404 problem twice, a moment apart, is gone ------------------------


def test_a_pod_the_listing_does_not_show_yet_is_read_by_id(runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    runpod_emu.list_lag_s = 30.0  # GET /v2/pods leaves a new pod out for a while; GET /v2/pods/{id} knows it
    runpod = RunPodProvider(RUNPOD_KEY, rest_url=RUNPOD_REST_URL, transport=runpod_emu.transport(), clock=clock)
    pod = runpod.create(spec("runpod"))
    assert runpod.list_pods() == []
    found = runpod.get(pod.id)
    assert found is not None and found.managed  # v2 carries the env: it is still known as gpuc's


@pytest.mark.parametrize("times", [1, 2])
def test_not_found_once_or_twice_is_not_gone_until_read_again(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, times: int
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add("get", "404", times=times)  # a 404 problem for a pod that is there
    found = runpod.get(pod.id)
    if times == 1:
        assert found is not None and found.id == pod.id
    else:
        assert found is None  # two positive "not found"s: the contract's gone (the reaper then reads again)
    assert len(runpod_emu.ops("get")) == 2


@pytest.mark.parametrize("kind", ["empty_object", "empty_list", "empty_item", "schema_drift", "success_false"])
def test_an_empty_or_unreadable_v2_pod_raises_never_reads_as_gone(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator, kind: str
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add("get", kind, times=None)  # REST v2 answers 200 with nothing readable
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
        pod_id = runpod_emu.add_foreign_pod("gpuc-run0001")
        runpod_emu.vanish(pod_id)  # gone indeed: only the 404's shape tells the two apart
        with pytest.raises(ProviderError, match="404"):
            provider.get(pod_id)
    finally:
        provider.close()


@pytest.mark.parametrize("status", ["MIGRATING", "", "terminated"])
def test_a_runpod_status_nobody_listed_reads_as_unknown_never_as_gone(status: str) -> None:
    assert status_from_v2(status) == "unknown"
    assert status_from_v2(None) == "unknown"


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
        runpod_emu.pod_environ(pod.id), send=runpod_emu.pod_send(), clock=FakeClock()
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
        vast_emu.pod_environ(pod.id), send=vast_emu.pod_send(), clock=FakeClock()
    )
    said = destroyer.destroy_self()
    assert isinstance(said, StoppedInstead) and "still there" in said
    assert vast_emu.ops("stop") != []
