from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.providers import RUNPOD_GRAPHQL_URL, RUNPOD_KEY, RUNPOD_REST_URL, VAST_KEY, VAST_URL

from gpuc.core.clock import FakeClock
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator


@pytest.fixture
def runpod_emu(clock: FakeClock) -> RunPodEmulator:
    return RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)


@pytest.fixture
def vast_emu(clock: FakeClock) -> VastEmulator:
    return VastEmulator(api_key=VAST_KEY, clock=clock)


@pytest.fixture
def runpod(runpod_emu: RunPodEmulator, clock: FakeClock) -> Iterator[RunPodProvider]:
    provider = RunPodProvider(
        RUNPOD_KEY,
        graphql_url=RUNPOD_GRAPHQL_URL,
        rest_url=RUNPOD_REST_URL,
        transport=runpod_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    yield provider
    provider.close()


@pytest.fixture
def vast(vast_emu: VastEmulator, clock: FakeClock) -> Iterator[VastProvider]:
    provider = VastProvider(VAST_KEY, url=VAST_URL, transport=vast_emu.transport(), clock=clock, backoff=zero_backoff)
    yield provider
    provider.close()


@pytest.fixture
def runpod_server(runpod_emu: RunPodEmulator) -> Iterator[EmulatorServer]:
    with EmulatorServer(runpod_emu, hang_s=5.0) as server:
        yield server


@pytest.fixture
def vast_server(vast_emu: VastEmulator) -> Iterator[EmulatorServer]:
    with EmulatorServer(vast_emu, hang_s=5.0) as server:
        yield server
