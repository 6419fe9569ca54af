"""DynamoStore's conditional writes, call by call, on a real boto3 client answered by botocore's Stubber.

A lost race is a ConditionalCheckFailedException from DynamoDB; here the Stubber raises it on the exact
call where a concurrent writer would have won, so every interleaving is deterministic (no threads, no
moto locking) and each test checks the ConditionExpression DynamoDB would evaluate, verbatim.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from gpuc.core.api import HeartbeatBody, Policy
from gpuc.functions.dynamo import DynamoStore
from gpuc.functions.store import StoredPod

TABLE = "gpuc-watchdog"
FAILED = "ConditionalCheckFailedException"
KEY_A, KEY_B = "ab" * 32, "cd" * 32
T0 = 1_700_000_000.0  # a real epoch: the API refuses timestamps outside 2020-2100
NOW = T0 + 100.0


@pytest.fixture
def store(stub: Stubber) -> DynamoStore:
    return DynamoStore(TABLE, stub.client)  # type: ignore[arg-type]


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def pod(**fields: object) -> StoredPod:
    base: dict[str, object] = {
        "pod_id": "p1",
        "provider": "fake",
        "name": "gpuc-p1",
        "experiment": "exp",
        "registered_at": T0,
        "key": KEY_A,
    }
    return StoredPod.model_validate({**base, **fields})


def item(**overrides: dict[str, Any]) -> dict[str, Any]:
    """The stored item of `pod()`, as DynamoDB holds it."""
    stored: dict[str, Any] = {
        **key("pods", "p1"),
        "pod_id": {"S": "p1"},
        "provider": {"S": "fake"},
        "name": {"S": "gpuc-p1"},
        "experiment": {"S": "exp"},
        "registered_at": {"N": repr(T0)},
        "last_seq": {"N": "-1"},
        "state": {"S": "ok"},
        "key": {"S": KEY_A},
        "policy": {"S": Policy.model_validate({}).model_dump_json()},
        "interruptible": {"BOOL": False},
        "origin": {"S": "registered"},
    }
    return {**stored, **overrides}


def expect_get(stub: Stubber, found: dict[str, Any] | None, pk: str = "pods", sk: str = "p1") -> None:
    response = {"Item": found} if found is not None else {}
    stub.add_response("get_item", response, {"TableName": TABLE, "Key": key(pk, sk), "ConsistentRead": True})


def sent_updates(stub: Stubber) -> list[dict[str, Any]]:
    """The parameters of every UpdateItem made from now on, for checks finer than the Stubber's equality."""
    sent: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        sent.append(dict(params))

    stub.client.meta.events.register("before-parameter-build.dynamodb.UpdateItem", record)
    return sent


def beat(seq: int) -> HeartbeatBody:
    return HeartbeatBody.model_validate({"pod_id": "p1", "seq": seq, "sent_at": T0})


# update_if: the compare-and-set every reaper decision goes through


def update_if_params(**extra: Any) -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "Key": key("pods", "p1"),
        # attribute_exists(pk): UpdateItem on a missing key would create a phantom pod; with it, a write
        # to a deleted or unknown pod is a failed condition instead
        "ConditionExpression": "attribute_exists(pk) AND #n0 = :v0 AND attribute_not_exists(#n1)",
        "UpdateExpression": "SET #n2 = :v1, #n3 = :v2 REMOVE #n4",
        "ExpressionAttributeNames": {
            "#n0": "state",
            "#n1": "end_at",
            "#n2": "state",
            "#n3": "destroy_at",
            "#n4": "reason",
        },
        "ExpressionAttributeValues": {":v0": {"S": "ok"}, ":v1": {"S": "down"}, ":v2": {"N": "9.0"}},
        **extra,
    }


def claim(store: DynamoStore) -> bool:
    return store.update_if("p1", {"state": "ok", "end_at": None}, {"state": "down", "destroy_at": 9.0, "reason": None})


def test_update_if_sends_the_expected_state_as_its_condition(stub: Stubber, store: DynamoStore) -> None:
    stub.add_response("update_item", {}, update_if_params())
    assert claim(store)


