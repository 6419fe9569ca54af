from __future__ import annotations

from collections.abc import Iterator

import pytest
from fakes.reconcile import T0, World

from gpuc.core.clock import FakeClock
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def runpod_server(clock: FakeClock) -> Iterator[EmulatorServer]:
    with EmulatorServer(RunPodEmulator(clock=clock), hang_s=5.0) as server:
        yield server


@pytest.fixture
def vast_server(clock: FakeClock) -> Iterator[EmulatorServer]:
    with EmulatorServer(VastEmulator(clock=clock), hang_s=5.0) as server:
        yield server


@pytest.fixture
def runpod_world(runpod_server: EmulatorServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with World("runpod", runpod_server, clock, monkeypatch) as world:
        yield world


@pytest.fixture
def vast_world(vast_server: EmulatorServer, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with World("vast", vast_server, clock, monkeypatch) as world:
        yield world


@pytest.fixture(params=["runpod", "vast"])
def world(request: pytest.FixtureRequest) -> World:
    """Each test that takes `world` runs once against each provider's emulator."""
    found: World = request.getfixturevalue(f"{request.param}_world")
    return found
