"""The pod's own end decided once (core/providers/podkey.ScopedSelfDestroyer), against a scripted API.

The money at stake: a pod that believes a refusal or a disguised "not found" keeps billing with its heartbeats
stopped, until the reaper's silence limit. Every row says what the provider answered, what the pod then
called, and what it tells the ending (a StoppedInstead is a destroy_failed notification: the reaper's cue).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Self, cast

import pytest
from fakes.providers import spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderAuthError, ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.podhttp import PodKeyHttp
from gpuc.core.providers.podkey import (
    RunPodSelfDestroyer,
    ScopedSelfDestroyer,
    SelfWords,
    TerminateRefused,
    VastSelfDestroyer,
)
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator

WORDS = SelfWords(
    "fake",
    noun="pod",
    call="podTerminate",
    short="terminate",
    done="terminated",
    not_found="answered 'not found'",
    disk="volume",
    kept="its volume stays",
)
OFFER = "11684738"
NOT_FOUND = ProviderError("pod not found", provider="fake", status=404)


@dataclass
class ScriptedApi(ScopedSelfDestroyer):
    """terminate: "done", "not_found", "refused" or an exception; stop: None (it works) or an exception."""

    terminate_answer: str | Exception = "done"
    read_answer: bool | None = True
    stop_answer: Exception | None = None
    calls: list[str] = field(default_factory=list)

    words = WORDS

    @classmethod
    def with_client(cls, own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> Self:
        raise AssertionError("scripted: no client")

    @property
    def own_id(self) -> str:
        return "p1"

    def terminate(self) -> bool:
        self.calls.append("terminate")
        if isinstance(self.terminate_answer, Exception):
            raise self.terminate_answer
        if self.terminate_answer == "refused":
            raise TerminateRefused("Unauthorized")
        return self.terminate_answer == "done"

    def stop(self) -> None:
        self.calls.append("stop")
        if self.stop_answer is not None:
            raise self.stop_answer

    def stop_found_nothing(self, exc: ProviderError) -> bool:
        return exc.status == 404

    def read_self(self) -> bool | None:
        self.calls.append("read_self")
        return self.read_answer


REFUSED_STOPPED = (
    "podTerminate was refused (Unauthorized); stopped pod p1 instead: its volume still bills until the reaper"
    " destroys it"
)
DISGUISED_STOPPED = (
    "podTerminate answered 'not found' but pod p1 is still there; stopped pod p1 instead: its volume still"
    " bills until the reaper destroys it"
)


@pytest.mark.parametrize(
    ("api", "said", "stopped", "calls"),
    [
        (ScriptedApi(), "terminated pod p1", False, ["terminate"]),
        (ScriptedApi(terminate_answer="refused"), REFUSED_STOPPED, True, ["terminate", "stop"]),
        # "not found" and the pod reads itself as gone: believed, and nothing else is called.
        (
            ScriptedApi(terminate_answer="not_found", read_answer=False),
            "pod p1 was already gone",
            False,
            ["terminate", "read_self"],
        ),
        # "not found" but the pod is still there: a refusal in disguise, so it stops itself.
        (
            ScriptedApi(terminate_answer="not_found", read_answer=True),
            DISGUISED_STOPPED,
            True,
            ["terminate", "read_self", "stop"],
        ),
        # "not found" and it cannot read itself: it stops itself all the same.
        (
            ScriptedApi(terminate_answer="not_found", read_answer=None),
            DISGUISED_STOPPED,
            True,
            ["terminate", "read_self", "stop"],
        ),
        # ... and when that stop finds nothing too, both calls agree: it is gone.
        (
            ScriptedApi(terminate_answer="not_found", read_answer=None, stop_answer=NOT_FOUND),
            "pod p1 was already gone (terminate and stop both found nothing)",
            False,
            ["terminate", "read_self", "stop"],
        ),
    ],
    ids=["terminated", "refused", "not-found-gone", "not-found-still-there", "not-found-unreadable", "not-found-twice"],
)
def test_the_decision(api: ScriptedApi, said: str, stopped: bool, calls: list[str]) -> None:
    answer = api.destroy_self()
    assert (answer, isinstance(answer, StoppedInstead), api.calls) == (said, stopped, calls)


@pytest.mark.parametrize(
    ("api", "raised", "calls"),
    [
        # A refused terminate whose stop fails too: no answer to believe, the ending says destroy_failed.
        (
            ScriptedApi(terminate_answer="refused", stop_answer=ProviderAuthError("no", provider="fake", status=403)),
            ProviderAuthError,
            ["terminate", "stop"],
        ),
        # The pod is there and the stop says "not found": that is no proof of gone, never "already gone".
        (
            ScriptedApi(terminate_answer="not_found", read_answer=True, stop_answer=NOT_FOUND),
            ProviderError,
            ["terminate", "read_self", "stop"],
        ),
        (
            ScriptedApi(
                terminate_answer="not_found",
                read_answer=None,
                stop_answer=ProviderUnavailable("timeout", provider="fake"),
            ),
            ProviderUnavailable,
            ["terminate", "read_self", "stop"],
        ),
        # An answer that is not one (a timeout, a body gpuc cannot read) is never acted on as a refusal.
        (
            ScriptedApi(terminate_answer=ProviderUnavailable("timeout", provider="fake")),
            ProviderUnavailable,
            ["terminate"],
        ),
        (
            ScriptedApi(terminate_answer=ProviderSchemaError("odd body", provider="fake")),
            ProviderSchemaError,
            ["terminate"],
        ),
    ],
    ids=[
        "refused-stop-refused",
        "still-there-stop-not-found",
        "unreadable-stop-timeout",
        "terminate-timeout",
        "terminate-unreadable",
    ],
)
def test_what_cannot_be_decided_raises(api: ScriptedApi, raised: type[Exception], calls: list[str]) -> None:
    with pytest.raises(raised):
        api.destroy_self()
    assert api.calls == calls


def test_the_kept_pod_stops_and_never_terminates() -> None:
    api = ScriptedApi()
    answer = api.stop_self()
    assert (answer, isinstance(answer, StoppedInstead), api.calls) == (
        "stopped pod p1: GPU billing ended, its volume stays",
        False,
        ["stop"],
    )
    refused = ScriptedApi(stop_answer=ProviderAuthError("no", provider="fake", status=403))
    with pytest.raises(ProviderAuthError):
        refused.stop_self()
    assert refused.calls == ["stop"]


# -- the providers' own calls, against the emulators ------------------------------------------------
@dataclass
class OwnPod:
    """A running pod of one provider's emulator, and how it destroys itself."""

    emulator: RunPodEmulator | VastEmulator
    pod_id: str
    environ: dict[str, str]
    kind: type[RunPodSelfDestroyer] | type[VastSelfDestroyer]

    def destroyer(self) -> ScopedSelfDestroyer:
        return self.kind.from_environ(self.environ, send=self.emulator.pod_send(), clock=FakeClock())