def test_update_if_that_loses_the_race_returns_false(stub: Stubber, store: DynamoStore) -> None:
    stub.add_client_error("update_item", FAILED, expected_params=update_if_params())
    assert not claim(store)


def test_update_if_lets_any_other_error_raise(stub: Stubber, store: DynamoStore) -> None:
    # A throttle is not a lost race: reading it as False would let the caller act as if another pass won
    stub.add_client_error("update_item", "ProvisionedThroughputExceededException", expected_params=update_if_params())
    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        claim(store)


def test_update_if_with_a_set_of_states_is_one_in_condition(stub: Stubber, store: DynamoStore) -> None:
    stub.add_response(
        "update_item",
        {},
        {
            "TableName": TABLE,
            "Key": key("pods", "p1"),
            "ConditionExpression": "attribute_exists(pk) AND #n0 IN (:v0, :v1)",
            "UpdateExpression": "SET #n1 = :v2",
            "ExpressionAttributeNames": {"#n0": "state", "#n1": "state"},
            "ExpressionAttributeValues": {":v0": {"S": "late"}, ":v1": {"S": "down"}, ":v2": {"S": "ended"}},
        },
    )
    assert store.update_if("p1", {"state": ("late", "down")}, {"state": "ended"})


def test_update_if_refuses_unknown_fields_and_empty_changes_without_a_call(store: DynamoStore) -> None:
    with pytest.raises(ValueError, match="unknown pod fields"):
        store.update_if("p1", {"state; drop": "x"}, {"state": "ok"})
    assert not store.update_if("p1", {"state": "ok"}, {})  # the stub fixture fails on any call made


# register and adopt: create-if-absent, then compare-and-set on (state, key)


def put_new_params(stored: dict[str, Any]) -> dict[str, Any]:
    return {"TableName": TABLE, "Item": stored, "ConditionExpression": "attribute_not_exists(pk)"}


def test_register_creates_only_if_absent(stub: Stubber, store: DynamoStore) -> None:
    expect_get(stub, None)
    stub.add_response("put_item", {}, put_new_params(item()))
    assert store.register(pod()) == "created"


def test_register_that_loses_the_create_race_updates_the_winner(stub: Stubber, store: DynamoStore) -> None:
    expect_get(stub, None)
    stub.add_client_error("put_item", FAILED, expected_params=put_new_params(item()))
    expect_get(stub, item(key={"S": KEY_B}))  # the winner registered with another token
    stub.add_response("update_item", {})
    sent = sent_updates(stub)
    assert store.register(pod()) == "updated"
    names, values = sent[0]["ExpressionAttributeNames"], sent[0]["ExpressionAttributeValues"]
    assert sent[0]["ConditionExpression"] == "attribute_exists(pk) AND #n0 = :v0 AND #n1 = :v1"
    assert (names["#n0"], values[":v0"]) == ("state", {"S": "ok"})
    assert (names["#n1"], values[":v1"]) == ("key", {"S": KEY_B})  # only over the token it read
    assert "last_seq" in names.values()  # a new token starts a new seq stream


def test_register_after_the_pod_ended_in_between_is_refused(stub: Stubber, store: DynamoStore) -> None:
    # Read "ok", then the reaper ends it before our write: the update's condition fails, the re-read sees
    # "ended", and the pod is not revived
    expect_get(stub, item())
    stub.add_client_error("update_item", FAILED)
    expect_get(stub, item(state={"S": "ended"}))
    assert store.register(pod()) == "refused"


def test_register_gives_up_loudly_after_endless_lost_races(stub: Stubber, store: DynamoStore) -> None:
    for _ in range(8):
        expect_get(stub, None)
        stub.add_client_error("put_item", FAILED, expected_params=put_new_params(item()))
    with pytest.raises(RuntimeError, match="too many concurrent changes"):
        store.register(pod())


def test_adopt_never_overwrites(stub: Stubber, store: DynamoStore) -> None:
    adopted = item(origin={"S": "adopted"}, key={"S": ""})
    stub.add_response("put_item", {}, put_new_params(adopted))
    stub.add_client_error("put_item", FAILED, expected_params=put_new_params(adopted))
    assert store.adopt(pod(origin="adopted", key=""))
    assert not store.adopt(pod(origin="adopted", key=""))


