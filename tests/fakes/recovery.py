"""The recovering-run world (testkit/spot_world.py) as fixtures, on SQLite and on both stores: the recovery
tests import them (`from rec_fixtures import any_world, world`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.watchdog import moto_store
from gpuc.core.clock import FakeClock
from gpuc.testkit.spot_world import RecWorld, make_rec_world


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock)
    yield w
    w.close()


@pytest.fixture(params=["sqlite", "dynamodb"])
def any_world(request: pytest.FixtureRequest, home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    if request.param == "sqlite":
        w = make_rec_world(home, clock)
        yield w
        w.close()
        return
    with moto_store() as store:
        w = make_rec_world(home, clock, store=store)
        yield w
        w.close()
