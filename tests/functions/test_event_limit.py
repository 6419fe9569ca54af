"""Signed events are limited per pod: a handful of pushes an hour, the rest told as one.

One pod's token once turned 1,000 signed events into 1,000 phone notifications. Each accepted event still
does what it is for (its ledger end, its record); only the push is limited. Both stores.
"""

from __future__ import annotations

import pytest
from fakes.watchdog import World

from gpuc.functions.eventlimit import WINDOW_S

EVENT_PUSHES = {
    "info",
    "job_exit",
    "sync_failed",
    "sync_ok",
    "idle_warning",
    "agent_start",
    "events_held",
    "destroy_failed",
}


def pushes(world: World) -> list[str]:
    """The events' pushes that reached the phone (the outbox receives exactly what the channels do); the
    reaper's own notifications about the pod are not the events'."""
    return [m.kind for m in world.outbox() if m.kind in EVENT_PUSHES]


def test_a_flood_of_signed_events_is_six_pushes_and_one_summary(any_world: World) -> None:
    world = any_world
    world.register("p1")
    limit = world.settings.events_per_hour
    n = 200
    end_at = world.now
    for i in range(n):
        world.clock.advance(1.0)
        if i == n // 2:  # the job's end, deep inside the flood: its push is held, its effects are not
            answer = world.event("p1", "job_exit", "job exited with code 0", exit_code=0, end_at=end_at)
        else:
            answer = world.event("p1", "info", f"visit https://evil.example/{i}")
        assert answer.status == 200
    # The job's end is money-critical: its own budget, never held behind a flood of progress.
    assert pushes(world) == ["info"] * limit + ["job_exit"]
    rec = world.pod("p1")
    assert (rec.state, rec.end_at, rec.ended_by) == ("ended", end_at, "wrapper")  # recorded all the same
    assert rec.events_held == n - limit - 1
    world.reap()  # the hour is not over: nothing more yet
    assert len(pushes(world)) == limit + 1
    world.clock.advance(WINDOW_S)
    world.reap()
    world.reap()  # said once
    assert pushes(world) == ["info"] * limit + ["job_exit", "events_held"]
    summary = [m for m in world.outbox() if m.kind == "events_held"][-1]
    assert summary.title == f"exp sent {n - limit - 1} more events (not pushed)"
    assert "the latest: info" in summary.message and "evil" not in summary.message
    assert world.pod("p1").events_held is None


def test_the_next_hour_tells_what_the_last_held_then_pushes_again(any_world: World) -> None:
    world = any_world
    world.register("p1")
    limit = world.settings.events_per_hour
    for _ in range(limit + 3):
        assert world.event("p1", "sync_failed", "periodic results push failed").status == 200
    world.clock.advance(WINDOW_S + 1)
    assert world.event("p1", "idle_warning", "idle for 15 min").status == 200  # before any reaper pass
    assert pushes(world) == ["sync_failed"] * limit + ["events_held", "idle_warning"]
    assert "3 more events" in world.outbox()[-2].title
    assert "the latest: sync failed" in world.outbox()[-2].message


def test_a_pod_that_is_gone_still_gets_its_summary(any_world: World) -> None:
    world = any_world
    world.register("p1")
    for _ in range(world.settings.events_per_hour + 2):
        world.event("p1", "info", "hi")
    world.provider.pods.pop("p1")  # deleted outside gpuc (the console, preempted)
    for _ in range(4):  # gone needs two passes; the summary waits for no hour once the pod is gone
        world.clock.advance(world.settings.reaper_period_s)
        world.reap()
    assert world.pod("p1").state == "destroyed"
    assert pushes(world).count("events_held") == 1


def test_ordinary_pods_are_not_limited(any_world: World) -> None:
    """A pod's own life is far under the limit: start, a warning, its exit, its sync."""
    world = any_world
    for pod_id in ("p1", "p2"):
        world.register(pod_id)
        for kind in ("agent_start", "idle_warning", "sync_ok", "job_exit"):
            assert world.event(pod_id, kind, kind.replace("_", " ")).status == 200
    assert len(pushes(world)) == 8 and "events_held" not in pushes(world)


@pytest.mark.parametrize("flood", ["info", "sync_failed", "idle_warning"])
def test_a_burst_of_one_kind_never_hides_a_money_critical_one(any_world: World, flood: str) -> None:
    """Each money-critical kind has its own budget: a burst of progress, or of another kind, holds only itself."""
    world = any_world
    world.register("p1")
    limit = world.settings.events_per_hour
    for _ in range(limit * 5):
        assert world.event("p1", flood, "periodic results push failed").status == 200
    critical = [k for k in ("sync_failed", "destroy_failed", "idle_warning", "job_exit") if k != flood]
    for kind in critical:
        assert world.event("p1", kind, kind.replace("_", " "), exit_code=1).status == 200
    assert pushes(world) == [flood] * limit + critical
    assert world.pod("p1").events_held == limit * 4  # the burst: held and counted, told as one
    world.clock.advance(WINDOW_S + 1)
    world.reap()
    assert pushes(world)[-1] == "events_held"


def test_a_critical_kind_has_a_budget_too(any_world: World) -> None:
    """A token's flood of one critical kind is still limited: its own hour's budget, then one summary."""
    world = any_world
    world.register("p1")
    limit = world.settings.events_per_hour
    for _ in range(limit + 4):
        assert world.event("p1", "destroy_failed", "could not destroy").status == 200
    assert pushes(world) == ["destroy_failed"] * limit
    assert world.pod("p1").events_held == 4
    world.clock.advance(WINDOW_S + 1)
    assert world.event("p1", "destroy_failed", "could not destroy").status == 200  # a new hour: told, then pushed
    assert pushes(world)[limit:] == ["events_held", "destroy_failed"]
