"""F16 on the pod: a pod kept because its results sync failed is kept for the kept window, nagging and
retrying the sync at the nag interval, then STOPPED (never destroyed); a sync that recovers ends the pod
as usual. One piece of code (instance_side/kept.py) for whoever holds the kept pod: the wrapper's loop or
the agent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes.pod import MINUTE, POD_ID, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.kept import kept_file, read_kept
from gpuc.instance_side.keptwatch import KeptWatch
from gpuc.instance_side.podfiles import is_ended
from gpuc.instance_side.wrapper import JobWrapper, job_environ

HOUR = 60 * MINUTE


@pytest.fixture
def pod(tmp_path: Path, clock: FakeClock) -> Pod:
    pod = wire(tmp_path / "pod", clock, role="wrapper", nag_interval_s=HOUR, kept_window_s=2 * HOUR)
    pod.sync.fail = "No space left on device"
    return pod


def wrapper(pod: Pod, **kw: Any) -> JobWrapper:
    return JobWrapper(
        pod.ctx.cfg,
        pod.paths,
        ender=pod.ender(),
        clock=pod.clock,
        log=pod.ctx.log,
        env=job_environ(os.environ, pod.ctx.secrets, POD_ID),
        terminal_delivers=False,
        **kw,
    )


def job() -> list[str]:
    return [sys.executable, "-c", "pass"]


def minutes_of(pod: Pod, kind: str, start: float) -> list[int]:
    return [
        round((t - start) / MINUTE)
        for e, t in zip(pod.functions.events, pod.functions.event_times, strict=True)
        if e.kind == kind
    ]


def test_the_wrapper_nags_then_warns_then_stops_the_pod_at_the_kept_window_and_never_destroys(pod: Pod) -> None:
    start = pod.clock.now()
    wrapper(pod, should_stop=lambda: pod.clock.now() - start > 6 * HOUR).run(job())
    assert minutes_of(pod, "sync_failed", start) == [0, 60]
    assert minutes_of(pod, "kept_stopping", start) == [105]
    assert minutes_of(pod, "kept_stopped", start) == [120]
    assert "destroy" not in pod.calls and pod.destroyer.stops == 1
    # The sync was retried at each nag and once more right before the stop.
    assert pod.calls[-3:] == ["sync", "stop", "notify:kept_stopped"] and pod.calls.count("sync") == 3
    stopped = pod.functions.events[-1].message
    assert "GPU billing ended" in stopped and f"gpuc results {POD_ID}" in stopped
    assert f"gpuc down {POD_ID} --force" in stopped
    state = read_kept(pod.paths)
    assert state is not None and state.stopped_at == start + 2 * HOUR
    assert not is_ended(pod.paths, POD_ID), "stopped, not ended: `gpuc results` resumes and ends it"


def test_the_stop_comes_after_the_window_not_before(pod: Pod) -> None:
    start = pod.clock.now()
    wrapper(pod, should_stop=lambda: pod.clock.now() - start >= 2 * HOUR - 1).run(job())
    assert "stop" not in pod.calls and "destroy" not in pod.calls
    assert "kept_stopped" not in pod.functions.kinds()


def test_each_nag_tells_the_watchdog_how_long_the_pod_is_kept(pod: Pod) -> None:
    start = pod.clock.now()
    wrapper(pod, should_stop=lambda: pod.clock.now() - start > 3 * HOUR).run(job())
    left = [e.kept_left_s for e in pod.functions.events if e.kind in ("sync_failed", "kept_stopping")]
    assert left == [2 * HOUR, HOUR, 15 * MINUTE]


def test_a_sync_that_recovers_at_a_nag_ends_the_pod_normally(pod: Pod) -> None:
    start = pod.clock.now()

    def bucket_back_after_an_hour() -> bool:
        if pod.clock.now() - start >= 30 * MINUTE:
            pod.sync.fail = None
        return False

    wrapper(pod, should_stop=bucket_back_after_an_hour).run(job())
    assert pod.functions.kinds() == ["sync_failed", "job_exit"]
    assert minutes_of(pod, "job_exit", start) == [60]
    end = pod.functions.events[-1]
    assert end.end_at is not None and end.exit_code == 0
    assert pod.calls[-4:] == ["sync", "verify", "notify:job_exit", "destroy"] and "stop" not in pod.calls
    assert not kept_file(pod.paths).exists()


def test_a_refused_self_stop_is_said_retried_at_the_nag_interval_and_never_becomes_a_destroy(pod: Pod) -> None:
    pod.destroyer.refuse_stop = True
    start = pod.clock.now()
    wrapper(pod, should_stop=lambda: pod.clock.now() - start > 4 * HOUR + 1).run(job())
    assert minutes_of(pod, "stop_failed", start) == [120, 180, 240]
    assert "the watchdog stops it" in pod.functions.events[-1].message.lower()
    assert pod.calls.count("stop") == 3 and "destroy" not in pod.calls


def test_ctrl_c_hands_the_kept_pod_to_the_agent_with_the_same_window(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, nag_interval_s=HOUR, kept_window_s=2 * HOUR)
    pod.sync.fail = "bucket unreachable"
    start = clock.now()
    wrapper(pod, should_stop=lambda: clock.now() - start >= 10 * MINUTE).run(job())  # the reminders stop
    agent = pod.agent()
    while not agent.stopped and clock.now() - start < 4 * HOUR:
        agent.tick(clock.now())
        clock.advance(MINUTE)
    assert minutes_of(pod, "kept_stopped", start) == [120], "the window runs from the first failed end"
    assert minutes_of(pod, "sync_failed", start) == [0, 60]
    assert agent.stopped and pod.calls.count("stop") == 1 and "destroy" not in pod.calls


def test_an_idle_end_kept_by_a_failed_sync_is_stopped_by_the_agent(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, nag_interval_s=30 * MINUTE, kept_window_s=HOUR)
    pod.sync.fail = "No space left on device"
    agent = pod.agent()
    start = clock.now()
    for _ in range(3 * 60):
        agent.tick(clock.now())
        clock.advance(MINUTE)
    assert minutes_of(pod, "sync_failed", start) == [20, 50]  # the idle end at 20, a nag 30 min later
    assert minutes_of(pod, "kept_stopped", start) == [80]
    assert "notify:idle_warning" not in pod.calls[pod.calls.index("notify:sync_failed") :]
    assert pod.calls.count("stop") == 1 and "destroy" not in pod.calls and agent.stopped
    kept = [hb.kept_left_s for hb in pod.functions.heartbeats if hb.kept_left_s is not None]
    assert kept and HOUR - MINUTE <= kept[0] <= HOUR, "every heartbeat of a kept pod says so too"
    assert kept == sorted(kept, reverse=True)


def test_only_one_holder_nags(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, nag_interval_s=HOUR, kept_window_s=2 * HOUR)
    pod.sync.fail = "bucket unreachable"
    ender = pod.ender()
    first, second = KeptWatch(ender, pod.ctx.cfg, pod.paths, clock), KeptWatch(ender, pod.ctx.cfg, pod.paths, clock)
    assert ender.end(pod_ending()) == "kept_sync_failed"
    outcomes = []
    for _ in range(3 * 60):
        outcomes.append((first.tick(clock.now()), second.tick(clock.now())))
        clock.advance(MINUTE)
    assert {b for _, b in outcomes if b != "kept_stopped"} == {"in_progress"}
    assert pod.functions.kinds().count("sync_failed") == 2 and pod.calls.count("stop") == 1
    first.release()


def test_a_retry_asked_by_the_agent_is_taken_by_the_holder_at_once(tmp_path: Path, clock: FakeClock) -> None:
    """The phone's "retry sync" reaches the agent, but the wrapper may hold the kept pod (after its
    job's failed sync). The holder retries at its next tick, not at its next nag an hour later."""
    pod = wire(tmp_path / "pod", clock, nag_interval_s=HOUR, kept_window_s=2 * HOUR)
    pod.sync.fail = "bucket unreachable"
    ender = pod.ender()
    holder, agent = KeptWatch(ender, pod.ctx.cfg, pod.paths, clock), KeptWatch(ender, pod.ctx.cfg, pod.paths, clock)
    assert ender.end(pod_ending()) == "kept_sync_failed"
    clock.advance(MINUTE)
    assert holder.tick(clock.now()) not in ("in_progress", None)  # the holder takes the kept pod
    assert agent.tick(clock.now()) == "in_progress"
    failed = pod.functions.kinds().count("sync_failed")
    pod.sync.fail = None  # the user fixed the bucket, then tapped "retry sync"
    agent.retry_now()
    clock.advance(1.0)
    assert holder.tick(clock.now()) == "destroyed"
    assert pod.functions.kinds().count("sync_failed") == failed and is_ended(pod.paths, POD_ID)
    holder.release()


def test_a_damaged_kept_file_keeps_the_pod_kept(pod: Pod) -> None:
    kept_file(pod.paths).write_text("{not json")
    state = read_kept(pod.paths)
    assert state is not None and state.stopped_at is None
    json.loads(json.dumps(state.__dict__))


def pod_ending() -> Any:
    from gpuc.instance_side.ending import Ending

    return Ending(kind="job_exit", message="job exited with code 0 after 5s", exit_code=0, duration_s=5.0)


def test_a_deadline_end_kept_by_a_failed_sync_is_held_once_and_stopped(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, nag_interval_s=HOUR, kept_window_s=2 * HOUR, deadline_at=clock.now() + HOUR)
    pod.sync.fail = "disk full"
    pod.procs.pids = [4242]  # busy: the deadline, not the idle watch, ends it
    agent = pod.agent()
    start = clock.now()
    while not agent.stopped and clock.now() - start < 5 * HOUR:
        agent.tick(clock.now())
        clock.advance(MINUTE)
    assert minutes_of(pod, "sync_failed", start) == [58, 118], "one holder: the kept window's, not the deadline's too"
    assert minutes_of(pod, "kept_stopped", start) == [178]
    assert pod.calls.count("stop") == 1 and "destroy" not in pod.calls
