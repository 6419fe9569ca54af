"""Pods carry their own proof on the AWS path too: the Lambda's key comes from SSM, a DynamoDB
table that lost its records re-learns a pod from the claim it presents, and deploy keeps the key unless
asked to rotate it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from fakes.claims import KEY, ClaimedPod
from test_aws_handlers import LambdaWorld, lambda_world

from gpuc.core.clock import FakeClock
from gpuc.core.signing import derive_key, watchdog_id
from gpuc.functions.deploy import watchdog_key_values
from gpuc.functions.deployplan import Plan
from gpuc.functions.dynamo import DynamoStore, create_table


@pytest.fixture
def world(aws: str, home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaWorld]:
    yield from lambda_world(home, clock, monkeypatch, secrets={"watchdog_key": KEY})


def test_the_lambda_takes_its_key_from_ssm_and_never_mints_one(world: LambdaWorld) -> None:
    assert world.deps.watchdog_id == watchdog_id(KEY)
    assert not (Path(world.settings.home) / "config.json").exists()


def test_a_table_that_lost_its_records_relearns_a_pinging_pod_from_its_claim(
    world: LambdaWorld, tmp_path: Path
) -> None:
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    world.clock.advance(30)
    assert pod.ping() is not None
    create_table(boto3.client("dynamodb"), "gpuc-watchdog-restored")  # restored from a backup without it
    world.store = world.deps.store = DynamoStore("gpuc-watchdog-restored", boto3.client("dynamodb"))
    world.reap()  # listed first: a stray the reaper adopts
    assert world.pod("pod-1").origin == "adopted"
    world.clock.advance(60)
    assert pod.ping() is not None
    rec = world.pod("pod-1")
    assert (rec.origin, rec.state, rec.key, rec.last_seen) == ("registered", "ok", derive_key(pod.token), world.now)


def test_deploy_keeps_the_watchdogs_key_and_rotates_it_only_when_asked(aws: str) -> None:
    session = boto3.Session(region_name="us-east-1")
    plan = Plan(
        region="us-east-1", stack_name="s", ssm_prefix="/gpuc/test", provider="runpod", runtime="", architecture=""
    )
    said: list[str] = []
    first = watchdog_key_values(session, plan, said.append)["watchdog_key"]
    ssm = session.client("ssm")
    ssm.put_parameter(Name="/gpuc/test/watchdog_key", Value=first, Type="SecureString")
    assert watchdog_key_values(session, plan, said.append)["watchdog_key"] == first
    assert "its key kept" in said[-1]
    plan.rotate_key = True
    rotated = watchdog_key_values(session, plan, said.append)["watchdog_key"]
    assert rotated != first and "a NEW key" in said[-1] and "deadlines" in said[-1]
    plan.rotate_key, plan.carried = False, ["p2", "p1"]
    ssm.put_parameter(Name="/gpuc/test/watchdog_carried", Value="p0", Type="SecureString")
    assert watchdog_key_values(session, plan, said.append)["watchdog_carried"] == "p0,p1,p2"
    assert "no provider re-marks" in said[-1]
    assert all(first not in line and rotated not in line for line in said)
