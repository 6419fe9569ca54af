"""The providers as the tests reach them: planted keys, fixture bodies, pod specs, and a RunPod client on the
emulator (the real RunPodProvider, in-process, no backoff) for the tests outside tests/providers, which has its
own fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from gpuc.core.clock import FakeClock
from gpuc.core.models import PodSpec
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator

FIXTURES = Path(__file__).parent.parent / "providers" / "fixtures"
# Planted keys: distinct values that must never show up in an error, a log record or a request record.
RUNPOD_KEY = "rpa_" + "PLANTED7c1f0e9d8b7a6958473625140"  # built: no token-shaped literal in the repo
VAST_KEY = "f00dPLANTEDvastkey4c3b2a19087f6e5d"
RUNPOD_GRAPHQL_URL = "https://api.runpod.test/graphql"
RUNPOD_REST_URL = "https://api.runpod.test/v2"
VAST_URL = "https://console.vast.test/api/v0"
VAST_OFFER = "11684738"  # the Vast emulator's RTX 4090 that passes every default filter
RTX4090 = "NVIDIA GeForce RTX 4090"
P = TypeVar("P", bound=RunPodProvider)


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def spec(provider: str, run_id: str = "run0001", **fields: Any) -> PodSpec:
    values: dict[str, Any] = {
        "experiment": "tiny-llama",
        "run_id": run_id,
        "provider": provider,
        "gpu_type": "RTX 4090",
    }
    return PodSpec(**{**values, **fields})


# A CreatePodRequest REST v2 takes, as gpuc sends it: the tests of the emulator's strictness vary it one field at
# a time.
GOOD_CREATE: dict[str, Any] = {
    "name": "gpuc-x",
    "image": "runpod/pytorch",
    "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
    "cloud": "SECURE",
    "disk": 20,
    "mounts": {"persistent": {"size": 30, "path": "/workspace"}},
    "ports": ["22/tcp"],
    "env": {"A": "1"},
    "startSsh": True,
}


def runpod_on(emu: RunPodEmulator, clock: FakeClock, **options: Any) -> RunPodProvider:
    """A RunPod client whose every request goes to `emu` (its transport), on the test's clock."""
    return runpod_of(RunPodProvider, emu, clock, **options)


def runpod_of(kind: type[P], emu: RunPodEmulator, clock: FakeClock, **options: Any) -> P:
    """The same, of a subclass (one that records or stops what the real client does)."""
    return kind(
        RUNPOD_KEY,
        graphql_url=RUNPOD_GRAPHQL_URL,
        rest_url=RUNPOD_REST_URL,
        transport=emu.transport(),
        clock=clock,
        backoff=zero_backoff,
        **options,
    )
