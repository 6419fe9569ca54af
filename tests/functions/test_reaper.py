"""The reaper against the failure matrix (F5-F7, F9-F14), on a virtual clock and a fake provider.
Each test asserts when the destroy happens (or that it never does) and what the phone was told."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from fakes.watchdog import World, make_world

from gpuc.core.api import KeepRequest
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderSchemaError
from gpuc.core.notify.notifier import Notifier
from gpuc.core.notify.urls import parse_channels
from gpuc.functions.app import ProviderPool
from gpuc.functions.reaper import reap_once, reap_safely
from gpuc.functions.store import SqliteStore
from gpuc.testkit.fakes import FakeProvider, outage

MIN = 60.0


def passes_until_destroyed(world: World, pod_id: str, period: float, limit_s: float) -> float | None:
    """Run the reaper every `period` seconds; return the clock time of the destroy, if any."""
    end = world.now + limit_s
    while world.now <= end:
        world.reap()
        if pod_id in world.provider.destroyed:
            return world.now
        world.clock.advance(period)
    return None


# -- F5: agent killed / container frozen ------------------------------------------------------


def test_it_destroys_a_silent_pod_in_two_phases(world: World) -> None:
    world.register("p1")
    t0 = world.now
    assert world.ping("p1").status == 200

    world.clock.advance(4 * MIN)
    world.reap()
    # It should leave a pod alone inside the silence limit
    assert world.pod("p1").state == "ok"
    assert world.kinds("p1") == []

    world.clock.advance(1 * MIN)
    report = world.reap()
    # It should mark it "will destroy at T" and say so, without destroying yet
    rec = world.pod("p1")
    assert rec.state == "down"
    assert rec.destroy_at == t0 + 5 * MIN + world.settings.destroy_grace_s
    assert [a.action for a in report.actions] == ["mark"]
    assert world.kinds("p1") == ["mark"]
    assert world.provider.destroyed == []

    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    # It should record the end, destroy, confirm and notify before and after
    rec = world.pod("p1")
    assert world.provider.destroyed == ["p1"]
    assert rec.state == "destroyed"
    assert rec.end_at == t0 + 5 * MIN + world.settings.destroy_grace_s
    assert rec.ended_by == "reaper"
    assert world.kinds("p1") == ["mark", "destroying", "destroyed"]
    assert [m.kind for m in world.outbox()] == ["mark", "destroying", "destroyed"]


def test_it_destroys_a_silent_pod_within_silence_limit_plus_one_period_plus_grace(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    t0 = world.now
    world.clock.advance(299)  # the worst phase: a pass lands just before the limit
    destroyed_at = passes_until_destroyed(world, "p1", world.settings.reaper_period_s, limit_s=3600)
    # Passes at +299 (not yet), +599 (mark, T = +839), +899 (destroy): the failure matrix's "<= 15 min" worst case
    assert destroyed_at == t0 + 899
    assert world.kinds("p1") == ["mark", "destroying", "destroyed"]


def test_a_ping_during_the_window_cancels_the_destroy(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.pod("p1").state == "down"

    world.clock.advance(2 * MIN)
    assert world.ping("p1").status == 200
    # The ping itself cancels the mark
    assert world.pod("p1").state == "ok"
    assert world.pod("p1").destroy_at is None

    world.clock.advance(2 * MIN)  # past the old T
    report = world.reap()
    assert world.provider.destroyed == []
    assert [a.action for a in report.actions] == ["cancel"]
    assert world.kinds("p1") == ["mark", "back"]
    # And the next pass has nothing more to say
    world.clock.advance(1 * MIN)
    assert world.reap().actions == []
    assert world.kinds("p1") == ["mark", "back"]


def test_a_pod_that_never_pinged_is_timed_from_when_it_was_first_seen_running(world: World) -> None:
    world.register("p1", at_provider=False)
    world.provider.add("p1", status="provisioning")
    world.clock.advance(8 * MIN)  # a slow image pull: silent, but not running yet
    report = world.reap()
    assert [a.action for a in report.actions] == ["alert"]  # provisioning and silent: alert only
    world.provider.set("p1", status="running")
    world.clock.advance(1 * MIN)
    world.reap()
    assert world.pod("p1").state == "ok"  # the silence clock starts now, not at registration
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.pod("p1").state == "down"


def test_a_crash_looping_container_that_never_pinged_is_still_timed(world: World) -> None:
    world.register("p1")
    for status in ("running", "exited", "running", "exited", "running", "exited"):
        world.provider.set("p1", status=status)
        world.reap()
        world.clock.advance(1 * MIN)
    assert world.pod("p1").state == "down"


# -- F6 / F7: paused (outbid) and stopped ----------------------------------------------------


def test_it_destroys_a_pod_paused_for_more_than_30_minutes(world: World) -> None:
    world.register("p1", interruptible=True)
    world.ping("p1")
    world.provider.set("p1", status="paused")
    paused_at = world.now
    world.reap()
    destroyed_at = passes_until_destroyed(world, "p1", period=MIN, limit_s=3 * 3600)
    assert destroyed_at is not None
    # The provider reports the pause itself, so the warning goes out one grace ahead and the destroy
    # lands on the first pass at the limit (F6: 30 min + one period).
    assert destroyed_at == paused_at + world.settings.paused_limit_s
    assert world.kinds("p1") == ["mark", "destroying", "destroyed"]


def test_it_destroys_a_pod_stopped_for_more_than_24_hours_and_not_before(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.provider.set("p1", status="stopped")
    stopped_at = world.now
    world.reap()
    world.run(23.9 * 3600)
    # A stopped pod is silent, but silence is not the rule for it: the user may resume it
    assert world.pod("p1").state == "ok"
    assert world.provider.destroyed == []
    destroyed_at = passes_until_destroyed(world, "p1", period=5 * MIN, limit_s=3600)
    assert destroyed_at is not None
    assert stopped_at + 24 * 3600 <= destroyed_at <= stopped_at + 24 * 3600 + 5 * MIN


# -- F9: the pod's own destroy was refused ------------------------------------------------------


def test_it_destroys_a_pod_whose_self_destroy_failed(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    end_at = world.now
    answer = world.event("p1", "destroying", "job done, destroying", end_at=end_at, note="loss 0.1")
    assert answer.status == 200
    assert world.pod("p1").state == "ended"
    world.reap()
    assert world.provider.destroyed == []  # the pod is about to do it itself
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    rec = world.pod("p1")
    assert world.provider.destroyed == ["p1"]
    assert rec.state == "destroyed"
    # The pod's own end is kept: the reaper only finished the job
    assert (rec.end_at, rec.ended_by, rec.note) == (end_at, "wrapper", "loss 0.1")


def test_a_pod_whose_agent_died_after_a_refused_destroy_goes_like_f5(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.event("p1", "destroy_failed", "RunPod said 401")
    destroyed_at = passes_until_destroyed(world, "p1", period=5 * MIN, limit_s=3600)
    assert destroyed_at is not None


# -- F10: cut off from the watchdog but working ------------------------------------------------


def test_it_only_alerts_when_the_provider_says_the_gpu_is_busy(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.provider.set("p1", gpu_util_pct=87.0)
    for _ in range(30):  # two and a half hours of passes
        world.clock.advance(5 * MIN)
        world.reap()
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    kinds = world.kinds("p1")
    # One alert, then a nag per nag interval (hourly), never a mark
    assert kinds == ["alert", "alert", "alert"]
    assert "busy" in (world.pod("p1").reason or "")


def test_a_busy_reading_at_t_cancels_the_mark(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.pod("p1").state == "down"
    world.provider.set("p1", gpu_util_pct=50.0)
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    assert world.pod("p1").destroy_at is None


# -- F11: created, never registered -----------------------------------------------------------


def test_it_destroys_a_gpuc_pod_that_was_never_registered_after_the_grace(world: World) -> None:
    created = world.now
    grace, warn_ahead = world.settings.unregistered_grace_s, world.settings.destroy_grace_s
    world.provider.add("orphan", created_at=created)
    world.reap()  # first seen
    world.clock.advance(grace - warn_ahead - 1 * MIN)
    world.reap()
    assert world.pod("orphan").origin == "adopted"
    assert world.pod("orphan").state == "ok"
    world.clock.advance(1 * MIN)
    world.reap()
    # Warned ahead: "will destroy at first seen + grace"
    assert world.pod("orphan").state == "down"
    assert world.pod("orphan").destroy_at == created + grace
    assert world.provider.destroyed == []
    world.clock.advance(warn_ahead)
    world.reap()
    assert world.provider.destroyed == ["orphan"]
    assert world.kinds("orphan") == ["mark", "destroying", "destroyed"]


def test_an_unregistered_pod_without_a_creation_time_is_timed_from_first_sight(world: World) -> None:
    world.provider.add("orphan", created_at=None)
    first_seen = world.now
    world.reap()
    world.clock.advance(world.settings.unregistered_grace_s - world.settings.destroy_grace_s - 1 * MIN)
    world.reap()
    assert world.pod("orphan").state == "ok"
    world.clock.advance(1 * MIN)
    world.reap()
    assert world.pod("orphan").state == "down"
    assert world.pod("orphan").destroy_at == first_seen + world.settings.unregistered_grace_s


def test_a_late_registration_rescues_an_adopted_pod(world: World) -> None:
    world.provider.add("slow", created_at=world.now)
    world.reap()
    world.clock.advance(world.settings.unregistered_grace_s - world.settings.destroy_grace_s)
    world.reap()
    assert world.pod("slow").state == "down"
    world.register("slow", at_provider=False)
    assert world.pod("slow").origin == "registered"
    world.ping("slow")
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    assert world.provider.destroyed == []


def test_it_never_touches_a_pod_gpuc_did_not_start(world: World) -> None:
    world.provider.add("theirs", name="my-notebook", managed=False, created_at=world.now - 86400)
    world.provider.add("lookalike", name="gpuc-lookalike", managed=False, created_at=world.now - 86400)
    world.provider.add("unnamed", name="stable-diffusion", managed=True, created_at=world.now - 86400)
    world.run(5 * 3600)
    assert world.provider.destroyed == []
    assert world.store.list_pods() == []
    assert world.kinds() == []


def test_a_registered_pod_the_provider_does_not_mark_as_gpucs_is_alert_only(world: World) -> None:
    world.register("p1")
    world.provider.set("p1", managed=False)
    world.clock.advance(3600)
    world.reap()
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    assert world.kinds("p1") == ["alert"]


# -- F12: provider errors ----------------------------------------------------------------------


def test_a_provider_outage_makes_the_pass_blind_with_one_alert(world: World) -> None:
    for pod_id in ("p1", "p2"):
        world.register(pod_id)
        world.ping(pod_id)
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.pod("p1").state == "down"
    world.provider.fail = outage()
    world.clock.advance(world.settings.destroy_grace_s)
    report = world.reap()
    # Nothing destroyed, one "reaper blind" alert for the whole pass
    assert report.blind
    assert world.provider.destroyed == []
    assert world.kinds() == ["mark", "mark", "blind"]
    assert [a.action for a in report.actions].count("skip") == 2
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.kinds() == ["mark", "mark", "blind"]  # still blind: no repeat inside the nag interval
    world.provider.fail = None
    world.clock.advance(5 * MIN)
    world.reap()
    assert sorted(world.provider.destroyed) == ["p1", "p2"]
    assert world.kinds()[3] == "blind"  # "the reaper can see again"


def test_a_provider_that_cannot_be_built_is_blind_not_empty(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock)
    world.register("p1")

    def broken(name: str) -> FakeProvider:
        raise ProviderSchemaError("list body not recognised", provider=name)

    world.deps.providers = ProviderPool(broken, scan=["fake"], known=["fake"])
    world.clock.advance(3600)
    report = world.reap()
    assert report.blind
    assert world.pod("p1").state == "ok"  # not marked, not "gone"
    world.store.close()


def test_a_destroy_error_stops_further_destroys_and_is_retried_idempotently(world: World) -> None:
    for pod_id in ("p1", "p2"):
        world.register(pod_id)
        world.ping(pod_id)
    world.clock.advance(5 * MIN)
    world.reap()
    world.provider.fail_destroy = outage()
    world.clock.advance(world.settings.destroy_grace_s)
    report = world.reap()
    assert report.blind
    assert world.pod("p1").state == "destroying"  # the end is recorded, the call failed
    assert world.pod("p2").state == "down"  # skipped: the pass went blind
    world.provider.fail_destroy = None
    world.provider.pods.pop("p1")  # the "failed" call had in fact gone through
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.pod("p1").state == "destroying"  # one "not found" is not yet "gone"
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.pod("p1").state == "destroyed"
    assert world.pod("p2").state == "destroyed"
    assert world.provider.destroyed.count("p1") == 0  # already gone: success without a second call
    assert world.kinds("p1") == ["mark", "destroying", "destroy_failed", "destroyed"]


def test_a_pod_already_gone_at_the_provider_is_success_without_a_call(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.provider.pods.pop("p1")
    report = world.reap()
    assert [a.action for a in report.actions] == ["skip"]  # noted; the next pass must agree
    assert world.pod("p1").state == "ok"
    world.clock.advance(5 * MIN)
    report = world.reap()
    assert [a.action for a in report.actions] == ["confirm"]
    assert world.pod("p1").state == "destroyed"
    assert world.pod("p1").end_at is None  # gone outside gpuc: the ledger shows an open row
    assert world.provider.destroyed == []
    assert world.kinds("p1") == ["gone"]


def test_the_unknown_provider_status_is_alert_only(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.provider.set("p1", status="unknown", raw_status="offline")
    world.clock.advance(2 * 3600)
    world.reap()
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    assert "unknown" in (world.pod("p1").reason or "")


# -- F13: notifications down -------------------------------------------------------------------


def test_a_dead_phone_channel_never_blocks_a_destroy(home: Path, clock: FakeClock) -> None:
    tries: list[httpx.Request] = []

    def down(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        return httpx.Response(503)

    sleeps: list[float] = []
    notifier = Notifier(
        home / "outbox.jsonl",
        parse_channels("ntfy://gpuc-topic-x"),
        clock=clock,
        transport=httpx.MockTransport(down),
        sleep=sleeps.append,
    )
    world = make_world(home, clock, notifier=notifier)
    world.register("p1")
    world.ping("p1")
    t0 = world.now
    world.clock.advance(5 * MIN)
    world.reap()
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    # The destroy happened on time; every message was tried 3 times and is in the outbox
    assert world.provider.destroyed == ["p1"]
    assert world.pod("p1").end_at == t0 + 5 * MIN + world.settings.destroy_grace_s
    assert len(tries) == 3 * 3
    assert [m.kind for m in world.outbox()] == ["mark", "destroying", "destroyed"]
    world.store.close()


class ExplodingNotifier:
    def __init__(self) -> None:
        self.calls = 0

    def send(self, title: str, message: str, **kwargs: object) -> None:
        self.calls += 1
        raise RuntimeError("phone is down")

    def flush(self) -> None:
        raise RuntimeError("phone is down")


def test_a_notifier_that_raises_does_not_stop_a_destroy(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    exploding = ExplodingNotifier()
    world.deps.notifier = exploding
    world.clock.advance(5 * MIN)
    assert reap_safely(world.deps) is not None
    world.clock.advance(world.settings.destroy_grace_s)
    assert reap_safely(world.deps) is not None
    assert world.provider.destroyed == ["p1"]
    assert world.pod("p1").state == "destroyed"
    assert exploding.calls == 3  # mark, destroying, destroyed: each tried, none fatal
    assert world.kinds("p1") == ["mark", "destroying", "destroyed"]  # the store's log still has them


# -- F14: the reaper's own heartbeat ----------------------------------------------------------


def test_each_pass_records_the_reapers_heartbeat_and_status_shows_it(world: World) -> None:
    assert world.admin("GET", "/v1/status").body["reaper_last_run"] is None
    world.reap()
    first = world.now
    world.clock.advance(5 * MIN)
    world.reap(dry_run=True)  # a dry run is not a pass
    status = world.admin("GET", "/v1/status").body
    assert status["reaper_last_run"] == first
    world.reap()
    assert world.admin("GET", "/v1/status").body["reaper_last_run"] == world.now


def test_a_crashing_pass_does_not_look_like_a_run(world: World) -> None:
    world.reap()
    last = world.now

    def boom(*args: object) -> list[object]:
        raise OSError("disk full")

    world.clock.advance(5 * MIN)
    original = world.store.list_pods
    world.store.list_pods = boom  # type: ignore[method-assign, assignment]
    assert reap_safely(world.deps) is None
    world.store.list_pods = original  # type: ignore[method-assign]
    meta = world.store.get_meta("reaper")
    assert meta is not None
    assert meta.value["last_run"] == last
    assert meta.value["last_attempt"] == world.now
    assert "OSError" in meta.value["last_error"]


# -- Concurrency and breakers ------------------------------------------------------------------


@pytest.mark.parametrize("same_store", [True, False], ids=["one-store", "two-connections"])
def test_two_reapers_at_once_destroy_once(home: Path, clock: FakeClock, same_store: bool) -> None:
    world = make_world(home, clock, fleet_silence_min_pods=100)
    for pod_id in ("p1", "p2", "p3"):
        world.register(pod_id)
        world.ping(pod_id)
    world.clock.advance(5 * MIN)
    world.reap()
    world.clock.advance(world.settings.destroy_grace_s)
    # Two invocations of the same scheduled event: threads on one store, or two connections to the file
    store = world.store if same_store else SqliteStore(home / "watchdog.db")
    other = world.deps.__class__(**{**world.deps.__dict__, "store": store})
    world.provider.barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(deps: object) -> None:
        try:
            reap_once(deps, world.now)  # type: ignore[arg-type]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(d,)) for d in (world.deps, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sorted(world.provider.destroyed) == ["p1", "p2", "p3"]  # each once
    assert world.kinds().count("destroyed") == 3
    assert world.kinds().count("destroying") == 3
    if not same_store:
        other.store.close()
    world.store.close()


def test_a_duplicate_scheduled_event_acts_once(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.clock.advance(5 * MIN)
    world.reap()
    world.reap()
    assert world.kinds("p1") == ["mark"]
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    world.reap()
    assert world.provider.destroyed == ["p1"]
    assert world.kinds("p1") == ["mark", "destroying", "destroyed"]


def test_half_the_fleet_silent_at_once_is_alert_only(world: World) -> None:
    for pod_id in ("a", "b", "c", "d", "e", "f"):
        world.register(pod_id)
        world.ping(pod_id)
    world.clock.advance(6 * MIN)
    for pod_id in ("d", "e", "f"):
        world.ping(pod_id)
    report = world.reap()
    assert world.provider.destroyed == []
    assert {world.pod(p).state for p in ("a", "b", "c")} == {"late"}
    assert "fleet" in world.kinds()
    assert "mark" not in world.kinds()
    assert any(a.action == "alert" and a.pod_id == "*" for a in report.actions)


def test_one_silent_pod_of_six_is_destroyed(world: World) -> None:
    for pod_id in ("a", "b", "c", "d", "e", "f"):
        world.register(pod_id)
        world.ping(pod_id)
    for _ in range(3):
        world.clock.advance(4 * MIN)
        for pod_id in ("b", "c", "d", "e", "f"):
            world.ping(pod_id)
        world.reap()
    assert world.provider.destroyed == ["a"]


def test_it_caps_destroys_per_pass(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock, max_destroys_per_run=2, fleet_silence_min_pods=100)
    for i in range(5):
        world.register(f"p{i}")
        world.ping(f"p{i}")
    world.clock.advance(5 * MIN)
    world.reap()
    world.clock.advance(world.settings.destroy_grace_s)
    report = world.reap()
    assert len(world.provider.destroyed) == 2
    assert [a.action for a in report.actions].count("skip") == 3
    assert "cap" in world.kinds()
    world.clock.advance(5 * MIN)
    world.reap()
    world.clock.advance(5 * MIN)
    world.reap()
    assert len(world.provider.destroyed) == 5
    world.store.close()


def test_a_lease_turns_a_destroy_into_an_alert(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    assert world.admin("POST", "/v1/pods/p1/keep", _keep(world.now + 3600)).status == 200
    world.run(30 * MIN)
    assert world.pod("p1").state == "late"
    world.run(31 * MIN)  # the lease is over
    assert world.pod("p1").state == "down"
    assert world.kinds("p1") == ["alert", "mark"]


def test_a_dry_run_reads_but_writes_nothing(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.provider.add("orphan", created_at=world.now - 3600)
    world.clock.advance(5 * MIN)
    report = world.reap(dry_run=True)
    assert report.dry_run
    # The orphan, an hour old but first seen now, gets its whole window: nothing to do yet
    assert sorted((a.pod_id, a.action) for a in report.actions) == [("p1", "mark")]
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "ok"
    assert world.store.get_pod("orphan") is None
    assert world.kinds() == []
    assert world.outbox() == []


def test_a_policy_override_from_register_changes_the_silence_limit(world: World) -> None:
    world.register("p1", policy={"silence_limit_s": 30 * MIN})
    world.ping("p1")
    world.run(10 * MIN)
    assert world.pod("p1").state == "ok"
    world.run(20 * MIN)
    assert world.pod("p1").state == "down"


def _keep(until: float) -> KeepRequest:
    return KeepRequest(until=until)
