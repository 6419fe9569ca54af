"""`DynamoStore`: the `Store` interface on one on-demand DynamoDB table (single-table design).

Items, keyed by (pk, sk):

    pk="pods",   sk=<pod_id>        one pod (every StoredPod field; None = attribute absent)
    pk="meta",   sk=<key>           {value (JSON), version}
    pk="notif",  sk=<ts>#<ns>#<rnd> one notification, newest last
    pk="evt#<pod_id>", sk=<seq>     a claimed event seq
    pk="once#<kind>", sk=<key>      a key seen once (claim_once: a webhook delivery's event id)

All pods share one partition so the reaper lists them with one Query (no Scan); at one ping a minute
per pod that partition is far below DynamoDB's per-partition limits. Every state change is a
ConditionExpression, the same compare-and-set SqliteStore does in SQL, so a scheduled event delivered
twice acts once. The `expires_at` TTL attribute only cleans up old notifications, event seqs and
keys seen once (each also refused by its own time in the condition, since TTL deletion can lag by days);
nothing the reaper decides on ever expires, decisions compare `now - last_seen`.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Collection, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import boto3
from pydantic import BaseModel

from gpuc.core.api import HeartbeatBody, NotificationRecord
from gpuc.functions.store import (
    _COLUMNS,
    _JSON_FIELDS,
    AUTH_FIELDS,
    FINISHED_STATES,
    MetaRecord,
    PodAuth,
    Registration,
    StoredPod,
    _check_columns,
    reregistration_changes,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PODS = "pods"
TTL_ATTRIBUTE = "expires_at"
NOTIFICATION_KEEP_S = 30 * 24 * 3600.0
_CAS_RETRIES = 8
# What every signed request reads first: its one read, whatever its signature (a request that fails
# authentication costs this and nothing more). DynamoDB bills a read by the whole item's size (4 KB
# units), projection or not; the projection keeps the decode small on the ping path.
_AUTH_FIELDS = ("key", "lease_until", "state", "origin", "unverified_ping_at")


def _to_attr(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        # repr keeps every bit of a float; Decimal(float) would too, but with 50 digits DynamoDB refuses
        return {"N": repr(float(value)) if isinstance(value, float) else str(value)}
    if isinstance(value, str):
        return {"S": value}
    raise TypeError(f"cannot store {type(value).__name__}")


def _from_attr(attr: Mapping[str, Any]) -> Any:
    if "BOOL" in attr:
        return bool(attr["BOOL"])
    if "N" in attr:
        # DynamoDB normalises numbers ("100.0" comes back "100"); pydantic turns ints back into floats
        number = Decimal(attr["N"])
        return int(number) if number == number.to_integral_value() else float(number)
    if "S" in attr:
        return attr["S"]
    return None


def _encode(column: str, value: Any) -> Any:
    if column in _JSON_FIELDS and value is not None:
        return value.model_dump_json() if isinstance(value, BaseModel) else json.dumps(value)
    return value


def _decode(item: Mapping[str, Any]) -> StoredPod:
    data: dict[str, Any] = {c: _from_attr(item[c]) for c in _COLUMNS if c in item}
    for column in _JSON_FIELDS:
        if data.get(column) is not None:
            data[column] = json.loads(data[column])
    return StoredPod.model_validate(data)


class _Expr:
    """Builds expression names/values with generated placeholders: field names never enter the text."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, column: str) -> str:
        ref = f"#n{len(self.names)}"
        self.names[ref] = column
        return ref

    def value(self, value: Any) -> str:
        ref = f":v{len(self.values)}"
        self.values[ref] = _to_attr(value)
        return ref

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.names:
            out["ExpressionAttributeNames"] = self.names
        if self.values:
            out["ExpressionAttributeValues"] = self.values
        return out

    def condition(self, expect: Mapping[str, Any]) -> str:
        parts = ["attribute_exists(pk)"]
        for column, value in expect.items():
            ref = self.name(column)
            if value is None:
                parts.append(f"attribute_not_exists({ref})")
            elif isinstance(value, tuple | list | frozenset | set):
                options = [self.value(_encode(column, v)) for v in value]
                parts.append(f"{ref} IN ({', '.join(options)})" if options else "attribute_not_exists(pk)")
            else:
                parts.append(f"{ref} = {self.value(_encode(column, value))}")
        return " AND ".join(parts)

    def update(self, changes: Mapping[str, Any]) -> str:
        sets, removes = [], []
        for column, value in changes.items():
            ref = self.name(column)
            if value is None:
                removes.append(ref)
            else:
                sets.append(f"{ref} = {self.value(_encode(column, value))}")
        text = f"SET {', '.join(sets)}" if sets else ""
        return f"{text} REMOVE {', '.join(removes)}" if removes else text