# record_heartbeat: two conditional shapes, one per old state


def heartbeat_body_value(seq: int) -> dict[str, Any]:
    return {"S": beat(seq).model_dump_json()}


def unmarked_params(seq: int, now: float) -> dict[str, Any]:
    """Shape one: any state but late/down, and the seq must rise."""
    return {
        "TableName": TABLE,
        "Key": key("pods", "p1"),
        "ConditionExpression": "attribute_exists(pk) AND #n0 < :v0 AND NOT (#n1 IN (:v1, :v2))",
        "UpdateExpression": "SET #n2 = :v3, #n3 = :v4, #n4 = :v5",
        "ExpressionAttributeNames": {
            "#n0": "last_seq",
            "#n1": "state",
            "#n2": "last_seen",
            "#n3": "last_seq",
            "#n4": "last_heartbeat",
        },
        "ExpressionAttributeValues": {
            ":v0": {"N": str(seq)},
            ":v1": {"S": "late"},
            ":v2": {"S": "down"},
            ":v3": {"N": repr(now)},
            ":v4": {"N": str(seq)},
            ":v5": heartbeat_body_value(seq),
        },
    }


def marked_params(seq: int, now: float) -> dict[str, Any]:
    """Shape two: a late/down pod pinged again; the mark (state, destroy_at, reason) is cancelled."""
    return {
        "TableName": TABLE,
        "Key": key("pods", "p1"),
        "ConditionExpression": "attribute_exists(pk) AND #n0 IN (:v0, :v1) AND #n1 < :v2",
        "UpdateExpression": "SET #n2 = :v3, #n3 = :v4, #n4 = :v5, #n5 = :v6 REMOVE #n6, #n7",
        "ExpressionAttributeNames": {
            "#n0": "state",
            "#n1": "last_seq",
            "#n2": "last_seen",
            "#n3": "last_seq",
            "#n4": "last_heartbeat",
            "#n5": "state",
            "#n6": "destroy_at",
            "#n7": "reason",
        },
        "ExpressionAttributeValues": {
            ":v0": {"S": "late"},
            ":v1": {"S": "down"},
            ":v2": {"N": str(seq)},
            ":v3": {"N": repr(now)},
            ":v4": {"N": str(seq)},
            ":v5": heartbeat_body_value(seq),
            ":v6": {"S": "ok"},
        },
    }


def test_a_heartbeat_on_an_unmarked_pod_is_one_write(stub: Stubber, store: DynamoStore) -> None:
    stub.add_response("update_item", {}, unmarked_params(3, NOW))
    assert store.record_heartbeat("p1", 3, NOW, beat(3))


def test_a_heartbeat_on_a_marked_pod_cancels_the_mark(stub: Stubber, store: DynamoStore) -> None:
    stub.add_client_error("update_item", FAILED, expected_params=unmarked_params(3, NOW))
    stub.add_response("update_item", {}, marked_params(3, NOW))
    assert store.record_heartbeat("p1", 3, NOW, beat(3))


@pytest.mark.parametrize(
    "stored", [item(last_seq={"N": "3"}), item(last_seq={"N": "9"}), None], ids=["replay", "older", "unknown"]
)
def test_a_heartbeat_whose_seq_does_not_rise_is_refused(
    stub: Stubber, store: DynamoStore, stored: dict[str, Any] | None
) -> None:
    stub.add_client_error("update_item", FAILED, expected_params=unmarked_params(3, NOW))
    stub.add_client_error("update_item", FAILED, expected_params=marked_params(3, NOW))
    expect_get(stub, stored)
    assert not store.record_heartbeat("p1", 3, NOW, beat(3))


def test_a_heartbeat_racing_a_state_change_is_retried_not_lost(stub: Stubber, store: DynamoStore) -> None:
    # Shape one fails (the reaper had just marked the pod down), shape two fails (an older ping cancelled
    # the mark in between): the seq still rises, so it goes round again and lands. A lost ping here is
    # a false kill later.
    stub.add_client_error("update_item", FAILED, expected_params=unmarked_params(3, NOW))
    stub.add_client_error("update_item", FAILED, expected_params=marked_params(3, NOW))
    expect_get(stub, item(last_seq={"N": "2"}))
    stub.add_response("update_item", {}, unmarked_params(3, NOW))
    assert store.record_heartbeat("p1", 3, NOW, beat(3))


