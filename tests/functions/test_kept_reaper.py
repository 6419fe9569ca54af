"""F16 in the watchdog: a pod kept for its results (its sync failed) is never destroyed by the reaper,
whatever the rule; any kill of it becomes a stop while it runs, an alert (daily, with its disk's cost)
once stopped; a kept pod still running a period past its kept window is stopped. Only the user's word
(`down --force`, `gpuc results`) ends it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.watchdog import World, make_world, outage

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.functions.reaper import steps, sweep
from gpuc.functions.reaper.rules import Ruling
from gpuc.functions.reaper.state import Pass

MIN = 60.0
HOUR = 3600.0
WINDOW = 2 * HOUR


@pytest.fixture
def hourly(home: Path, clock: FakeClock) -> Iterator[World]:
    """Hourly passes (the reaper's period set to an hour): days of a stopped pod in a few hundred passes."""
    w = make_world(home, clock, reaper_period_s=HOUR)
    yield w
    w.store.close()


def kept(world: World, pod_id: str = "p1", left: float = WINDOW) -> float:
    """The pod's nag: "kept alive: sync failed", it stops itself in `left`. Returns when it was heard."""
    answer = world.event(pod_id, "sync_failed", "kept alive: sync failed: disk full", kept_left_s=left)
    assert answer.status == 200, answer.body
    return world.now


def alive_until(world: World, pod_id: str, seconds: float, step: float = 5 * MIN) -> None:
    """The agent pings every pass; the reaper runs every `step`."""
    world.run(seconds, keep_alive=(pod_id,), period=step)


def test_the_kept_word_is_recorded_once_on_the_watchdogs_clock(any_world: World) -> None:
    world = any_world
    world.register("p1")
    at = kept(world)
    world.clock.advance(HOUR)
    kept(world, left=HOUR)
    world.ping("p1", kept_left_s=HOUR)
    rec = world.pod("p1")
    assert (rec.kept_at, rec.kept_until) == (at, at + WINDOW)
    assert world.store.list_pods()[0].kept_at == at, "listed with it too"


def test_a_ping_alone_says_kept_when_the_event_was_lost(any_world: World) -> None:
    world = any_world
    world.register("p1")
    assert world.ping("p1", kept_left_s=30 * MIN).status == 200
    rec = world.pod("p1")
    assert rec.kept_at == world.now and rec.kept_until == world.now + 30 * MIN


def test_the_pods_word_is_capped_at_the_watchdogs_kept_window(any_world: World) -> None:
    world = any_world
    world.register("p1")
    kept(world, left=30 * HOUR)
    assert world.pod("p1").kept_until == world.now + world.settings.kept_window_s


def test_an_end_after_a_verified_sync_clears_the_kept_state(any_world: World) -> None:
    world = any_world
    world.register("p1")
    kept(world)
    world.event("p1", "job_exit", "job exited with code 0; results: 3 files; destroying", end_at=world.now)
    rec = world.pod("p1")
    assert rec.kept_at is None and rec.kept_until is None and rec.state == "ended"


def test_a_kept_pod_still_running_is_stopped_one_period_after_its_window_and_not_before(any_world: World) -> None:
    world = any_world
    world.register("p1")
    world.ping("p1")
    until = kept(world) + WINDOW
    period = world.settings.reaper_period_s
    alive_until(world, "p1", WINDOW + period - world.settings.destroy_grace_s - 1)
    assert world.provider.pods["p1"].status == "running" and world.kinds("p1") == ["sync_failed"]
    alive_until(world, "p1", 3 * period)
    assert world.provider.destroyed == [], "a kept pod is never destroyed"
    stopped = world.provider.stopped_at["p1"]
    assert until + period <= stopped <= until + 2 * period
    assert world.kinds("p1") == ["sync_failed", "mark", "kept_stopped"]
    warning, done = world.outbox()[-2:]
    assert "stops at" in warning.title and "gpuc results p1" in warning.message
    assert "GPU billing ended" in done.message and "gpuc down p1 --force" in done.message


def test_a_silent_kept_pod_is_stopped_not_destroyed(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    kept(world)
    world.run(HOUR)  # the agent died: no more pings
    assert world.provider.destroyed == []
    assert world.provider.pods["p1"].status == "stopped"
    assert world.kinds("p1")[-2:] == ["mark", "kept_stopped"]


def test_a_stopped_kept_pod_is_never_destroyed_and_nagged_daily_with_its_disk_cost(hourly: World) -> None:
    world = hourly
    world.register("p1")
    world.ping("p1")
    kept(world)
    world.provider.set("p1", status="stopped", disk_gb=30.0, disk_usd_gb_month=0.20)  # the pod stopped itself
    world.reap()
    world.run(5 * 24 * HOUR + MIN)
    assert world.provider.destroyed == [] and "p1" in world.provider.pods
    alerts = [n for n in world.store.recent_notifications(1000) if n.pod_id == "p1" and n.kind == "alert"]
    assert len(alerts) == 5  # from 24 h on, once a day
    assert "about $0.20/day (30 GB x $0.20/GB/month)" in alerts[0].message
    assert "gpuc results p1" in alerts[0].message and "gpuc down p1 --force" in alerts[0].message


def test_a_stopped_kept_pod_with_no_disk_price_says_unknown(hourly: World) -> None:
    world = hourly
    world.register("p1")
    kept(world)
    world.provider.set("p1", status="stopped")
    world.reap()
    world.run(25 * HOUR)
    alerts = [n.message for n in world.store.recent_notifications(1000) if n.kind == "alert"]
    assert alerts and "an unknown amount" in alerts[0]


@pytest.mark.parametrize("rule", ["deadline", "silence", "ended", "paused"])
def test_any_kill_ruling_of_a_kept_pod_becomes_a_stop(world: World, monkeypatch: pytest.MonkeyPatch, rule: str) -> None:
    """The gate is on the ruling, not on the rules: a rule added later (the deadline) cannot destroy it."""
    world.register("p1")
    world.ping("p1")
    kept(world)
    monkeypatch.setattr(sweep, "judge", lambda rules, rec, pod: Ruling("kill", rule, f"{rule} says so"))
    world.run(HOUR)
    assert world.provider.destroyed == []
    assert world.provider.pods["p1"].status == "stopped"


def test_a_destroy_that_reaches_a_kept_pod_anyway_is_refused(world: World) -> None:
    """The last line: `destroy` and `retry_destroy` refuse a kept pod even if a path missed the gate."""
    world.register("p1")
    kept(world)
    rec = world.pod("p1")
    run = Pass(world.deps, world.now, False, api.ReapReport(ran_at=world.now))
    steps.destroy(run, rec, "some new rule")
    world.store.update_if("p1", {}, {"state": "destroying", "destroy_started_at": world.now - HOUR})
    steps.retry_destroy(run, world.pod("p1"))
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"


def test_a_pod_kept_after_the_pass_read_it_is_not_destroyed(any_world: World) -> None:
    world = any_world
    world.register("p1")
    world.ping("p1")
    world.run(5 * MIN)  # silent: marked, due for destroy at the next pass
    assert world.pod("p1").state == "down"

    def kept_word_during_the_pass() -> None:
        world.provider.on_list = None
        kept(world)

    world.provider.on_list = kept_word_during_the_pass
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    assert world.provider.destroyed == []


def test_down_force_clears_the_kept_state_and_the_reaper_may_then_destroy(any_world: World) -> None:
    world = any_world
    world.register("p1")
    kept(world)
    end = api.EndRequest(end_at=world.now, by="down")
    assert world.admin("POST", "/v1/pods/p1/end", end).status == 200
    assert world.pod("p1").kept_at is None
    world.run(HOUR)  # `down`'s own destroy failed: the reaper finishes the user's word
    assert world.provider.destroyed == ["p1"]


def test_a_blind_pass_never_stops_a_kept_pod(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    kept(world, left=0.0)
    world.provider.fail_on["get"] = outage()
    world.provider.hide("p1")  # list does not show it; get cannot read it
    world.run(HOUR, keep_alive=("p1",))
    assert "p1" not in world.provider.stopped_at and world.provider.destroyed == []


def test_a_lease_holds_off_the_kept_stop(world: World) -> None:
    world.register("p1")
    kept(world, left=0.0)
    assert world.admin("POST", "/v1/pods/p1/keep", api.KeepRequest(until=world.now + 2 * HOUR)).status == 200
    alive_until(world, "p1", HOUR)
    assert "p1" not in world.provider.stopped_at


def test_the_deadline_of_a_kept_pod_stops_it_and_never_destroys_it(world: World) -> None:
    """The real deadline rule (F15) through the gate: ended at its deadline as every pod is, but by a stop."""
    world.register("p1", deadline_at=world.now + HOUR)
    world.ping("p1")
    kept(world)
    alive_until(world, "p1", HOUR + 2 * world.settings.reaper_period_s)
    assert world.provider.destroyed == []
    assert world.provider.pods["p1"].status == "stopped"
    assert world.provider.stopped_at["p1"] <= world.pod("p1").registered_at + HOUR + world.settings.reaper_period_s