class DynamoStore:
    """Thread-safe: a boto3 client is, and the store keeps no other state."""

    def __init__(self, table: str, client: DynamoDBClient | None = None) -> None:
        if client is None:
            client = boto3.client("dynamodb")
        self.table = table
        self._db = client
        self._failed = client.exceptions.ConditionalCheckFailedException

    @property
    def client(self) -> DynamoDBClient:
        """The boto3 client (tests count its calls through its event hooks)."""
        return self._db

    def get_pod(self, pod_id: str) -> StoredPod | None:
        item = self._get(PODS, pod_id)
        return _decode(item) if item is not None else None

    def get_auth(self, pod_id: str) -> PodAuth | None:
        expr = _Expr()
        projection = ", ".join(expr.name(c) for c in AUTH_FIELDS)
        got = self._db.get_item(
            TableName=self.table,
            Key=_key(PODS, pod_id),
            ProjectionExpression=projection,
            ConsistentRead=True,
            **expr.kwargs(),
        )
        item = got.get("Item")
        if not item:
            return None
        return PodAuth(pod_id=pod_id, **{k: _from_attr(item[k]) for k in AUTH_FIELDS if k in item})

    def list_pods(self, states: Collection[str] | None = None) -> list[StoredPod]:
        wanted = None if states is None else frozenset(states)
        pods = [_decode(item) for item in self._query(PODS)]
        pods = [p for p in pods if wanted is None or p.state in wanted]
        return sorted(pods, key=lambda p: (p.registered_at, p.pod_id))

    def register(self, pod: StoredPod) -> Registration:
        for _ in range(_CAS_RETRIES):  # each round is a conditional write: lost races re-read
            old = self.get_pod(pod.pod_id)
            if old is None:
                if self._put_new(PODS, pod.pod_id, _pod_attrs(pod)):
                    return "created"
                continue
            if old.state in FINISHED_STATES:
                return "refused"
            changes = reregistration_changes(old, pod)
            if self.update_if(pod.pod_id, {"state": old.state, "key": old.key}, changes):
                return "updated"
        raise RuntimeError(f"register {pod.pod_id}: too many concurrent changes")

    def adopt(self, pod: StoredPod) -> bool:
        return self._put_new(PODS, pod.pod_id, _pod_attrs(pod))

    def record_heartbeat(self, pod_id: str, seq: int, now: float, body: HeartbeatBody) -> bool:
        # DynamoDB has no CASE in an update: two conditional shapes, one per old state. Only one can
        # match; both failing means the seq did not rise, the pod is unknown, or the state moved between.
        # The common case (not marked) goes first: a failed conditional write is billed like a write.
        moved = {"last_seen": now, "last_seq": seq, "last_heartbeat": body}
        unmark = {**moved, "state": "ok", "destroy_at": None, "reason": None}
        for _ in range(_CAS_RETRIES):
            if self._cas_heartbeat(pod_id, seq, None, moved):
                return True
            if self._cas_heartbeat(pod_id, seq, ("late", "down"), unmark):
                return True
            current = self.get_auth_seq(pod_id)
            if current is None or current >= seq:
                return False
        return False

    def get_auth_seq(self, pod_id: str) -> int | None:
        item = self._get(PODS, pod_id)
        return None if item is None else int(_from_attr(item["last_seq"]))

    def claim_event_seq(self, pod_id: str, seq: int, now: float, keep_s: float) -> bool:
        expr = _Expr()
        cutoff = expr.value(now - keep_s)
        item = {
            **_key(f"evt#{pod_id}", str(seq)),
            "received_at": _to_attr(now),
            TTL_ATTRIBUTE: _to_attr(int(now + keep_s) + 1),
        }
        return self._put_where(item, f"attribute_not_exists(pk) OR {expr.name('received_at')} < {cutoff}", expr)

    def claim_once(self, kind: str, key: str, now: float, keep_s: float) -> bool:
        expr = _Expr()
        item = {**_key(f"once#{kind}", key), TTL_ATTRIBUTE: _to_attr(int(now + keep_s) + 1)}
        expired = f"{expr.name(TTL_ATTRIBUTE)} <= {expr.value(int(now))}"
        return self._put_where(item, f"attribute_not_exists(pk) OR {expired}", expr)

    def sweep(self, now: float) -> None:
        """Nothing to do: the table's TTL removes what claim_once keeps (infra/template.yaml)."""

    def update_if(self, pod_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        _check_columns([*expect, *changes])
        if not changes:
            return False
        expr = _Expr()
        condition = expr.condition(expect)
        return self._update_where(_key(PODS, pod_id), expr.update(changes), condition, expr)

    def get_meta(self, key: str) -> MetaRecord | None:
        item = self._get("meta", key)
        if item is None:
            return None
        return MetaRecord(value=json.loads(item["value"]["S"]), version=int(item["version"]["N"]))

    def put_meta(self, key: str, value: Mapping[str, Any], expected_version: int | None) -> bool:
        text = json.dumps(dict(value), sort_keys=True)
        if expected_version is None:
            return self._put_new("meta", key, {"value": _to_attr(text), "version": _to_attr(1)})
        expr = _Expr()
        version = expr.name("version")
        update = f"SET {expr.name('value')} = {expr.value(text)}, {version} = {expr.value(expected_version + 1)}"
        condition = f"{version} = {expr.value(expected_version)}"
        return self._update_where(_key("meta", key), update, condition, expr)

    def log_notification(self, record: NotificationRecord) -> None:
        # Sort key: the record's time, then the wall clock's ns and randomness so two writers never collide
        sort = f"{record.ts:020.6f}#{time.time_ns():020d}#{os.urandom(4).hex()}"
        item = {
            **_key("notif", sort),
            "record": _to_attr(record.model_dump_json()),
            TTL_ATTRIBUTE: _to_attr(int(record.ts + NOTIFICATION_KEEP_S)),
        }
        self._db.put_item(TableName=self.table, Item=item)

    def recent_notifications(self, limit: int = 50) -> list[NotificationRecord]:
        # Limit caps a page, it does not fill it: DynamoDB ends a page at 1 MB with a LastEvaluatedKey,
        # so fewer than `limit` items and a key mean "ask again from there".
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {}
        while len(items) < limit:
            got = self._db.query(
                TableName=self.table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": "notif"}},
                ScanIndexForward=False,
                Limit=limit - len(items),
                **kwargs,
            )
            items.extend(got.get("Items", []))
            if "LastEvaluatedKey" not in got:
                break
            kwargs["ExclusiveStartKey"] = got["LastEvaluatedKey"]
        records = [NotificationRecord.model_validate_json(i["record"]["S"]) for i in items[:limit]]
        return list(reversed(records))

    def close(self) -> None:
        self._db.close()

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        # Consistent reads: the reaper's re-check before a destroy must see the last ping
        got = self._db.get_item(TableName=self.table, Key=_key(pk, sk), ConsistentRead=True)
        item = got.get("Item")
        return dict(item) if item else None

    def _query(self, pk: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {}
        while True:
            got = self._db.query(
                TableName=self.table,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": pk}},
                ConsistentRead=True,
                **kwargs,
            )
            items.extend(dict(i) for i in got.get("Items", []))
            if "LastEvaluatedKey" not in got:
                return items
            kwargs["ExclusiveStartKey"] = got["LastEvaluatedKey"]

    def _put_new(self, pk: str, sk: str, attrs: Mapping[str, Any]) -> bool:
        return self._put_where({**_key(pk, sk), **attrs}, "attribute_not_exists(pk)")

    def _cas_heartbeat(self, pod_id: str, seq: int, states: tuple[str, ...] | None, changes: Mapping[str, Any]) -> bool:
        expr = _Expr()
        condition = expr.condition({"state": states} if states else {})
        condition += f" AND {expr.name('last_seq')} < {expr.value(seq)}"
        if states is None:
            late = [expr.value(s) for s in ("late", "down")]
            condition += f" AND NOT ({expr.name('state')} IN ({', '.join(late)}))"
        return self._update_where(_key(PODS, pod_id), expr.update(changes), condition, expr)

    def _update_where(self, key: dict[str, Any], update: str, condition: str, expr: _Expr) -> bool:
        """One conditional update; False when the condition did not hold (a lost race, a stale read)."""
        try:
            self._db.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression=update,
                ConditionExpression=condition,
                **expr.kwargs(),
            )
        except self._failed:
            return False
        return True

    def _put_where(self, item: Mapping[str, Any], condition: str, expr: _Expr | None = None) -> bool:
        """One conditional put; False when the condition did not hold."""
        try:
            self._db.put_item(
                TableName=self.table,
                Item=dict(item),
                ConditionExpression=condition,
                **(expr.kwargs() if expr is not None else {}),
            )
        except self._failed:
            return False
        return True


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _pod_attrs(pod: StoredPod) -> dict[str, Any]:
    return {c: _to_attr(_encode(c, getattr(pod, c))) for c in _COLUMNS if getattr(pod, c) is not None}


def table_definition(name: str) -> dict[str, Any]:
    """The table as CreateTable arguments: what the tests create in moto; infra/template.yaml matches."""
    return {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
    }


def create_table(client: DynamoDBClient, name: str) -> None:
    client.create_table(**table_definition(name))
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    client.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )
