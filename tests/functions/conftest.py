from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.watchdog import World, make_world, moto_store

from gpuc.core.clock import FakeClock


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[World]:
    w = make_world(home, clock)
    yield w
    w.store.close()


@pytest.fixture(params=["sqlite", "dynamodb"])
def any_world(request: pytest.FixtureRequest, home: Path, clock: FakeClock) -> Iterator[World]:
    """The same world on both stores: SqliteStore, and DynamoStore on moto's in-process DynamoDB."""
    if request.param == "sqlite":
        world = make_world(home, clock)
        yield world
        world.store.close()
        return
    with moto_store() as store:
        world = make_world(home, clock, store=store)
        yield world
        world.store.close()