@pytest.fixture(params=["runpod", "vast"])
def own(request: pytest.FixtureRequest) -> OwnPod:
    name = str(request.param)
    emulator = cast(RunPodEmulator | VastEmulator, request.getfixturevalue(f"{name}_emu"))
    provider = cast(RunPodProvider | VastProvider, request.getfixturevalue(name))
    pod = provider.create(spec(name, offer_id=OFFER) if name == "vast" else spec(name))
    kind = RunPodSelfDestroyer if name == "runpod" else VastSelfDestroyer
    return OwnPod(emulator, pod.id, emulator.pod_environ(pod.id), kind)


def test_a_stop_that_finds_nothing_after_an_unreadable_self_is_gone(own: OwnPod) -> None:
    own.emulator.pod_key_not_found = True
    own.emulator.vanish(own.pod_id)
    own.emulator.faults.add(op="get", kind="500", times=None)  # the pod cannot read itself
    said = own.destroyer().destroy_self()
    words = own.kind.words
    assert said == f"{words.noun} {own.pod_id} was already gone ({words.short} and stop both found nothing)"
    assert not isinstance(said, StoppedInstead)


def test_a_refused_stop_is_never_taken_for_gone(own: OwnPod) -> None:
    own.emulator.pod_key_not_found = True
    own.emulator.faults.add(op="get", kind="500", times=None)
    own.emulator.faults.add(op="stop", kind="403")
    with pytest.raises(ProviderError):
        own.destroyer().destroy_self()
    assert len(own.emulator.alive()) == 1 and own.emulator.ops("stop")  # it tried; the pod bills on: raised


def test_vast_a_destroy_answer_gpuc_cannot_read_is_no_refusal_to_stop_on(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.faults.add(op="destroy", kind="404")  # a 404 without Vast's not-found body
    destroyer = VastSelfDestroyer.from_environ(
        vast_emu.pod_environ(pod.id), send=vast_emu.pod_send(), clock=FakeClock()
    )
    with pytest.raises(ProviderSchemaError):
        destroyer.destroy_self()
    assert vast_emu.ops("stop") == []
