"""SqliteStore: compare-and-set semantics the reaper and the ingest rely on."""

from __future__ import annotations

import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from gpuc.core.api import HeartbeatBody, NotificationRecord
from gpuc.functions.dynamo import DynamoStore, create_table
from gpuc.functions.store import (
    META_STORE,
    UNVERIFIED_RESOLUTION_S,
    SqliteStore,
    Store,
    StoredPod,
    note_unverified_ping,
    store_born,
)


@pytest.fixture(params=["sqlite", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same suite against both stores: DynamoStore on moto's in-process DynamoDB."""
    if request.param == "sqlite":
        s: Store = SqliteStore(tmp_path / "w" / "watchdog.db")
        yield s
        s.close()
        return
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "gpuc-watchdog")
        s = DynamoStore("gpuc-watchdog", client)
        yield s
        s.close()


def pod(pod_id: str = "p1", **fields: object) -> StoredPod:
    base: dict[str, object] = {
        "pod_id": pod_id,
        "provider": "fake",
        "name": f"gpuc-{pod_id}",
        "experiment": "exp",
        "registered_at": 100.0,
        "key": "ab" * 32,
    }
    return StoredPod.model_validate({**base, **fields})


def beat(pod_id: str, seq: int) -> HeartbeatBody:
    return HeartbeatBody.model_validate({"pod_id": pod_id, "seq": seq, "sent_at": 1.8e9})


def test_the_database_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "private" / "watchdog.db"
    SqliteStore(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_record_round_trips(store: Store) -> None:
    original = pod(policy={"silence_limit_s": 60}, interruptible=True, lease_until=5.5)
    assert store.register(original) == "created"
    assert store.get_pod("p1") == original
    assert store.get_pod("nope") is None


def test_heartbeats_only_move_forward(store: Store) -> None:
    store.register(pod())
    assert store.record_heartbeat("p1", 3, 200.0, beat("p1", 3))
    assert not store.record_heartbeat("p1", 3, 300.0, beat("p1", 3))
    assert not store.record_heartbeat("p1", 2, 300.0, beat("p1", 2))
    rec = store.get_pod("p1")
    assert rec is not None and (rec.last_seen, rec.last_seq) == (200.0, 3)
    assert not store.record_heartbeat("ghost", 1, 1.0, beat("ghost", 1))


def test_a_heartbeat_cancels_a_mark_but_not_an_end(store: Store) -> None:
    store.register(pod("a", state="down", destroy_at=500.0, reason="silent"))
    store.register(pod("b", state="ended", destroy_at=500.0))
    store.record_heartbeat("a", 1, 200.0, beat("a", 1))
    store.record_heartbeat("b", 1, 200.0, beat("b", 1))
    a, b = store.get_pod("a"), store.get_pod("b")
    assert a is not None and (a.state, a.destroy_at, a.reason) == ("ok", None, None)
    assert b is not None and (b.state, b.destroy_at) == ("ended", 500.0)


def test_update_if_is_compare_and_set(store: Store) -> None:
    store.register(pod())
    assert store.update_if("p1", {"state": "ok"}, {"state": "down", "destroy_at": 9.0})
    assert not store.update_if("p1", {"state": "ok"}, {"state": "down"})
    assert store.update_if("p1", {"state": ("late", "down"), "end_at": None}, {"state": "ended", "end_at": 1.0})
    assert not store.update_if("p1", {"end_at": None}, {"end_at": 2.0})
    with pytest.raises(ValueError, match="unknown pod fields"):
        store.update_if("p1", {"state; drop table pods": "x"}, {"state": "ok"})


def test_only_one_of_many_racing_sqlite_claims_wins(tmp_path: Path) -> None:
    # SQLite's locking is gpuc's choice, so threads racing it test gpuc. DynamoStore's races are proven
    # call by call in tests/aws/test_dynamo_conditions.py: threads against moto would test moto's locks.
    store = SqliteStore(tmp_path / "w" / "watchdog.db")
    store.register(pod(state="down"))
    wins: list[int] = []
    barrier = threading.Barrier(8)

    def claim(i: int) -> None:
        barrier.wait()
        if store.update_if("p1", {"state": "down"}, {"state": "destroying", "destroy_started_at": float(i)}):
            wins.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert len(wins) == 1


def test_registration_is_refused_once_a_pod_has_ended(store: Store) -> None:
    store.register(pod())
    store.record_heartbeat("p1", 7, 1.0, beat("p1", 7))
    assert store.register(pod(key="cd" * 32)) == "updated"
    rec = store.get_pod("p1")
    assert rec is not None and rec.last_seq == -1  # a new token starts a new seq stream
    store.update_if("p1", {}, {"state": "ended"})
    assert store.register(pod()) == "refused"


def test_adopt_never_overwrites(store: Store) -> None:
    assert store.adopt(pod(origin="adopted", key=""))
    assert not store.adopt(pod(origin="adopted", key="", experiment="other"))
    rec = store.get_pod("p1")
    assert rec is not None and rec.experiment == "exp"


def test_meta_is_conditional(store: Store) -> None:
    assert store.get_meta("reaper") is None
    assert store.put_meta("reaper", {"last_run": 1.0}, None)
    assert not store.put_meta("reaper", {"last_run": 2.0}, None)
    meta = store.get_meta("reaper")
    assert meta is not None and meta.value == {"last_run": 1.0}
    assert store.put_meta("reaper", {"last_run": 3.0}, meta.version)
    assert not store.put_meta("reaper", {"last_run": 4.0}, meta.version)


def test_event_seqs_are_claimed_once_within_the_window(store: Store) -> None:
    assert store.claim_event_seq("p1", 5, 100.0, keep_s=600)
    assert not store.claim_event_seq("p1", 5, 200.0, keep_s=600)
    assert store.claim_event_seq("p1", 4, 200.0, keep_s=600)
    assert store.claim_event_seq("p2", 5, 200.0, keep_s=600)
    # Pruned once older than the window; the timestamp check rejects such a replay anyway
    assert store.claim_event_seq("p1", 5, 1000.0, keep_s=600)


def test_a_key_is_claimed_once_within_its_window_then_forgotten(store: Store) -> None:
    """claim_once (a Vast delivery's event id): a replay inside the window is refused; after it the record is
    gone, so nothing a delivery stored outlives its 300 s (functions/recovery/webhook.py)."""
    assert store.claim_once("vasthook", "evt_1", 100.0, keep_s=300)
    assert not store.claim_once("vasthook", "evt_1", 399.0, keep_s=300)
    assert store.claim_once("other", "evt_1", 399.0, keep_s=300)  # kinds apart
    assert store.claim_once("vasthook", "evt_1", 401.0, keep_s=300)  # expired: taken again


def test_the_sweep_removes_expired_keys(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db")
    store.claim_once("vasthook", "evt_1", 100.0, keep_s=300)
    store.claim_once("vasthook", "evt_2", 300.0, keep_s=300)
    store.sweep(450.0)
    assert [r[0] for r in store._db.execute("SELECT key FROM seen_once").fetchall()] == ["evt_2"]
    store.close()


def test_notifications_come_back_oldest_first(store: Store) -> None:
    for i in range(5):
        store.log_notification(NotificationRecord(ts=float(i), title=f"t{i}", message="m"))
    assert [n.title for n in store.recent_notifications(3)] == ["t2", "t3", "t4"]


def test_two_connections_see_each_others_writes(tmp_path: Path) -> None:
    one, two = SqliteStore(tmp_path / "w.db"), SqliteStore(tmp_path / "w.db")
    one.register(pod())
    assert two.update_if("p1", {"state": "ok"}, {"state": "down"})
    assert not one.update_if("p1", {"state": "ok"}, {"state": "down"})
    one.close()
    two.close()


def test_get_auth_carries_the_state(store: Store) -> None:
    store.register(pod(lease_until=7.5))
    store.update_if("p1", {}, {"state": "destroyed", "gone_seen_at": 3.0})
    auth = store.get_auth("p1")
    assert auth is not None and (auth.key, auth.lease_until, auth.state) == ("ab" * 32, 7.5, "destroyed")
    rec = store.get_pod("p1")
    assert rec is not None and rec.gone_seen_at == 3.0


def test_the_store_remembers_when_it_was_born(store: Store) -> None:
    assert store_born(store, 5000.0, write=False) == 5000.0
    assert store.get_meta(META_STORE) is None  # a dry look writes nothing
    assert store_born(store, 5000.0) == 5000.0
    assert store_born(store, 9000.0) == 5000.0


def test_a_store_with_older_records_but_no_birth_is_dated_by_them(store: Store) -> None:
    store.register(pod(registered_at=1000.0))  # written by a gpuc that did not record its birth
    assert store_born(store, 5000.0) == 1000.0


def test_unverified_pings_are_noted_only_on_an_adopted_stray_at_most_once_per_resolution(store: Store) -> None:
    now = 1_800_000_000.0
    store.adopt(pod("stray", key="", origin="adopted"))
    store.register(pod("mine"))
    for pod_id in ("stray", "mine", "invented"):
        auth = store.get_auth(pod_id)
        noted = auth is not None and note_unverified_ping(store, auth, now)
        assert noted == (pod_id == "stray"), pod_id
    assert store.get_pod("stray").unverified_ping_at == now  # type: ignore[union-attr]
    assert store.get_pod("mine").unverified_ping_at is None  # type: ignore[union-attr]
    assert store.get_pod("invented") is None  # an unauthenticated request never creates a record
    auth = store.get_auth("stray")
    assert auth is not None and auth.unverified_ping_at == now
    assert not note_unverified_ping(store, auth, now + UNVERIFIED_RESOLUTION_S - 1)  # decided from the read
    assert note_unverified_ping(store, auth, now + UNVERIFIED_RESOLUTION_S)
    stale = auth  # read before the last write: its CAS loses, nothing is overwritten
    assert not note_unverified_ping(store, stale, now + 2 * UNVERIFIED_RESOLUTION_S)
    assert store.get_pod("stray").unverified_ping_at == now + UNVERIFIED_RESOLUTION_S  # type: ignore[union-attr]


def test_a_finished_stray_is_not_noted(store: Store) -> None:
    store.adopt(pod("stray", key="", origin="adopted", state="destroyed"))
    auth = store.get_auth("stray")
    assert auth is not None and not note_unverified_ping(store, auth, 1_800_000_000.0)


def test_an_old_stores_unverified_list_is_ignored(store: Store) -> None:
    """An older gpuc kept one meta record of ids: it stays, harmless, and nothing reads it."""
    assert store.put_meta("unverified_pings", {"pings": {"stray": 1_800_000_000.0}}, None)
    store.adopt(pod("stray", key="", origin="adopted"))
    assert store.get_pod("stray").unverified_ping_at is None  # type: ignore[union-attr]


def test_an_older_watchdog_db_is_upgraded_in_place(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "w" / "watchdog.db"
    path.parent.mkdir()
    old = sqlite3.connect(path)
    old.execute(
        "CREATE TABLE pods (pod_id TEXT PRIMARY KEY, provider, name, experiment, registered_at, key, "
        "last_seq INTEGER, state, interruptible INTEGER)"
    )
    old.execute("INSERT INTO pods VALUES ('p1', 'fake', 'gpuc-p1', 'exp', 100.0, ?, -1, 'ok', 0)", ("ab" * 32,))
    old.commit()
    old.close()
    store = SqliteStore(path)
    rec = store.get_pod("p1")
    assert rec is not None and rec.gone_seen_at is None and rec.state == "ok"
    assert store.update_if("p1", {"gone_seen_at": None}, {"gone_seen_at": 5.0})
    store.close()
