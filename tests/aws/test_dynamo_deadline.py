"""The deadline on DynamoDB (moto, server mode): the record's field, the heartbeat answer's projection, the
route's conditional write (including "no deadline yet" = attribute absent) and the reaper's claim."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from fakes.watchdog import World, make_world

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.functions.dynamo import DynamoStore, create_table

TABLE = "gpuc-deadline"
HOUR = 3600.0


@pytest.fixture
def world(aws: str, home: Path, clock: FakeClock) -> Iterator[World]:
    client = boto3.client("dynamodb")
    create_table(client, TABLE)
    w = make_world(home, clock, store=DynamoStore(TABLE, client))
    yield w
    w.store.close()


def move(world: World, pod_id: str, **fields: object) -> api.DeadlineAnswer:
    answer = world.admin("POST", f"/v1/pods/{pod_id}/deadline", api.DeadlineRequest.model_validate(fields))
    assert answer.status == 200, answer.body
    return api.DeadlineAnswer.model_validate(answer.body)


def test_the_heartbeat_answer_reads_the_deadline_through_the_projection(world: World) -> None:
    deadline = world.now + 2 * HOUR
    world.register("p1", deadline_at=deadline)
    assert world.ping("p1").body["deadline_at"] == deadline
    world.register("old")  # no deadline stored: the answer reckons it from the start
    assert world.ping("old").body["deadline_at"] == world.now + world.settings.max_hours * HOUR


def test_the_route_moves_a_stored_deadline_and_one_never_stored(world: World) -> None:
    deadline = world.now + HOUR
    world.register("p1", deadline_at=deadline)
    assert move(world, "p1", extend_s=HOUR).deadline_at == deadline + HOUR
    assert world.pod("p1").deadline_at == deadline + HOUR
    world.register("old")  # attribute absent: the condition must say so, not compare with null
    started = world.pod("old").started_at
    assert started is not None
    answer = move(world, "old", extend_s=HOUR)
    assert answer.deadline_at == started + (world.settings.max_hours + 1) * HOUR == world.pod("old").deadline_at


def test_the_cap_is_refused_on_dynamodb_too(world: World) -> None:
    world.register("p1", deadline_at=world.now + HOUR)
    answer = world.admin("POST", "/v1/pods/p1/deadline", api.DeadlineRequest(extend_s=100 * HOUR))
    assert answer.status == 400 and "max_lifetime_hours" in answer.body["error"]
    assert world.pod("p1").deadline_at == world.now + HOUR


def test_a_pinging_busy_pod_is_destroyed_at_its_deadline(world: World) -> None:
    deadline = world.now + HOUR
    world.register("p1", deadline_at=deadline)
    world.provider.set("p1", gpu_util_pct=100.0)
    world.provider.on_list = lambda: pinged(world, "p1")  # a ping inside every pass, racing it
    world.run(HOUR + world.settings.reaper_period_s, keep_alive=("p1",))
    assert not world.provider.alive("p1")
    assert world.provider.destroyed_at["p1"] <= deadline + world.settings.reaper_period_s
    assert world.pod("p1").ended_by == "reaper"  # (its pings after the destroy revive the record: watched again)


def pinged(world: World, pod_id: str) -> None:
    assert world.ping(pod_id).status == 200
