from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from watchdog_fakes import World, make_world

from gpuc.core.clock import FakeClock


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[World]:
    w = make_world(home, clock)
    yield w
    w.store.close()
