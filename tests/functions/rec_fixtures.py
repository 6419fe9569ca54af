"""The recovering-run world (testkit/spot_world.py) as fixtures, on SQLite and on both stores: the recovery
tests import them (`from rec_fixtures import any_world, world`), which shadows conftest's pod worlds there."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from gpuc.core.clock import FakeClock
from gpuc.functions.dynamo import DynamoStore, create_table
from gpuc.testkit.spot_world import RecWorld, make_rec_world


@contextmanager
def moto_store() -> Iterator[DynamoStore]:
    """A DynamoStore on moto's in-process DynamoDB, its table as the stack creates it."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "gpuc-watchdog")
        yield DynamoStore("gpuc-watchdog", client)


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
