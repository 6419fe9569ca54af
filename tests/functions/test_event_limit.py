"""Signed events are limited per pod: a handful of pushes an hour, the rest told as one (issue 17.3).

One pod's token once turned 1,000 signed events into 1,000 phone notifications. Each accepted event still
does what it is for (its ledger end, its record); only the push is limited. Both stores.
"""

from __future__ import annotations

from watchdog_fakes import World

from gpuc.functions.eventlimit import WINDOW_S

EVENT_PUSHES = {"info", "job_exit", "sync_failed", "sync_ok", "idle_warning", "agent_start", "events_held"}


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
    assert pushes(world) == ["info"] * limit
    rec = world.pod("p1")
    assert (rec.state, rec.end_at, rec.ended_by) == ("ended", end_at, "wrapper")  # recorded all the same
    assert rec.events_held == n - limit
    world.reap()  # the hour is not over: nothing more yet
    assert len(pushes(world)) == limit
    world.clock.advance(WINDOW_S)
    world.reap()
    world.reap()  # said once
    assert pushes(world) == ["info"] * limit + ["events_held"]
    summary = [m for m in world.outbox() if m.kind == "events_held"][-1]
    assert summary.title == f"exp sent {n - limit} more events (not pushed)"
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
