"""DynamoStore reads every page of every Query it makes. DynamoDB ends a Query page at 1 MB with a
LastEvaluatedKey, and pod records never expire: a store that reads one page stops seeing (and reaping)
every pod past the first megabyte. moto never pages at test sizes, so the paging is tested on its own:
call by call with botocore's Stubber (the exact ExclusiveStartKey chain), and end to end on moto behind
a client that ends each page after a few items, as the 1 MB cut would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from fakes.watchdog import make_world
from moto import mock_aws

from gpuc.core.api import NotificationRecord
from gpuc.core.clock import FakeClock
from gpuc.functions.dynamo import DynamoStore, create_table
from gpuc.functions.store import StoredPod

TABLE = "gpuc-watchdog"
T0 = 1_700_000_000.0


class PagedClient:
    """A boto3 DynamoDB client whose Query pages end after `page` items with a LastEvaluatedKey, as
    DynamoDB's ends at 1 MB (fewer items than the Limit asked for). Everything else passes through."""

    def __init__(self, inner: Any, page: int) -> None:
        self.inner = inner
        self.page = page
        self.queries: list[dict[str, Any]] = []

    def query(self, **kwargs: Any) -> Any:
        self.queries.append(kwargs)
        limit = min(int(kwargs.get("Limit", self.page)), self.page)
        return self.inner.query(**{**kwargs, "Limit": limit})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def paged() -> Iterator[tuple[DynamoStore, PagedClient]]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, TABLE)
        wrapped = PagedClient(client, page=3)
        store = DynamoStore(TABLE, wrapped)  # type: ignore[arg-type]
        yield store, wrapped
        store.close()


def record(pod_id: str, at: float) -> StoredPod:
    return StoredPod.model_validate(
        {
            "pod_id": pod_id,
            "provider": "fake",
            "name": f"gpuc-{pod_id}",
            "experiment": "exp",
            "registered_at": at,
            "key": "ab" * 32,
        }
    )


def note(n: int) -> NotificationRecord:
    return NotificationRecord(ts=T0 + n, title=f"n{n}", message="m", kind="info", level="info")


def test_list_pods_reads_every_page(paged: tuple[DynamoStore, PagedClient]) -> None:
    store, client = paged
    for n in range(20):
        assert store.register(record(f"p{n:02d}", T0 + n)) == "created"
    client.queries.clear()
    assert [p.pod_id for p in store.list_pods()] == [f"p{n:02d}" for n in range(20)]
    assert len(client.queries) >= 7  # 20 records, 3 a page: the chain was followed to its end
    assert "ExclusiveStartKey" not in client.queries[0]
    assert all("ExclusiveStartKey" in q for q in client.queries[1:])


def test_recent_notifications_reads_past_a_short_page(paged: tuple[DynamoStore, PagedClient]) -> None:
    store, _ = paged
    for n in range(10):
        store.log_notification(note(n))
    assert [r.title for r in store.recent_notifications(7)] == [f"n{n}" for n in range(3, 10)]
    assert [r.title for r in store.recent_notifications(50)] == [f"n{n}" for n in range(10)]


def test_the_reaper_reaps_a_pod_past_the_first_page(home: Path, clock: FakeClock) -> None:
    """The silent pod's record sorts last: on a store that reads one page, it is never judged."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, TABLE)
        world = make_world(home, clock, store=DynamoStore(TABLE, PagedClient(client, page=2)))  # type: ignore[arg-type]
        healthy = [f"ok{n}" for n in range(5)]
        for pod_id in (*healthy, "zz-silent"):
            world.register(pod_id)
            world.ping(pod_id)
        settings = world.settings
        world.run(5 * 60 + settings.destroy_grace_s + 2 * settings.reaper_period_s, keep_alive=tuple(healthy))
        assert world.provider.destroyed == ["zz-silent"]
        assert world.pod("zz-silent").state == "destroyed"
        world.store.close()


# -- the exact chain, call by call --------------------------------------------------------------------


def pod_item(pod_id: str) -> dict[str, Any]:
    return {
        "pk": {"S": "pods"},
        "sk": {"S": pod_id},
        "pod_id": {"S": pod_id},
        "provider": {"S": "fake"},
        "name": {"S": f"gpuc-{pod_id}"},
        "experiment": {"S": "exp"},
        "registered_at": {"N": repr(T0)},
        "key": {"S": "ab" * 32},
    }


def notif_item(n: int) -> dict[str, Any]:
    return {"pk": {"S": "notif"}, "sk": {"S": f"{n:04d}"}, "record": {"S": note(n).model_dump_json()}}


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def query_of(pk: str, **extra: Any) -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": pk}},
        **extra,
    }


def test_list_pods_follows_the_last_evaluated_key_chain(stub: Stubber) -> None:
    query = query_of("pods", ConsistentRead=True)
    pages = [["a", "b"], ["c"], ["d", "e"]]
    start: dict[str, Any] = {}
    for n, ids in enumerate(pages):
        answer: dict[str, Any] = {"Items": [pod_item(i) for i in ids]}
        if n + 1 < len(pages):
            answer["LastEvaluatedKey"] = key("pods", ids[-1])
        stub.add_response("query", answer, {**query, **start})
        start = {"ExclusiveStartKey": key("pods", ids[-1])}
    store = DynamoStore(TABLE, stub.client)  # type: ignore[arg-type]
    assert [p.pod_id for p in store.list_pods()] == ["a", "b", "c", "d", "e"]


def test_recent_notifications_follows_the_chain_until_it_has_enough(stub: Stubber) -> None:
    query = query_of("notif", ScanIndexForward=False)
    # Newest first: a 1 MB page cut after two of the five asked for, then the rest
    stub.add_response(
        "query",
        {"Items": [notif_item(9), notif_item(8)], "LastEvaluatedKey": key("notif", "0008")},
        {**query, "Limit": 5},
    )
    stub.add_response(
        "query",
        {"Items": [notif_item(7), notif_item(6), notif_item(5)], "LastEvaluatedKey": key("notif", "0005")},
        {**query, "Limit": 3, "ExclusiveStartKey": key("notif", "0008")},
    )
    store = DynamoStore(TABLE, stub.client)  # type: ignore[arg-type]
    assert [r.title for r in store.recent_notifications(5)] == ["n5", "n6", "n7", "n8", "n9"]