# claim_event_seq and put_meta


def claim_params(seq: int, now: float, keep_s: float) -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "Item": {
            **key("evt#p1", str(seq)),
            "received_at": {"N": repr(now)},
            "expires_at": {"N": str(int(now + keep_s) + 1)},
        },
        # A claim older than the window may be taken again (TTL deletion lags by days)
        "ConditionExpression": "attribute_not_exists(pk) OR #n0 < :v0",
        "ExpressionAttributeNames": {"#n0": "received_at"},
        "ExpressionAttributeValues": {":v0": {"N": repr(now - keep_s)}},
    }


def test_an_event_seq_is_claimed_once(stub: Stubber, store: DynamoStore) -> None:
    stub.add_response("put_item", {}, claim_params(5, NOW, 600.0))
    stub.add_client_error("put_item", FAILED, expected_params=claim_params(5, NOW, 600.0))
    assert store.claim_event_seq("p1", 5, NOW, keep_s=600.0)
    assert not store.claim_event_seq("p1", 5, NOW, keep_s=600.0)


def test_an_event_claim_lets_any_other_error_raise(stub: Stubber, store: DynamoStore) -> None:
    # A throttled claim read as "already claimed" would drop a real event as a replay
    stub.add_client_error("put_item", "ThrottlingException", expected_params=claim_params(5, NOW, 600.0))
    with pytest.raises(ClientError, match="Throttling"):
        store.claim_event_seq("p1", 5, NOW, keep_s=600.0)


def once_params(event_id: str, now: float, keep_s: float) -> dict[str, Any]:
    return {
        "TableName": TABLE,
        "Item": {**key("once#vasthook", event_id), "expires_at": {"N": str(int(now + keep_s) + 1)}},
        # The table's TTL deletes it after the window; until AWS gets to it (days), the condition treats an
        # expired one as absent.
        "ConditionExpression": "attribute_not_exists(pk) OR #n0 <= :v0",
        "ExpressionAttributeNames": {"#n0": "expires_at"},
        "ExpressionAttributeValues": {":v0": {"N": str(int(now))}},
    }


def test_a_key_seen_once_carries_its_ttl_and_is_claimed_once(stub: Stubber, store: DynamoStore) -> None:
    stub.add_response("put_item", {}, once_params("evt_1", NOW, 300.0))
    stub.add_client_error("put_item", FAILED, expected_params=once_params("evt_1", NOW, 300.0))
    assert store.claim_once("vasthook", "evt_1", NOW, keep_s=300.0)
    assert not store.claim_once("vasthook", "evt_1", NOW, keep_s=300.0)


def test_meta_is_created_only_if_absent(stub: Stubber, store: DynamoStore) -> None:
    new = {**key("meta", "reaper"), "value": {"S": '{"last_run": 1.0}'}, "version": {"N": "1"}}
    stub.add_response("put_item", {}, put_new_params(new))
    stub.add_client_error("put_item", FAILED, expected_params=put_new_params(new))
    assert store.put_meta("reaper", {"last_run": 1.0}, None)
    assert not store.put_meta("reaper", {"last_run": 1.0}, None)


def test_meta_is_updated_only_at_the_version_read(stub: Stubber, store: DynamoStore) -> None:
    params = {
        "TableName": TABLE,
        "Key": key("meta", "reaper"),
        "UpdateExpression": "SET #n1 = :v0, #n0 = :v1",
        "ConditionExpression": "#n0 = :v2",
        "ExpressionAttributeNames": {"#n0": "version", "#n1": "value"},
        "ExpressionAttributeValues": {":v0": {"S": '{"last_run": 3.0}'}, ":v1": {"N": "5"}, ":v2": {"N": "4"}},
    }
    stub.add_response("update_item", {}, params)
    stub.add_client_error("update_item", FAILED, expected_params=params)
    assert store.put_meta("reaper", {"last_run": 3.0}, 4)
    assert not store.put_meta("reaper", {"last_run": 3.0}, 4)
