"""A provider's error text reaches the reaper's alerts defanged, gpuc's own words never.

A destroy the provider refuses is a "destroy FAILED: still billing" alert quoting why: Vast's `msg`, RunPod's
problem `detail`. Those are the provider's words (on Vast some come from a stranger's host): a link in them
became a link on the phone under gpuc's name, and a terminal escape reached `gpuc watchdog serve`'s console.
Here the Vast emulator itself answers the destroy with such a message, through the real VastProvider.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.watchdog import World

from gpuc.core.models import PodSpec
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.functions.app import ProviderPool
from gpuc.testkit.emulators.common import EmuResponse
from gpuc.testkit.emulators.vast import VastEmulator

VAST_KEY = "f00dPLANTEDvastkey4c3b2a19087f6e5d"
HOSTILE = "https://evil.example/login \x1b]8;;https://evil.example\x07re-enter your key\x1b]8;;\x07 \x1b[2J<!channel>"
MIN = 60.0


class HostileVast(VastEmulator):
    """Vast whose refusals carry a message shaped by someone else: a link, an OSC 8 hyperlink, a screen clear."""

    def fault_answer(self, op: str, kind: str) -> EmuResponse:
        if kind == "400":
            return EmuResponse.json(400, {"success": False, "error": "invalid_args", "msg": HOSTILE})
        return super().fault_answer(op, kind)


@pytest.fixture
def vast(world: World) -> Iterator[tuple[VastProvider, HostileVast]]:
    emu = HostileVast(api_key=VAST_KEY, clock=world.clock)
    provider = VastProvider(VAST_KEY, transport=emu.transport(), clock=world.clock, backoff=zero_backoff)
    world.deps.providers = ProviderPool.of(world.provider, provider)
    yield provider, emu
    provider.close()


def destroy_failed_alerts(world: World, pod_id: str) -> str:
    return "\n".join(f"{m.title}\n{m.message}" for m in world.outbox() if m.pod_id == pod_id)


def test_a_vast_refusal_quoted_in_destroy_failed_is_defanged(
    world: World, vast: tuple[VastProvider, HostileVast]
) -> None:
    provider, emu = vast
    pod = provider.create(PodSpec(experiment="exp", run_id="run1", provider="vast", gpu_type="RTX 4090"))
    world.register(pod.id, at_provider=False, provider=provider)  # type: ignore[arg-type]
    world.ping(pod.id)
    emu.faults.add(op="destroy", kind="400", times=None)  # every destroy refused, in the stranger's words
    world.run(world.settings.silence_limit_s + 20 * MIN)
    said = destroy_failed_alerts(world, pod.id)
    assert "destroy FAILED: still billing" in said, said  # the alert went out, quoting the provider
    assert "hxxps://evil[.]example/login" in said and "re-enter your key" in said
    assert "https://evil.example" not in said and "evil.example" not in said and "<!channel>" not in said
    assert "\x1b" not in said and "\x07" not in said
    # gpuc's own words around the quote are untouched: the guidance still reads as typed.
    assert "The reaper retries on its next pass." in said
    assert emu.alive(), "the refused destroy left the instance billing: the alert is about a real pod"


def test_the_reapers_blind_reason_is_defanged_too(world: World, vast: tuple[VastProvider, HostileVast]) -> None:
    """The same words reach the status (`gpuc ls`, the page) as why the reaper cannot read Vast."""
    provider, emu = vast
    pod = provider.create(PodSpec(experiment="exp", run_id="run1", provider="vast", gpu_type="RTX 4090"))
    world.register(pod.id, at_provider=False, provider=provider)  # type: ignore[arg-type]
    emu.faults.add(op="list", kind="400", times=None)
    world.reap()
    why = " ".join(b["why"] for b in world.admin("GET", "/v1/status").body["reaper_blind_since"])
    assert "hxxps://evil[.]example" in why, why
    assert "evil.example" not in why and "\x1b" not in why


def test_the_pods_own_self_destroy_refusal_quoting_vast_is_defanged(world: World) -> None:
    """The pod's agent quotes the provider's refusal in its destroy_failed event (instance_side/ending.py): the
    watchdog renders every pod event as the pod's words, defanged, the same way."""
    world.register("p1")
    text = f"self-destroy refused (vast: {HOSTILE}); heartbeats stop now, the reaper will destroy the pod"
    assert world.event("p1", "destroy_failed", text).status == 200
    said = destroy_failed_alerts(world, "p1")
    assert "hxxps://evil[.]example/login" in said, said
    assert "evil.example" not in said and "<!channel>" not in said and "\x1b" not in said
