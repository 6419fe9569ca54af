"""The RunPod emulator's account key and a provider client on the emulator, for the tests outside
tests/providers (which has its own fixtures): the real RunPodProvider, in-process, no backoff."""

from __future__ import annotations

from typing import Any, TypeVar

from gpuc.core.clock import FakeClock
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator

RUNPOD_KEY = "rpa_" + "PLANTED7c1f0e9d8b7a6958473625140"  # built: no token-shaped literal in the repo
RTX4090 = "NVIDIA GeForce RTX 4090"
P = TypeVar("P", bound=RunPodProvider)


def runpod_on(emu: RunPodEmulator, clock: FakeClock, **options: Any) -> RunPodProvider:
    """A RunPod client whose every request goes to `emu` (its transport), on the test's clock."""
    return runpod_of(RunPodProvider, emu, clock, **options)


def runpod_of(kind: type[P], emu: RunPodEmulator, clock: FakeClock, **options: Any) -> P:
    """The same, of a subclass (one that records or stops what the real client does)."""
    return kind(
        RUNPOD_KEY,
        graphql_url="https://api.runpod.test/graphql",
        rest_url="https://api.runpod.test/v2",
        transport=emu.transport(),
        clock=clock,
        backoff=zero_backoff,
        **options,
    )
