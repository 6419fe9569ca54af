"""Unauthenticated and hostile input against the real Lambda handler, on DynamoDB and CloudWatch in moto.

What a forged request costs is counted, not guessed: every DynamoDB call the ingest makes goes through
botocore's event hooks on the store's own client. `pytest tests/aws/test_unauth_aws.py -s` prints the
figures docs/aws-cost.md quotes.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_aws_handlers import SCHEDULED, LambdaWorld, world  # noqa: F401 - `world` is the fixture

from gpuc.core import api
from gpuc.functions import aws as lam
from gpuc.functions.aws import CloudWatchIngestHealth
from gpuc.functions.dynamo import DynamoStore
from gpuc.functions.store import UNVERIFIED_RESOLUTION_S

INGEST = "gpuc-watchdog-ingest"
WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")


class DynamoCalls:
    """Every DynamoDB operation the store's client sends, by name."""

    def __init__(self, store: DynamoStore) -> None:
        self.ops: Counter[str] = Counter()
        store.client.meta.events.register("before-call.dynamodb", self._count)

    def _count(self, model: Any, **_: Any) -> None:
        self.ops[model.name] += 1

    def take(self) -> Counter[str]:
        ops, self.ops = self.ops, Counter()
        return ops

    @staticmethod
    def writes(ops: Counter[str]) -> int:
        return sum(ops[w] for w in WRITES)


def forged(at: LambdaWorld, pod_id: str, i: int, path: str = "/v1/heartbeat") -> int:
    """A well-shaped request with a current timestamp and a signature nobody made."""
    body = at.heartbeat_body(pod_id, i + 1)
    headers = {
        api.H_POD: pod_id,
        api.H_TIMESTAMP: str(int(at.now)),
        api.H_SEQ: str(i + 1),
        api.H_SIGNATURE: f"{i:064x}",
    }
    return at.call("POST", path, body, headers).status


def test_a_request_that_fails_authentication_costs_one_read_and_no_write(world: LambdaWorld) -> None:  # noqa: F811
    world.register("p1")
    world.provider.add("stray")
    assert lam.reaper_handler(SCHEDULED, None)["ok"]  # the reaper lists the stray: an adopted record
    assert world.pod("stray").origin == "adopted"
    assert isinstance(world.store, DynamoStore)
    calls = DynamoCalls(world.store)
    n = 300

    for i in range(n):  # invented ids (a flood once cost 299 UpdateItem calls for these)
        assert forged(world, f"made{i:05d}up", i) == 401
    unknown = calls.take()
    for i in range(n):  # a real pod's id, a bad signature, on both signed routes
        assert forged(world, "p1", i, "/v1/heartbeat" if i % 2 else "/v1/events") == 401
    bad_signature = calls.take()
    for i in range(n):  # bad admin tokens: refused before any read
        answer = world.call("GET", "/v1/status", b"", {"Authorization": f"Bearer wrong-{i}"})
        assert answer.status == 401
    bad_admin = calls.take()
    for i in range(n):  # a real stray's id, one ping a second for five minutes
        world.clock.advance(1.0)
        assert forged(world, "stray", i) == 401
    stray = calls.take()

    assert unknown == Counter({"GetItem": n}), unknown
    assert bad_signature == Counter({"GetItem": n}), bad_signature
    assert bad_admin == Counter(), bad_admin
    assert stray["GetItem"] == n
    assert DynamoCalls.writes(stray) == stray["UpdateItem"] <= n / UNVERIFIED_RESOLUTION_S + 1
    assert stray["UpdateItem"] >= 1  # and what it writes is the stray's own time, nothing else
    for name, ops in (("unknown id", unknown), ("bad signature", bad_signature), ("stray's id", stray)):
        print(f"per forged ping ({name}): {ops['GetItem'] / n:.2f} GetItem, {DynamoCalls.writes(ops) / n:.3f} writes")
    assert [p.pod_id for p in world.store.list_pods()] == ["p1", "stray"]


