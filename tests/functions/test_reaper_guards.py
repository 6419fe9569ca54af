"""Safety checks of the reaper that a round of mutants found unguarded: a provider's "unknown"
never reads as gone, a dry run writes, notifies and destroys nothing whatever the pass would do, and an
ended pod's destroy does not wait out a backwards clock step. tests/mutants/ reruns the mutants."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from fakes.watchdog import World, make_world

from gpuc.core.api import EndRequest, HeartbeatBody, NotificationRecord, ReapReport
from gpuc.core.clock import FakeClock
from gpuc.core.notify.message import Action, Level
from gpuc.functions.reaper.record import META_REAPER
from gpuc.functions.store import MetaRecord, PodAuth, Registration, Store, StoredPod
from gpuc.testkit.fakes import FakeProvider, outage

MIN = 60.0


def end(world: World, pod_id: str) -> None:
    """The pod's end recorded (the wrapper or `down` said so); the pod itself still runs at the provider."""
    answer = world.admin("POST", f"/v1/pods/{pod_id}/end", EndRequest(end_at=world.now, by="down"))
    assert answer.status == 200, answer.body
    assert world.pod(pod_id).state == "ended"


# -- a provider's "unknown" is never "gone" ---------------------------------------------------------


def test_a_pod_only_get_finds_and_calls_unknown_is_never_taken_for_gone(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.provider.hide("p1")  # not in the listing: the reaper asks `get`, which answers "unknown"
    world.provider.set("p1", status="unknown", raw_status="offline")
    world.run(2 * 3600)
    assert world.pod("p1").state == "late"  # alerted, still watched
    assert "gone" not in world.kinds("p1") and world.provider.destroyed == []
    assert world.pod("p1").gone_seen_at is None


def test_an_unknown_reading_between_two_not_founds_starts_the_gone_count_again(world: World) -> None:
    """Two "not found" answers a pass apart settle a pod as gone; an "unknown" reading between them is the
    provider seeing the pod, so the second "not found" is a first one again."""
    world.register("p1")
    world.ping("p1")
    world.provider.lose("p1", calls=1)
    world.reap()
    assert world.pod("p1").gone_seen_at == world.now
    world.clock.advance(world.settings.reaper_period_s)
    world.ping("p1")
    world.provider.set("p1", status="unknown", raw_status="offline")
    world.reap()
    assert world.pod("p1").gone_seen_at is None
    world.clock.advance(world.settings.reaper_period_s)
    world.ping("p1")
    world.provider.set("p1", status="running")
    world.provider.lose("p1", calls=1)
    world.reap()
    assert world.pod("p1").state == "ok", "one 'not found' settled the pod as gone: its watch is lost"
    assert world.pod("p1").gone_seen_at == world.now
    world.clock.advance(world.settings.reaper_period_s)
    world.ping("p1")
    world.reap()
    assert world.pod("p1").state == "ok" and world.pod("p1").gone_seen_at is None
    assert "gone" not in world.kinds("p1")


def test_an_ended_pod_the_provider_calls_unknown_is_not_destroyed(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    end(world, "p1")
    world.provider.set("p1", status="unknown", raw_status="offline")
    world.run(2 * 3600)
    assert world.provider.destroyed == []
    assert "alert" in world.kinds("p1")
    assert "unknown" in (world.store.recent_notifications(100)[-1].message + str(world.kinds("p1")))


def test_a_stray_the_provider_calls_unknown_is_not_destroyed(world: World) -> None:
    world.provider.add("stray1", status="unknown")
    world.run(2 * 3600)
    assert world.provider.destroyed == []
    assert world.pod("stray1").state == "late" and "unknown" in (world.pod("stray1").reason or "")


class UnknownAfterDestroy(FakeProvider):
    """A destroy the provider accepts, after which it can only say "unknown" about the pod (its host went
    offline mid-teardown): nothing shows the pod stopped billing."""

    def destroy(self, pod_id: str) -> Any:
        self.destroyed.append(pod_id)
        self.set(pod_id, status="unknown", raw_status="offline")
        return "destroyed"


def test_a_destroy_followed_by_unknown_is_not_confirmed_gone(home: Path, clock: FakeClock) -> None:
    provider = UnknownAfterDestroy(clock, name="shaky")
    world = make_world(home, clock, providers=(provider,))
    world.register("p1", provider=provider)
    world.ping("p1")
    world.run(5 * MIN + world.settings.destroy_grace_s + world.settings.reaper_period_s)
    assert provider.destroyed == ["p1"]
    assert world.pod("p1").state == "destroying", "an unknown reading was taken as the destroy confirmed"
    assert "destroyed" not in world.kinds("p1")
    world.store.close()


# -- a dry run is read-only, whatever the pass would do -----------------------------------------------


class WriteSpy:
    """A Store that passes every call through and records each write."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.writes: list[str] = []

    def get_pod(self, pod_id: str) -> StoredPod | None:
        return self.inner.get_pod(pod_id)

    def get_auth(self, pod_id: str) -> PodAuth | None:
        return self.inner.get_auth(pod_id)

    def list_pods(self, states: Collection[str] | None = None) -> list[StoredPod]:
        return self.inner.list_pods(states)

    def register(self, pod: StoredPod) -> Registration:
        self.writes.append(f"register {pod.pod_id}")
        return self.inner.register(pod)

    def adopt(self, pod: StoredPod) -> bool:
        self.writes.append(f"adopt {pod.pod_id}")
        return self.inner.adopt(pod)

    def record_heartbeat(self, pod_id: str, seq: int, now: float, body: HeartbeatBody) -> bool:
        self.writes.append(f"heartbeat {pod_id}")
        return self.inner.record_heartbeat(pod_id, seq, now, body)

    def claim_event_seq(self, pod_id: str, seq: int, now: float, keep_s: float) -> bool:
        self.writes.append(f"event {pod_id}")
        return self.inner.claim_event_seq(pod_id, seq, now, keep_s)

    def claim_once(self, kind: str, key: str, now: float, keep_s: float) -> bool:
        self.writes.append(f"once {kind}")
        return self.inner.claim_once(kind, key, now, keep_s)

    def sweep(self, now: float) -> None:
        self.writes.append("sweep")
        self.inner.sweep(now)

    def update_if(self, pod_id: str, expect: Mapping[str, Any], changes: Mapping[str, Any]) -> bool:
        self.writes.append(f"update {pod_id} {sorted(changes)}")
        return self.inner.update_if(pod_id, expect, changes)

    def get_meta(self, key: str) -> MetaRecord | None:
        return self.inner.get_meta(key)

    def put_meta(self, key: str, value: Mapping[str, Any], expected_version: int | None) -> bool:
        self.writes.append(f"meta {key}")
        return self.inner.put_meta(key, value, expected_version)

    def log_notification(self, record: NotificationRecord) -> None:
        self.writes.append(f"notification {record.kind}")
        self.inner.log_notification(record)

    def recent_notifications(self, limit: int = 50) -> list[NotificationRecord]:
        return self.inner.recent_notifications(limit)

    def close(self) -> None:
        self.inner.close()


class SpyNotifier:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(
        self,
        title: str,
        message: str,
        *,
        pod_id: str | None = None,
        kind: str = "info",
        level: Level = "info",
        actions: Sequence[Action] = (),
    ) -> None:
        self.sent.append(kind)

    def flush(self) -> None:
        pass


class WriteCountingProvider(FakeProvider):
    """Every call that changes something at the provider, in order."""

    def __init__(self, clock: FakeClock, name: str = "fake") -> None:
        super().__init__(clock, name)
        self.writes: list[str] = []

    def destroy(self, pod_id: str) -> Any:
        self.writes.append(f"destroy {pod_id}")
        return super().destroy(pod_id)

    def stop(self, pod_id: str) -> None:
        self.writes.append(f"stop {pod_id}")
        super().stop(pod_id)


def put(world: World, pod_id: str, **changes: Any) -> None:
    assert world.store.update_if(pod_id, {}, changes)


def every_kind_of_due_work(world: World, provider: FakeProvider) -> None:
    """A store where the next pass would take every write path the reaper has."""
    now, period = world.now, world.settings.reaper_period_s
    every = ("due", "retry", "gone2", "gone1", "back", "flip", "late", "silent", "ended", "dead", "unk")
    for pod_id in (*every, "kept", "overdue", "ok1", "ok2"):
        world.register(pod_id, provider=provider)
        world.ping(pod_id)
    for pod_id in ("back", "late", "flip"):  # pinging: fine, apart from what is set below
        world.ping(pod_id)
    put(world, "due", state="down", destroy_at=now - 1, reason="no heartbeat for 9 min", last_seen=now - 9 * MIN)
    put(world, "retry", state="destroying", destroy_started_at=now - 10 * MIN, reason="no heartbeat")
    provider.pods.pop("gone2")
    put(world, "gone2", gone_seen_at=now - period, last_seen=now - 2 * period)
    provider.pods.pop("gone1")
    put(world, "back", gone_seen_at=now - period)
    provider.set("flip", status="stopped")
    put(world, "late", state="late", reason="no heartbeat for 6 min", alerted="silence", alerted_at=now - MIN)
    put(world, "silent", last_seen=now - 6 * MIN)
    put(world, "ended", state="ended", end_at=now - 10 * MIN, ended_by="down", destroy_at=now - 1)
    put(world, "dead", state="destroyed", end_at=now - 10 * MIN, ended_by="reaper")
    provider.set("unk", status="unknown", raw_status="offline")
    put(world, "unk", last_seen=now - 6 * MIN)
    put(world, "kept", state="down", destroy_at=now - 1, reason="silent", last_seen=now - 9 * MIN, kept_at=now - 3600)
    put(world, "overdue", deadline_at=now - MIN)
    provider.add("orphan")  # a gpuc pod this store never heard of: adopted on first sight
    provider.balance_usd = 1.0  # below the low-balance alert
    assert world.store.put_meta(META_REAPER, {"last_run": now - period}, None)


def assert_read_only(report: ReapReport, world: World, spy: WriteSpy, phone: SpyNotifier, *providers: Any) -> None:
    assert report.dry_run
    assert spy.writes == [], "a dry run wrote to the store"
    assert phone.sent == [], "a dry run notified"
    assert world.outbox() == []
    for provider in providers:
        assert provider.writes == [], "a dry run changed something at the provider"
        assert provider.destroyed == [] and not provider.creates


def test_a_dry_run_writes_notifies_and_destroys_nothing_whatever_the_pass_would_do(
    home: Path, clock: FakeClock
) -> None:
    provider = WriteCountingProvider(clock, name="spy")
    blind = WriteCountingProvider(clock, name="vast")
    world = make_world(home, clock, providers=(provider, blind))
    every_kind_of_due_work(world, provider)
    world.register("blind1", provider=blind)
    blind.fail = outage("vast")
    provider.creates.clear()
    blind.creates.clear()
    before = {p.pod_id: p for p in world.store.list_pods()}
    spy, phone = WriteSpy(world.store), SpyNotifier()
    world.deps.store, world.deps.notifier = spy, phone

    report = world.reap(dry_run=True)

    assert_read_only(report, world, spy, phone, provider, blind)
    assert {p.pod_id: p for p in world.store.list_pods()} == before
    done = {(a.pod_id, a.action) for a in report.actions}
    # The pass saw every path it would have taken: the dry run was tested on all of them
    wanted = {
        ("due", "destroy"),
        ("retry", "destroy"),
        ("ended", "destroy"),
        ("gone2", "confirm"),
        ("gone1", "skip"),
        ("back", "cancel"),
        ("late", "cancel"),
        ("silent", "mark"),
        ("dead", "alert"),
        ("unk", "alert"),
        ("*", "alert"),
        ("kept", "stop"),
        ("overdue", "mark"),
    }
    assert wanted <= done, wanted - done
    titles = [a.reason for a in report.actions if a.pod_id == "*"]
    assert any("balance low" in t for t in titles) and any("blind on vast" in t for t in titles)
    assert world.store.get_pod("orphan") is None


def test_a_dry_run_after_a_clock_jump_restarts_no_deadline(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.reap()
    world.run(5 * MIN)
    assert world.pod("p1").state == "down"
    before = world.pod("p1")
    world.clock.advance(3 * 3600)  # the laptop slept
    spy, phone = WriteSpy(world.store), SpyNotifier()
    world.deps.store, world.deps.notifier = spy, phone
    report = world.reap(dry_run=True)
    assert spy.writes == [] and phone.sent == []
    assert world.pod("p1") == before and world.provider.destroyed == []
    assert report.dry_run


def test_a_dry_run_on_a_new_store_does_not_date_it(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock, store_age_s=None)
    world.provider.add("orphan")
    spy = WriteSpy(world.store)
    world.deps.store = spy
    world.reap(dry_run=True)
    assert spy.writes == []
    world.store.close()


# -- a backwards clock step and an ended pod --------------------------------------------------------


def test_an_ended_pod_is_destroyed_one_grace_after_a_backwards_clock_step_not_the_steps_length_later(
    world: World,
) -> None:
    world.register("p1")
    world.ping("p1")
    world.reap()
    end(world, "p1")  # destroy_at = now + grace; the pod's own destroy then fails (it still runs)
    world.clock.advance(-6 * 3600)  # NTP steps the clock back six hours before that
    step = world.now
    world.reap()
    assert "clock" in world.kinds()
    assert world.pod("p1").destroy_at == step + world.settings.destroy_grace_s
    world.run(world.settings.destroy_grace_s + 2 * world.settings.reaper_period_s)
    assert world.provider.destroyed == ["p1"], "the ended pod waits out the clock step while it bills"
    assert world.provider.destroyed_at["p1"] - step <= world.settings.destroy_grace_s + world.settings.reaper_period_s
