"""Recovery on AWS: a run registered through the ingest Lambda (Function URL events), kept in DynamoDB (moto,
server mode), re-rented by the reaper Lambda's pass on the Vast emulator, booted once through the ingest Lambda."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from test_aws_handlers import PREFIX, SCHEDULED, TABLE, url_event

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.signing import new_watchdog_key
from gpuc.functions import aws as lam
from gpuc.functions.app import ProviderPool
from gpuc.functions.dynamo import DynamoStore, create_table
from gpuc.functions.edge import Request, Response
from gpuc.functions.recovery import runs
from gpuc.testkit.spot_world import ADMIN, RUN_ID, WAIT_S, RecWorld, make_rec_world


class LambdaRecWorld(RecWorld):
    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        out = lam.ingest_handler(url_event(Request(method, path, headers or {}, body)), None)
        return Response(out["statusCode"], json.loads(out["body"]))

    def reap(self) -> api.ReapReport:
        lam.reaper_handler(SCHEDULED, None)  # the scheduled pass, on the Lambda's own deps
        return api.ReapReport(ran_at=self.now)


@pytest.fixture
def world(aws: str, home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaRecWorld]:
    create_table(boto3.client("dynamodb"), TABLE)
    for name, value in {"admin_token": ADMIN, "watchdog_key": new_watchdog_key()}.items():
        boto3.client("ssm").put_parameter(Name=f"{PREFIX}/{name}", Value=value, Type="SecureString")
    monkeypatch.setenv("TABLE_NAME", TABLE)
    monkeypatch.setenv("GPUC_SSM_PREFIX", PREFIX)
    monkeypatch.setenv("GPUC_PROVIDER", "vast")
    monkeypatch.setenv("GPUC_RECOVER_WAIT_S", str(WAIT_S))
    monkeypatch.setenv("GPUC_SILENCE_LIMIT_S", str(24 * 3600))
    deps = lam.deps_from_env()
    local = make_rec_world(home, clock, store=deps.store)
    deps.providers = ProviderPool.of(local.vast)
    deps.clock = clock
    deps.notifier = local.deps.notifier
    lam.set_deps(deps)
    assert isinstance(deps.store, DynamoStore) and deps.watchdog_key is not None
    yield LambdaRecWorld(clock, local.emu, local.vast, deps.settings, deps.store, deps)
    lam.set_deps(None)
    deps.close()


def test_a_run_recovers_and_boots_once_on_aws(world: LambdaRecWorld) -> None:
    first = world.up()
    assert runs.live_ids(world.store) == [RUN_ID]
    world.outbid()
    world.reap()
    world.clock.advance(WAIT_S + 1)
    world.reap()
    run = world.run()
    assert len(run.attempts) == 2 and world.creates() == 2 and run.attempts[0].pod_id == first.id
    new = run.latest.pod_id
    ticket = world.ticket_of(new)
    assert world.boot(new, ticket).status == 200
    assert world.boot(new, ticket).status == 403  # spent
    view = world.admin("GET", f"/v1/runs/{RUN_ID}")
    assert view.status == 200 and len(view.body["attempts"]) == 2
    assert world.admin("POST", f"/v1/runs/{RUN_ID}/stop").status == 200 and world.run().stop_asked