def put_metric(name: str, at: float, value: float, function: str = INGEST) -> None:
    boto3.client("cloudwatch").put_metric_data(
        Namespace="AWS/Lambda",
        MetricData=[
            {
                "MetricName": name,
                "Dimensions": [{"Name": "FunctionName", "Value": function}],
                "Timestamp": datetime.fromtimestamp(at, tz=UTC),
                "Value": value,
                "Unit": "Count",
            }
        ],
    )


def test_cloudwatch_ingest_health_reads_the_ingests_own_metrics(world: LambdaWorld) -> None:  # noqa: F811
    health = CloudWatchIngestHealth(INGEST)
    now = world.now
    assert health.trouble(now - 600, now) is None  # sparse metrics: no data point, nothing happened
    put_metric("Throttles", now - 300, 40)
    put_metric("Errors", now - 1800, 3)  # outside the window
    put_metric("Url5xxCount", now - 240, 2, function="someone-else")  # another function
    trouble = health.trouble(now - 600, now)
    assert trouble is not None and "throttled 40 times" in trouble and "failed" not in trouble
    put_metric("Url5xxCount", now - 120, 2)
    assert "answered 5xx 2 times" in (health.trouble(now - 600, now) or "")


def test_a_throttled_ingest_holds_silence_kills_and_alerts_once(
    world: LambdaWorld,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """F18 on AWS: a flood fills the ingest's reserved concurrency, real heartbeats get 429s, and the reaper
    reads the ingest's Throttles before it takes a silent pod for dead."""
    monkeypatch.setenv("INGEST_FUNCTION_NAME", INGEST)
    deps = lam.deps_from_env()  # what the reaper's cold start builds from the template's environment
    assert isinstance(deps.ingest_health, CloudWatchIngestHealth)
    deps.store.close()
    world.deps.ingest_health = deps.ingest_health
    world.register("p1")
    world.ping("p1")
    flood_from = world.now
    period = world.settings.reaper_period_s
    for _ in range(10):  # 50 min of flood: every minute throttled, p1's heartbeats among the refused
        for minute in range(int(period // 60)):
            put_metric("Throttles", world.now + minute * 60, 250)
        world.clock.advance(period)
        assert lam.reaper_handler(SCHEDULED, None)["ok"]
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    ingest = [n for n in world.store.recent_notifications(100) if n.kind == "ingest"]
    assert len(ingest) == 1 and "throttled" in ingest[0].message  # said once (nagged only after an hour)
    # The flood ends; p1 is really dead: destroyed once the window holds no trouble.
    flood_end = world.now
    for _ in range(12):
        world.clock.advance(period)
        assert lam.reaper_handler(SCHEDULED, None)["ok"]
        if world.provider.destroyed:
            break
    assert world.provider.destroyed == ["p1"]
    s = world.settings
    assert world.now - flood_end <= s.silence_limit_s + 2 * period + s.destroy_grace_s + period
    titles = [n.title for n in world.store.recent_notifications(100) if n.kind == "ingest"]
    assert titles == [ingest[0].title, "gpuc: the watchdog's ingest is healthy again"]  # once, then the all-clear
    assert flood_from < flood_end


def test_a_reaper_that_cannot_read_the_ingests_health_holds_silence_kills(world: LambdaWorld) -> None:  # noqa: F811
    class Denied:
        def get_metric_statistics(self, **_: Any) -> dict[str, Any]:
            raise RuntimeError("AccessDenied: not authorized to perform cloudwatch:GetMetricStatistics")

    world.deps.ingest_health = CloudWatchIngestHealth(INGEST, client=Denied())
    world.register("p1")
    world.ping("p1")
    for _ in range(12):
        world.clock.advance(world.settings.reaper_period_s)
        assert lam.reaper_handler(SCHEDULED, None)["ok"]
    assert world.provider.destroyed == []
    alert = [n for n in world.store.recent_notifications(100) if n.kind == "ingest"]
    assert alert and "could not be checked" in alert[0].message


# -- Lambda edge events: never a 5xx, nothing stored ---------------------------------------

TEXT: st.SearchStrategy[str] = st.text(max_size=12) | st.sampled_from(
    ["\ud800", "x\udfff", "/v1/heartbeat", "/v1/pods", "POST"]
)
ANY_VALUE: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.integers(), st.booleans(), TEXT, st.lists(TEXT, max_size=2), st.just({})
)
NAMES = st.sampled_from(["x-gpuc-pod", "x-gpuc-timestamp", "x-gpuc-seq", "x-gpuc-signature", "authorization"])
HEADERS: st.SearchStrategy[Any] = st.none() | ANY_VALUE | st.dictionaries(NAMES | TEXT, TEXT | ANY_VALUE, max_size=5)
HTTP: st.SearchStrategy[Any] = st.none() | ANY_VALUE | st.fixed_dictionaries({"method": ANY_VALUE})
CONTEXT: st.SearchStrategy[Any] = st.none() | ANY_VALUE | st.fixed_dictionaries({"http": HTTP})


@st.composite
def events(draw: st.DrawFn) -> dict[str, Any]:
    event: dict[str, Any] = {}
    for key, values in (
        ("requestContext", CONTEXT),
        ("rawPath", ANY_VALUE),
        ("headers", HEADERS),
        ("body", st.none() | ANY_VALUE | st.just('{"pod_id": "\\ud800"}')),
        ("isBase64Encoded", ANY_VALUE),
    ):
        if draw(st.booleans()):
            event[key] = draw(values)
    return event


EDGE_EVENTS = [
    {"requestContext": None, "rawPath": "/v1/pods"},
    {"requestContext": {"http": None}, "rawPath": "/v1/pods"},
    {"requestContext": {"http": {"method": "POST"}}, "rawPath": "/v1/heartbeat", "headers": None, "body": None},
    {"requestContext": {"http": {"method": "POST"}}, "rawPath": "/v1/heartbeat", "headers": {"x-gpuc-seq": 7}},
    {
        "requestContext": {"http": {"method": "POST"}},
        "rawPath": "/v1/heartbeat",
        "headers": {
            "x-gpuc-pod": 12345,
            "x-gpuc-timestamp": "1790000000",
            "x-gpuc-seq": "1",
            "x-gpuc-signature": "0" * 64,
        },
        "body": "{}",
    },
    {"requestContext": {"http": {"method": "GET"}}, "rawPath": "/v1/status", "headers": {"authorization": ["x"]}},
    {"requestContext": {"http": {"method": "POST"}}, "rawPath": "/v1/heartbeat", "headers": {"x-gpuc-pod": "\ud800"}},
    {"requestContext": {"http": {"method": "POST"}}, "rawPath": "/v1/pods", "body": '{"pod_id": "\ud800"}'},
    {"requestContext": {"http": {"method": "POST"}}, "rawPath": "/v1/\udfff"},
    {"requestContext": {"http": {"method": "POST"}}, "rawPath": "/v1/pods", "isBase64Encoded": "false"},
]


def _answer(event: Any) -> int:
    out = lam.ingest_handler(event, None)
    json.loads(out["body"])  # always JSON
    status = out["statusCode"]
    assert isinstance(status, int)
    return status


@pytest.mark.parametrize("event", EDGE_EVENTS)
def test_a_malformed_lambda_event_is_a_400(world: LambdaWorld, event: dict[str, Any]) -> None:  # noqa: F811
    event.setdefault("headers", {"authorization": "Bearer x"})
    assert _answer(event) == 400
    assert world.store.list_pods() == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(event=events())
def test_no_lambda_event_shape_gets_a_5xx_or_stores_anything(world: LambdaWorld, event: dict[str, Any]) -> None:  # noqa: F811
    assert 400 <= _answer(event) < 500
    assert world.store.list_pods() == []
    assert world.store.recent_notifications() == []
