"""The Lambda adapters with Lambda-shaped events, against DynamoDB and SSM in moto (server mode)."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import pytest
from fakes.watchdog import ADMIN, FakeProvider, World

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.notify.notifier import Notifier
from gpuc.functions import aws as lam
from gpuc.functions.app import ProviderPool
from gpuc.functions.dynamo import DynamoStore, create_table
from gpuc.functions.edge import Request, Response

TABLE = "gpuc-watchdog"
PREFIX = "/gpuc/watchdog"


FUNCTION_URL_HOST = "abcdefghijklmnopqrstuvwxyz012345.lambda-url.us-east-1.on.aws"


def url_event(req: Request, *, b64: bool = False) -> dict[str, Any]:
    """A Function URL request, payload format 2.0."""
    body = base64.b64encode(req.body).decode() if b64 else req.body.decode()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": req.path,
        "rawQueryString": "",
        "headers": dict(req.headers),
        "requestContext": {
            "domainName": FUNCTION_URL_HOST,
            "http": {"method": req.method, "path": req.path, "sourceIp": "203.0.113.9"},
        },
        "body": body,
        "isBase64Encoded": b64,
    }


SCHEDULED = {"version": "0", "detail-type": "Scheduled Event", "source": "aws.scheduler", "detail": {}}


def via_lambda(req: Request, _deps: object = None, _now: float = 0.0) -> Response:
    import json

    out = lam.ingest_handler(url_event(req), None)
    assert out["headers"]["content-type"] == "application/json"
    return Response(out["statusCode"], json.loads(out["body"]))


class LambdaWorld(World):
    """World's helpers (register, ping, signed), but every call goes through ingest_handler."""

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        return via_lambda(Request(method, path, headers or {}, body))


@pytest.fixture
def world(aws: str, home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[LambdaWorld]:
    yield from lambda_world(home, clock, monkeypatch)


def lambda_world(
    home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, secrets: Mapping[str, str] | None = None
) -> Iterator[LambdaWorld]:
    """A cold start on moto: the table, the SSM parameters `gpuc watchdog deploy` stores (admin_token and
    `secrets`, {settings field: value}), the deps ingest_handler builds from them."""
    create_table(boto3.client("dynamodb"), TABLE)
    for name, value in {"admin_token": ADMIN, **(secrets or {})}.items():
        boto3.client("ssm").put_parameter(Name=f"{PREFIX}/{name}", Value=value, Type="SecureString")
    monkeypatch.setenv("TABLE_NAME", TABLE)
    monkeypatch.setenv("GPUC_SSM_PREFIX", PREFIX)
    monkeypatch.setenv("GPUC_PROVIDER", "fake")
    deps = lam.deps_from_env()  # what a cold start builds: the token from SSM, the store on DynamoDB
    provider = FakeProvider(clock)
    deps.providers = ProviderPool.of(provider)
    deps.clock = clock
    deps.notifier = Notifier(home / "outbox.jsonl", clock=clock, sleep=lambda s: None)
    lam.set_deps(deps)
    assert isinstance(deps.store, DynamoStore)
    yield LambdaWorld(clock, deps.settings, provider, deps.store, deps.notifier, deps)
    lam.set_deps(None)
    deps.close()


def test_the_admin_token_comes_from_ssm(world: LambdaWorld) -> None:
    assert world.deps.admin_token.get_secret_value() == ADMIN
    refused = world.call("GET", "/v1/status", headers={"Authorization": "Bearer nope"})
    assert refused.status == 401
    assert world.admin("GET", "/v1/status", None).status == 200


def test_a_heartbeat_is_accepted_and_last_seen_moves(world: LambdaWorld) -> None:
    world.register("p1")
    world.clock.advance(30)
    assert world.ping("p1").status == 200
    assert world.pod("p1").last_seen == world.now
    world.clock.advance(30)
    assert world.ping("p1").status == 200
    assert world.pod("p1").last_seen == world.now


def test_a_replayed_heartbeat_is_rejected_and_last_seen_stays(world: LambdaWorld) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    headers = world.signed("p1", body, 1)
    assert world.call("POST", "/v1/heartbeat", body, headers).status == 200
    seen = world.pod("p1").last_seen
    world.clock.advance(60)
    replay = world.call("POST", "/v1/heartbeat", body, headers)
    assert 400 <= replay.status < 500
    assert world.pod("p1").last_seen == seen


def test_a_forged_signature_is_401_and_nothing_is_stored(world: LambdaWorld) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    headers = {**world.signed("p1", body, 1), api.H_SIGNATURE: "0" * 64}
    answer = world.call("POST", "/v1/heartbeat", body, headers)
    assert answer.status == 401
    rec = world.pod("p1")
    assert (rec.last_seen, rec.last_seq) == (None, -1)


@pytest.mark.parametrize(
    "event",
    [
        {"rawPath": "/v1/heartbeat", "requestContext": {"http": {"method": "POST"}}, "body": "{nope"},
        {"rawPath": "/v1/pods", "requestContext": {"http": {"method": "POST"}}, "body": "x" * 200_000},
        {"rawPath": "/v1/pods", "requestContext": {"http": {"method": "POST"}}, "body": "!!", "isBase64Encoded": True},
        {"rawPath": "/v1/pods", "body": "{}"},
        {"rawPath": 7, "requestContext": {"http": {"method": "POST"}}},
        {"rawPath": "/v1/pods", "requestContext": {"http": {"method": "POST"}}, "headers": "x"},
    ],
    ids=["malformed-json", "huge-body", "bad-base64", "no-method", "bad-path", "bad-headers"],
)
def test_bad_input_is_a_4xx_and_stores_nothing(world: LambdaWorld, event: dict[str, Any]) -> None:
    event.setdefault("headers", {"authorization": f"Bearer {ADMIN}"})
    out = lam.ingest_handler(event, None)
    assert 400 <= out["statusCode"] < 500, out
    assert world.store.list_pods() == []


def test_a_base64_body_is_decoded(world: LambdaWorld) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    event = url_event(Request("POST", "/v1/heartbeat", world.signed("p1", body, 1), body), b64=True)
    assert lam.ingest_handler(event, None)["statusCode"] == 200
    assert world.pod("p1").last_seq == 1


def test_a_scheduled_event_delivered_twice_at_once_destroys_once(
    world: LambdaWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worst interleaving, made deterministic: the duplicate delivery runs whole between this pass's
    # read of "down" and its claim. No threads: the outcome rests on the ConditionExpression DynamoDB
    # evaluates, not on how moto happens to lock.
    claim = world.store.update_if
    duplicate: list[dict[str, Any]] = []

    def update_if(pod_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        if changes.get("state") == "destroying" and not duplicate:
            duplicate.append({})
            duplicate[0] = lam.reaper_handler(SCHEDULED, None)
        return claim(pod_id, expect, changes)

    monkeypatch.setattr(world.store, "update_if", update_if)
    world.register("p1")
    world.ping("p1")
    # The schedule as deployed, one pass a period, until the silent pod is destroyed: however many
    # passes the reaper's holds and graces take, the destroying one meets its duplicate
    for _ in range(50):
        assert lam.reaper_handler(SCHEDULED, None)["ok"]
        if world.provider.destroyed:
            break
        world.clock.advance(world.settings.reaper_period_s)
    assert duplicate and duplicate[0]["ok"]
    assert world.provider.destroyed == ["p1"]
    assert world.pod("p1").state == "destroyed"
    assert world.kinds("p1").count("destroyed") == 1
