from __future__ import annotations

import pytest

from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.idle import (
    IdleState,
    JobActivity,
    Observation,
    Thresholds,
    Verdict,
    advance,
    job_activity,
    judge,
    suspension,
)
from gpuc.instance_side.procs import JobTree, ProcCounters, PythonProc, SshSession

TH = Thresholds(gpu_pct=5.0, warn_s=900.0, destroy_s=1200.0, ssh_window_s=600.0, check_interval_s=60.0)
NOW = 1_790_000_000.0
IDLE = Verdict(idle=True, reason=None, active_ssh=0)
BUSY = Verdict(idle=False, reason="GPU 0 at 90%", active_ssh=0)


def gpu(util: float | None, error: str | None = None, index: int = 0) -> GpuSample:
    return GpuSample(index=index, utilization_pct=util, error=error)


def test_it_is_idle_when_every_gpu_is_quiet_and_nothing_runs() -> None:
    verdict = judge(Observation(gpus=(gpu(0.0), gpu(4.9, index=1))), NOW, TH)
    assert verdict.idle and verdict.reason is None


@pytest.mark.parametrize(
    ("obs", "reason"),
    [
        (Observation(gpus=(gpu(0.0), gpu(5.0, index=1))), "GPU 1 at 5%"),
        (Observation(gpu_error="NVML init failed: Unknown Error"), "GPU reading failed"),
        (Observation(gpus=(gpu(0.0, error="GPU is lost"),)), "GPU 0 error"),
        (Observation(gpus=(gpu(None),)), "GPU 0 utilisation unknown"),
        (Observation(python=(PythonProc(41, "python3"),)), "1 python process (pid 41 python3)"),
        (Observation(ssh=(SshSession("pts/0", NOW - 30),)), "ssh pts/0 active"),
        (Observation(probe_error="PermissionError"), "process scan failed"),
        (Observation(job=JobActivity(pid=7, first=False, cpu_ticks=3)), "job pid 7 making progress (cpu +0.03s"),
        (Observation(job=JobActivity(pid=7, first=False, io_bytes=10)), "job pid 7 making progress (cpu +0.00s, io"),
        (Observation(job=JobActivity(pid=7, first=True)), "job pid 7 just seen: counted as busy"),
        (Observation(job_error="cannot list /proc"), "job scan failed (cannot list /proc): counted as busy"),
    ],
)
def test_it_counts_anything_running_or_unreadable_as_busy(obs: Observation, reason: str) -> None:
    verdict = judge(obs, NOW, TH)
    assert not verdict.idle
    assert verdict.reason is not None and verdict.reason.startswith(reason)


def test_it_stops_counting_a_quiet_ssh_session_after_the_input_window() -> None:
    session = SshSession("pts/0", last_input=NOW)
    assert not judge(Observation(ssh=(session,)), NOW + 599, TH).idle
    at_window = judge(Observation(ssh=(session,)), NOW + 600, TH)
    assert at_window.idle and at_window.active_ssh == 0


def test_it_warns_at_fifteen_idle_minutes_and_destroys_at_twenty() -> None:
    state, actions = IdleState(), dict[str, int]()
    for minute in range(0, 25):
        state, action = advance(state, IDLE, NOW + minute * 60, TH, suspended=False)
        if action != "none":
            actions.setdefault(action, minute)
    assert actions == {"warn": 15, "destroy": 20}


def test_a_busy_check_resets_the_idle_time_and_the_warning() -> None:
    state = IdleState()
    for minute in range(0, 16):
        state, _ = advance(state, IDLE, NOW + minute * 60, TH, suspended=False)
    assert state.warned
    state, action = advance(state, BUSY, NOW + 16 * 60, TH, suspended=False)
    assert state == IdleState() and action == "none"


def test_a_long_gap_between_checks_never_jumps_to_a_destroy() -> None:
    """A frozen container resumes after an hour: the pod gets its warning first."""
    state, _ = advance(IdleState(), IDLE, NOW, TH, suspended=False)
    state, action = advance(state, IDLE, NOW + 3600, TH, suspended=False)
    assert action == "none" and state.idle_s == 120


def test_a_destroy_always_follows_a_warning_even_when_both_thresholds_are_equal() -> None:
    th = Thresholds(gpu_pct=5, warn_s=120, destroy_s=120, ssh_window_s=60, check_interval_s=60)
    state, actions = IdleState(), []
    for minute in range(5):
        state, action = advance(state, IDLE, NOW + minute * 60, th, suspended=False)
        actions.append(action)
    assert actions == ["none", "none", "warn", "destroy", "destroy"]


def test_a_suspension_holds_the_idle_time_at_zero() -> None:
    state = IdleState()
    for minute in range(0, 60):
        state, action = advance(state, IDLE, NOW + minute * 60, TH, suspended=True)
        assert action == "none" and state.idle_s == 0


def test_keep_file_and_lease_suspend_until_the_lease_ends() -> None:
    assert suspension(True, None, NOW) == "kept by /workspace/.keep"
    assert suspension(False, NOW + 1, NOW) == "kept by a lease"
    assert suspension(False, NOW, NOW) is None
    assert suspension(False, None, NOW) is None


def tree(pid: int, **procs: tuple[int, int | None]) -> JobTree:
    """procs: "p<pid>" -> (cpu ticks, io bytes); every process started at tick 100."""
    return JobTree(pid, {(int(k[1:]), 100): ProcCounters(*v) for k, v in procs.items()})


def test_a_job_tree_that_did_not_grow_is_idle_on_the_job_count() -> None:
    before = tree(7, p7=(0, 0), p8=(120, 4096))
    activity = job_activity(before, tree(7, p7=(0, 0), p8=(120, 4096)))
    assert not activity.progressing
    assert judge(Observation(job=activity), NOW, TH).idle  # a hung job: the idle window runs


def test_growth_anywhere_in_the_tree_is_progress_cpu_or_io() -> None:
    before = tree(7, p7=(0, 0), p8=(120, 4096))
    assert job_activity(before, tree(7, p7=(0, 0), p8=(121, 4096))).cpu_ticks == 1
    assert job_activity(before, tree(7, p7=(0, 0), p8=(120, 5000))).io_bytes == 904
    born = job_activity(before, tree(7, p7=(0, 0), p8=(120, 4096), p9=(2, 0)))
    assert born.progressing and born.cpu_ticks == 2  # a child started and worked between two checks


def test_a_child_that_ended_never_makes_progress_look_negative() -> None:
    before = tree(7, p7=(0, 0), p8=(500, 9000))
    reaped = job_activity(before, tree(7, p7=(500, 9000)))  # its time and I/O moved into the parent's
    assert reaped.cpu_ticks == 500 and reaped.io_bytes == 9000
    # Gone without landing in the tree (re-parented to init): no negative growth that could cancel out
    # another process's real work.
    orphaned = job_activity(before, tree(7, p7=(1, 0)))
    assert orphaned.cpu_ticks == 1 and orphaned.progressing


def test_unreadable_io_compares_cpu_alone() -> None:
    before = tree(7, p7=(10, None))
    assert not job_activity(before, tree(7, p7=(10, 123))).progressing  # io became readable: no baseline
    assert not job_activity(tree(7, p7=(10, 50)), tree(7, p7=(10, None))).progressing
    assert job_activity(before, tree(7, p7=(11, None))).progressing


def test_a_new_job_or_a_first_sight_counts_as_busy_once() -> None:
    assert job_activity(None, tree(7, p7=(0, 0))).first
    assert job_activity(tree(7, p7=(5, 0)), tree(9, p9=(5, 0))).first
