from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

sys.path.insert(0, str(Path(__file__).parent))

from watchdog_fakes import World, make_world

from gpuc.core.clock import FakeClock
from gpuc.functions.dynamo import DynamoStore, create_table


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
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "gpuc-watchdog")
        world = make_world(home, clock, store=DynamoStore("gpuc-watchdog", client))
        yield world
        world.store.close()
