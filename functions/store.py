"""The watchdog's memory: pods, the reaper's own records, the notification log.

`Store` is the interface the handlers and the reaper use; `SqliteStore` is the embedded default. Every
state change of a pod is a compare-and-set (`update_if`: "update ... where state = expected"), the
shape a DynamoDB ConditionExpression takes too, so two reapers at once (a scheduled event delivered
twice) act once, and a ping racing a destroy decision wins cleanly. Decisions compare `now - last_seen`;
no record the reaper decides on ever expires on its own. What is kept only for a window (`claim_once`: a
webhook delivery's id) expires with it: DynamoDB's TTL there, `sweep` here (each reaper pass), and SQLite
overwrites what it deletes (secure_delete; the WAL truncated at each sweep), so a run's dropped secrets are
not left in the file either.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from gpuc.core.api import HeartbeatBody, NotificationRecord, PodRecord, Policy

PodState = Literal["ok", "late", "down", "destroying", "destroyed", "ended"]
LIVE_STATES: tuple[PodState, ...] = ("ok", "late", "down", "destroying", "ended")
MARKABLE_STATES: tuple[PodState, ...] = ("ok", "late", "down")
FINISHED_STATES: tuple[PodState, ...] = ("ended", "destroying", "destroyed")
Registration = Literal["created", "updated", "refused"]
# "carried": registered into this watchdog by `gpuc watchdog deploy` from another one; its pings still go
# there, so silence here is no evidence until it pings here once.
Origin = Literal["registered", "adopted", "carried"]
META_STORE = "store"  # {"created_at": when this store first served}: a young store is itself suspect
# An older gpuc kept unverified pings in one meta record ("unverified_pings", the newest 200 ids): a flood
# of invented ids could evict a real stray's entry. It is no longer read or written; an old one is ignored.
UNVERIFIED_RESOLUTION_S = 30.0  # a newer unverified ping than this is not worth a write


class StoredPod(PodRecord):
    """What the watchdog keeps about a pod: the public record plus the fields only it needs."""

    key: str = ""  # derived HMAC key (core.signing.derive_key); "" for an adopted pod: it cannot ping
    policy: Policy = Field(default_factory=lambda: Policy.model_validate({}))
    interruptible: bool = False
    origin: Origin = "registered"  # "adopted": gpuc-named at the provider but never registered (F11)
    destroy_started_at: float | None = None
    provider_status_since: float | None = None  # first time the reaper saw the current provider status
    gone_seen_at: float | None = None  # first pass that found it gone; the next pass must agree
    alerted: str | None = None  # the problem last notified, so alerts go out on transitions only
    alerted_at: float | None = None
    # When the month's budget pulled its deadline in (functions/reaper/budget.py): once per pod and month, so the
    # user's later extension is not undone by the next pass.
    budget_pulled_at: float | None = None
    # The latest ping signed with a token nobody here can verify, naming this adopted stray: see
    # note_unverified_ping. Only ever set on a record the reaper itself created from a provider listing.
    unverified_ping_at: float | None = None
    # Per-pod push limit on signed events (functions.eventlimit): the hour window, pushed and held counts.
    events_window_at: float | None = None
    events_sent: int | None = None
    events_held: int | None = None
    events_held_last: str | None = None  # the kind of the latest held event, for the grouped notification
    kept_until: float | None = None  # kept for its results (kept_at): the pod stops itself by then (F16)
    # Asked from the phone (functions/actions/verbs.py): "end" or "retry_sync", said to the pod in
    # every heartbeat answer until it acts (it acts once per intent_at); an "end" it cannot act on is the reaper's.
    intent: str | None = None
    intent_at: float | None = None
    # The run's own prefix at an s3:// destination (core.api.RegisterRequest.results_at): the only objects the
    # pod's grants reach (functions/grants.py). None: no grant.
    results_at: str | None = None

    def to_record(self) -> PodRecord:
        return PodRecord.model_validate(self.model_dump(include=set(PodRecord.model_fields)))


class PodAuth(BaseModel):
    """The little the ping path needs: read on every heartbeat, so no full record decode."""

    pod_id: str
    key: str
    lease_until: float | None = None
    state: str = "ok"
    # The deadline the heartbeat answer carries, and what it is reckoned from (functions/deadline.py)
    deadline_at: float | None = None
    started_at: float | None = None
    registered_at: float = 0.0
    origin: str = "registered"
    unverified_ping_at: float | None = None
    intent: str | None = None
    intent_at: float | None = None
    # What the pod's claim says (functions.claims), minted in every heartbeat answer from this one read
    provider: str = ""
    name: str = ""
    experiment: str = ""
    kept_until: float | None = None
    price_per_hour: float | None = None
    last_seen: float | None = None  # a claim issued after it: this store missed what it said (an old backup)
    results_at: str | None = None  # what the pod's grants reach (functions/grants.py), and its claim carries


AUTH_FIELDS = (
    "key",
    "lease_until",
    "state",
    "deadline_at",
    "started_at",
    "registered_at",
    "origin",
    "unverified_ping_at",
    "intent",
    "intent_at",
    "provider",
    "name",
    "experiment",
    "kept_until",
    "price_per_hour",
    "last_seen",
    "results_at",
)


class MetaRecord(BaseModel):
    value: dict[str, Any]
    version: int


class Store(Protocol):
    def get_pod(self, pod_id: str) -> StoredPod | None: ...

    def get_auth(self, pod_id: str) -> PodAuth | None: ...

    def list_pods(self, states: Collection[str] | None = None) -> list[StoredPod]: ...

    def register(self, pod: StoredPod) -> Registration:
        """Create, or refresh a live registration (a retried `up`). Refused once a pod has ended."""
        ...

    def adopt(self, pod: StoredPod) -> bool:
        """Insert only if no record exists (conditional put)."""
        ...

    def record_heartbeat(self, pod_id: str, seq: int, now: float, body: HeartbeatBody) -> bool:
        """Move last_seen only if `seq` is above the last one; a ping also cancels a late/down mark."""
        ...

    def claim_event_seq(self, pod_id: str, seq: int, now: float, keep_s: float) -> bool:
        """True the first time (pod, seq) is seen within keep_s: events may come out of order, never twice."""
        ...

    def claim_once(self, kind: str, key: str, now: float, keep_s: float) -> bool:
        """True the first time `key` (of `kind`) is seen within keep_s; the record expires after it (a
        webhook's event id: at-least-once delivery, deduped for its signature's window, then gone)."""
        ...

    def sweep(self, now: float) -> None:
        """Remove what has expired (claim_once's records). Each reaper pass calls it."""
        ...

    def update_if(self, pod_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        """Compare-and-set. An expected value that is a tuple means "one of"; None means "is null"."""
        ...

    def get_meta(self, key: str) -> MetaRecord | None: ...

    def put_meta(self, key: str, value: Mapping[str, Any], expected_version: int | None) -> bool:
        """Conditional write: expected_version None = only if absent."""
        ...

    def log_notification(self, record: NotificationRecord) -> None: ...

    def recent_notifications(self, limit: int = 50) -> list[NotificationRecord]: ...

    def close(self) -> None: ...


_JSON_FIELDS = frozenset({"policy", "last_heartbeat"})
_COLUMNS: tuple[str, ...] = tuple(StoredPod.model_fields)
_REGISTRATION_FIELDS = (
    "provider",
    "name",
    "experiment",
    "gpu",
    "price_per_hour",
    "started_at",
    "interruptible",
    "policy",
    "key",
    "deadline_at",
    "results_at",
)


def reregistration_changes(old: StoredPod, pod: StoredPod) -> dict[str, Any]:
    """What a second register of a live pod rewrites: both stores apply exactly this, so a retried `up`
    means the same thing on a laptop and on AWS."""
    changes: dict[str, Any] = {f: getattr(pod, f) for f in _REGISTRATION_FIELDS}
    changes.update(origin=pod.origin, state="ok", destroy_at=None, reason=None, gone_seen_at=None)
    if old.key != pod.key:
        changes["last_seq"] = -1  # a new token starts a new seq stream
    if old.origin == "adopted":
        changes["registered_at"] = pod.registered_at
        if pod.run_id is not None and old.run_id is None:
            # A pass listed the pod between its create and this register and took it for a stray: the run's
            # marks come with the register, else the first pod of a recovering run names no run (its paused pod
            # judged by the paused-pod rule; its ledger row closed at the first outbid as a pod of its own).
            changes.update(run_id=pod.run_id, attempt=pod.attempt)
    return changes


_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS pods (
    pod_id TEXT PRIMARY KEY,
    {", ".join(f"{c} {'INTEGER' if c in ('last_seq', 'interruptible') else ''}" for c in _COLUMNS[1:])}
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL, version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL, title TEXT, message TEXT, pod_id TEXT, kind TEXT, level TEXT
);
CREATE TABLE IF NOT EXISTS event_seqs (
    pod_id TEXT NOT NULL, seq INTEGER NOT NULL, received_at REAL NOT NULL, PRIMARY KEY (pod_id, seq)
);
CREATE TABLE IF NOT EXISTS seen_once (
    kind TEXT NOT NULL, key TEXT NOT NULL, expires_at REAL NOT NULL, PRIMARY KEY (kind, key)
);
"""
# An older gpuc kept each Vast webhook delivery's id as a meta record that never expired.
_LEGACY_ONCE = "vasthook:%"


def _encode(column: str, value: Any) -> Any:
    if column in _JSON_FIELDS and value is not None:
        model = value if isinstance(value, BaseModel) else None
        return model.model_dump_json() if model is not None else json.dumps(value)
    if isinstance(value, bool):
        return int(value)
    return value


def _decode(row: sqlite3.Row) -> StoredPod:
    data = {k: row[k] for k in row.keys()}  # noqa: SIM118 - sqlite3.Row is not a mapping
    for column in _JSON_FIELDS:
        if data.get(column) is not None:
            data[column] = json.loads(data[column])
    for column in [c for c, v in data.items() if v is None]:
        # NULL in a column added by an upgrade (or policy never set): the field's default applies
        if StoredPod.model_fields[column].default is not None:
            data.pop(column)
    data["interruptible"] = bool(data.get("interruptible"))
    return StoredPod.model_validate(data)


def _check_columns(names: Collection[str]) -> None:
    unknown = set(names) - set(_COLUMNS)
    if unknown:
        raise ValueError(f"unknown pod fields: {sorted(unknown)}")


class SqliteStore:
    """One connection behind a lock: safe under the threaded server. WAL, so readers never block the
    ping path; every multi-row change is one transaction; CAS lives in the SQL, so two processes on
    the same file are safe too."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            _create_private(Path(self.path))
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10.0)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # A run's kit secrets are dropped when it ends (functions/recovery/runs.py end): the old bytes are
        # overwritten, not left in a free page of the file.
        self._db.execute("PRAGMA secure_delete=ON")
        self._db.executescript(_SCHEMA)
        self._add_new_columns()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def get_pod(self, pod_id: str) -> StoredPod | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM pods WHERE pod_id = ?", (pod_id,)).fetchone()
        return _decode(row) if row is not None else None

    def get_auth(self, pod_id: str) -> PodAuth | None:
        with self._lock:
            row = self._db.execute(f"SELECT {', '.join(AUTH_FIELDS)} FROM pods WHERE pod_id = ?", (pod_id,)).fetchone()
        if row is None:
            return None
        return PodAuth(pod_id=pod_id, **{k: row[k] for k in AUTH_FIELDS if row[k] is not None})

    def list_pods(self, states: Collection[str] | None = None) -> list[StoredPod]:
        sql, args = "SELECT * FROM pods", tuple[str, ...]()
        if states is not None:
            args = tuple(states)
            sql += f" WHERE state IN ({', '.join('?' * len(args))})"
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY registered_at, pod_id", args).fetchall()
        return [_decode(r) for r in rows]

    def register(self, pod: StoredPod) -> Registration:
        with self._tx() as db:
            row = db.execute("SELECT * FROM pods WHERE pod_id = ?", (pod.pod_id,)).fetchone()
            if row is None:
                self._insert(db, pod)
                return "created"
            old = _decode(row)
            if old.state in FINISHED_STATES:
                return "refused"
            self._update(db, pod.pod_id, {}, reregistration_changes(old, pod))
            return "updated"

    def adopt(self, pod: StoredPod) -> bool:
        with self._tx() as db:
            if db.execute("SELECT 1 FROM pods WHERE pod_id = ?", (pod.pod_id,)).fetchone():
                return False
            self._insert(db, pod)
            return True

    def record_heartbeat(self, pod_id: str, seq: int, now: float, body: HeartbeatBody) -> bool:
        # SQLite evaluates every SET expression against the row as it was, so the CASEs see the old state.
        sql = """
            UPDATE pods SET last_seen = ?, last_seq = ?, last_heartbeat = ?,
                destroy_at = CASE WHEN state IN ('late', 'down') THEN NULL ELSE destroy_at END,
                reason = CASE WHEN state IN ('late', 'down') THEN NULL ELSE reason END,
                state = CASE WHEN state IN ('late', 'down') THEN 'ok' ELSE state END
            WHERE pod_id = ? AND last_seq < ?"""
        with self._lock:
            cur = self._db.execute(sql, (now, seq, body.model_dump_json(), pod_id, seq))
        return cur.rowcount == 1

    def claim_event_seq(self, pod_id: str, seq: int, now: float, keep_s: float) -> bool:
        with self._tx() as db:
            db.execute("DELETE FROM event_seqs WHERE pod_id = ? AND received_at < ?", (pod_id, now - keep_s))
            cur = db.execute(
                "INSERT OR IGNORE INTO event_seqs (pod_id, seq, received_at) VALUES (?, ?, ?)",
                (pod_id, seq, now),
            )
            return cur.rowcount == 1

    def claim_once(self, kind: str, key: str, now: float, keep_s: float) -> bool:
        with self._tx() as db:
            db.execute("DELETE FROM seen_once WHERE expires_at <= ?", (now,))
            cur = db.execute(
                "INSERT OR IGNORE INTO seen_once (kind, key, expires_at) VALUES (?, ?, ?)", (kind, key, now + keep_s)
            )
            return cur.rowcount == 1

    def sweep(self, now: float) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM seen_once WHERE expires_at <= ?", (now,))
            db.execute("DELETE FROM meta WHERE key LIKE ?", (_LEGACY_ONCE,))
        with self._lock:
            # What a write replaced stays in the WAL until a checkpoint resets it: truncated, it is gone. Best
            # effort: another process reading the file (a `gpuc watchdog reap` beside the server) may hold it.
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def update_if(self, pod_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        with self._lock:
            return self._update(self._db, pod_id, expect, changes)

    def get_meta(self, key: str) -> MetaRecord | None:
        with self._lock:
            row = self._db.execute("SELECT value, version FROM meta WHERE key = ?", (key,)).fetchone()
        return MetaRecord(value=json.loads(row["value"]), version=row["version"]) if row else None

    def put_meta(self, key: str, value: Mapping[str, Any], expected_version: int | None) -> bool:
        text = json.dumps(dict(value), sort_keys=True)
        with self._lock:
            if expected_version is None:
                cur = self._db.execute("INSERT OR IGNORE INTO meta (key, value, version) VALUES (?, ?, 1)", (key, text))
            else:
                cur = self._db.execute(
                    "UPDATE meta SET value = ?, version = version + 1 WHERE key = ? AND version = ?",
                    (text, key, expected_version),
                )
        return cur.rowcount == 1

    def log_notification(self, record: NotificationRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO notifications (ts, title, message, pod_id, kind, level) VALUES (?, ?, ?, ?, ?, ?)",
                (record.ts, record.title, record.message, record.pod_id, record.kind, record.level),
            )

    def recent_notifications(self, limit: int = 50) -> list[NotificationRecord]:
        with self._lock:
            rows = self._db.execute(
                "SELECT ts, title, message, pod_id, kind, level FROM notifications ORDER BY id DESC LIMIT ?",
                (limit,),
            ).fetchall()
        return [NotificationRecord.model_validate(dict(r)) for r in reversed(rows)]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _add_new_columns(self) -> None:
        """A watchdog.db from an older gpuc lacks the newer fields: add them, so an upgrade keeps every
        record (a lost store is exactly what makes healthy pods look like strays)."""
        with self._lock:
            have = {row["name"] for row in self._db.execute("PRAGMA table_info(pods)").fetchall()}
            for column in _COLUMNS:
                if column not in have:
                    kind = "INTEGER" if column in ("last_seq", "interruptible") else ""
                    self._db.execute(f"ALTER TABLE pods ADD COLUMN {column} {kind}")

    def _insert(self, db: sqlite3.Connection, pod: StoredPod) -> None:
        values = [_encode(c, getattr(pod, c)) for c in _COLUMNS]
        db.execute(f"INSERT INTO pods ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})", values)

    @staticmethod
    def _update(db: sqlite3.Connection, pod_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        _check_columns([*expect, *changes])
        if not changes:
            return False
        sets = ", ".join(f"{c} = ?" for c in changes)
        args: list[Any] = [_encode(c, v) for c, v in changes.items()]
        where = ["pod_id = ?"]
        args.append(pod_id)
        for column, value in expect.items():
            if value is None:
                where.append(f"{column} IS NULL")
            elif isinstance(value, tuple | list | frozenset | set):
                where.append(f"{column} IN ({', '.join('?' * len(value))})")
                args.extend(_encode(column, v) for v in value)
            else:
                where.append(f"{column} = ?")
                args.append(_encode(column, value))
        cur = db.execute(f"UPDATE pods SET {sets} WHERE {' AND '.join(where)}", args)
        return cur.rowcount == 1


def _create_private(path: Path) -> None:
    """The store holds every pod's derived key: a leak lets someone forge "alive" pings. Mode 600;
    SQLite gives its -wal and -shm files the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)


# -- shared by both stores, built on the meta CAS so SqliteStore and DynamoStore cannot disagree ------------


def store_born(store: Store, now: float, *, write: bool = True) -> float:
    """When this store first served. A store with no record of it is new, unless it holds records
    older than now (an upgrade from a gpuc that did not record it)."""
    meta = store.get_meta(META_STORE)
    if meta is not None:
        try:
            return float(meta.value["created_at"])
        except (KeyError, TypeError, ValueError):
            pass  # unreadable: treated as new, the safe direction
    born = min([now, *(p.registered_at for p in store.list_pods())])
    if write and meta is None and not store.put_meta(META_STORE, {"created_at": born}, None):
        again = store.get_meta(META_STORE)  # another writer was first: theirs stands
        if again is not None and isinstance(again.value.get("created_at"), int | float):
            return float(again.value["created_at"])
    return born


def note_unverified_ping(store: Store, auth: PodAuth, now: float) -> bool:
    """Remember that something pinged as an adopted stray with a signature this store cannot verify (a
    store that was lost, a pod registered with another watchdog). Noted only on a record the reaper
    created itself from a provider listing, so what an unauthenticated request can write is bounded by
    the real pods: an invented id finds no record and costs one read. At most one write per stray per
    UNVERIFIED_RESOLUTION_S, decided from the auth read, so a flood naming a real stray costs no more.
    The reaper lets it delay that stray's destroy once (reaper.rules.judge_stray). CAS: a lost race is dropped."""
    if auth.origin != "adopted" or auth.key or auth.state not in MARKABLE_STATES:
        return False
    last = auth.unverified_ping_at
    if last is not None and 0 <= now - last < UNVERIFIED_RESOLUTION_S:
        return False
    expect = {"origin": "adopted", "state": MARKABLE_STATES, "unverified_ping_at": last}
    return store.update_if(auth.pod_id, expect, {"unverified_ping_at": now})
