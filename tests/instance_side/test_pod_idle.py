from __future__ import annotations

import pytest

from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.idle import (
    IdleReading,
    IdleState,
    Observation,
    Thresholds,
    TreeActivity,
    advance,
    job_activity,
    judge,
    procs_activity,
    suspension,
)
from gpuc.instance_side.jobtree import JobTree
from gpuc.instance_side.procfs import CLK_TCK, ProcCounters
from gpuc.instance_side.procs import ProcTable, UserProc
from gpuc.instance_side.sshscan import SshSession

TH = Thresholds(gpu_pct=5.0, warn_s=900.0, destroy_s=1200.0, ssh_window_s=600.0, check_interval_s=60.0)
# The product's floors (core.settings): 0.1 CPU-second and 16 KiB per check.
FLOORS = Thresholds(5.0, 900.0, 1200.0, 600.0, 60.0, cpu_floor_s=0.1, io_floor_bytes=16 * 1024)
NOW = 1_790_000_000.0
IDLE = IdleReading(idle=True, reason=None, active_ssh=0)
BUSY = IdleReading(idle=False, reason="GPU 0 at 90%", active_ssh=0)


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
        (Observation(procs=(TreeActivity(41, False, cpu_ticks=3, comm="train"),)), "pid 41 train making progress"),
        (Observation(procs=(TreeActivity(41, True, comm="curl"),)), "pid 41 curl just seen: counted as busy"),
        (Observation(procs=(TreeActivity(41, False, unreadable=True, comm="x"),)), "pid 41 x: its I/O counters"),
        (Observation(ssh=(SshSession("pts/0", NOW - 30),)), "ssh pts/0 active"),
        (Observation(probe_error="PermissionError"), "process scan failed"),
        (Observation(job=TreeActivity(pid=7, first=False, cpu_ticks=3)), "job pid 7 making progress (cpu +0.03s"),
        (Observation(job=TreeActivity(pid=7, first=False, io_bytes=10)), "job pid 7 making progress (cpu +0.00s, io"),
        (Observation(job=TreeActivity(pid=7, first=True)), "job pid 7 just seen: counted as busy"),
        (Observation(job=TreeActivity(pid=7, first=False, unreadable=True)), "job pid 7: its I/O counters cannot"),
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
    assert not activity.progressing(TH)
    assert judge(Observation(job=activity), NOW, TH).idle  # a hung job: the idle window runs


def test_growth_anywhere_in_the_tree_is_progress_cpu_or_io() -> None:
    before = tree(7, p7=(0, 0), p8=(120, 4096))
    assert job_activity(before, tree(7, p7=(0, 0), p8=(121, 4096))).cpu_ticks == 1
    assert job_activity(before, tree(7, p7=(0, 0), p8=(120, 5000))).io_bytes == 904
    born = job_activity(before, tree(7, p7=(0, 0), p8=(120, 4096), p9=(2, 0)))
    assert born.progressing(TH) and born.cpu_ticks == 2  # a child started and worked between two checks


def test_a_child_that_ended_never_makes_progress_look_negative() -> None:
    before = tree(7, p7=(0, 0), p8=(500, 9000))
    reaped = job_activity(before, tree(7, p7=(500, 9000)))  # its time and I/O moved into the parent's
    assert reaped.cpu_ticks == 500 and reaped.io_bytes == 9000
    # Gone without landing in the tree (re-parented to init): no negative growth that could cancel out
    # another process's real work.
    orphaned = job_activity(before, tree(7, p7=(1, 0)))
    assert orphaned.cpu_ticks == 1 and orphaned.progressing(TH)


def test_unreadable_io_is_uncertain_hence_busy() -> None:
    """A download costs little CPU: with its I/O unreadable, a quiet CPU proves nothing."""
    before = tree(7, p7=(10, None))
    assert job_activity(before, tree(7, p7=(10, None))).progressing(FLOORS)
    assert job_activity(before, tree(7, p7=(10, 123))).progressing(FLOORS)  # readable now: no baseline yet
    assert job_activity(tree(7, p7=(10, 50)), tree(7, p7=(10, None))).progressing(FLOORS)
    assert not job_activity(tree(7, p7=(10, 50)), tree(7, p7=(10, 50))).progressing(FLOORS)


def test_a_new_job_a_reused_pid_or_a_first_sight_counts_as_busy_once() -> None:
    assert job_activity(None, tree(7, p7=(0, 0))).first
    assert job_activity(tree(7, p7=(5, 0)), tree(9, p9=(5, 0))).first
    restarted = JobTree(7, {(7, 999): ProcCounters(0, 0)})  # same pid, another start time
    assert job_activity(tree(7, p7=(5, 0)), restarted).first


# -- the floors: a heartbeat is not progress -----------------------------------------------------------
@pytest.mark.parametrize(
    ("cpu_ticks", "io_bytes", "progress"),
    [
        (0, 0, False),  # blocked on a lock, in input(), a dead data loader
        (1, 0, False),  # an event loop waking once a second (measured: 0.01 s a minute)
        (round(0.1 * CLK_TCK), 16 * 1024, False),  # at the floors: still a heartbeat
        (round(0.1 * CLK_TCK) + 1, 0, True),  # just above the CPU floor
        (0, 16 * 1024 + 1, True),  # a slow download (measured at 1 KiB/s: 64 KiB a minute)
        (19 * CLK_TCK, 0, True),  # a busy loop on a loaded machine (measured: 19.7 s a minute)
    ],
)
def test_growth_at_or_under_the_floors_is_no_progress(cpu_ticks: int, io_bytes: int, progress: bool) -> None:
    job = TreeActivity(7, False, cpu_ticks, io_bytes)
    other = TreeActivity(41, False, cpu_ticks, io_bytes, comm="python3")
    assert job.progressing(FLOORS) is progress
    assert judge(Observation(job=job), NOW, FLOORS).idle is not progress
    assert judge(Observation(procs=(other,)), NOW, FLOORS).idle is not progress


# -- the user's other processes, as trees ------------------------------------------------------------
def table(*procs: tuple[int, int, int, int | None], start: int = 100, unreadable: tuple[int, ...] = ()) -> ProcTable:
    """procs: (pid, ppid, cpu ticks, io bytes)."""
    return ProcTable(
        {(pid, start): UserProc(pid, ppid, f"p{pid}", False, ProcCounters(cpu, io)) for pid, ppid, cpu, io in procs},
        unreadable,
    )


def test_a_hung_python_outside_the_wrapper_does_not_keep_the_pod_busy() -> None:
    """The incident: a python blocked for ever sat at zero, and the pod stayed busy for it by name."""
    before = table((40, 1, 250, 9000))
    [hung] = procs_activity(before, table((40, 1, 250, 9000)))
    assert not hung.progressing(FLOORS) and judge(Observation(procs=(hung,)), NOW, FLOORS).idle


def test_a_tree_adds_up_its_members_and_a_child_born_since_counts_in_full() -> None:
    before = table((40, 1, 0, 0), (41, 40, 5, 0))
    [busy] = procs_activity(before, table((40, 1, 4, 0), (41, 40, 11, 8000), (42, 41, 3, 9000)))
    assert (busy.pid, busy.procs, busy.cpu_ticks, busy.io_bytes) == (40, 3, 13, 17000)
    assert busy.progressing(FLOORS)  # no one member above a floor, the tree is


def test_a_new_tree_is_just_seen_and_busy_until_the_next_check() -> None:
    before = table((40, 1, 0, 0))
    trees = procs_activity(before, table((40, 1, 0, 0), (50, 1, 0, 10)))
    by_pid = {t.pid: t for t in trees}
    assert by_pid[50].first and by_pid[50].progressing(FLOORS) and not by_pid[40].progressing(FLOORS)
    assert all(t.first for t in procs_activity(None, before))  # the agent's first check
    # The next check judges it on its growth since.
    later = procs_activity(table((40, 1, 0, 0), (50, 1, 0, 10)), table((40, 1, 0, 0), (50, 1, 0, 10)))
    assert not any(t.progressing(FLOORS) for t in later)


def test_a_reused_pid_is_a_new_process() -> None:
    [tree_] = procs_activity(table((40, 1, 500, 0)), table((40, 1, 0, 0), start=999))
    assert tree_.first


def test_a_process_whose_stat_or_io_cannot_be_read_is_busy() -> None:
    before = table((40, 1, 0, None))
    trees = procs_activity(before, table((40, 1, 0, None), unreadable=(77,)))
    assert [(t.pid, t.unreadable) for t in trees] == [(40, True), (77, True)]
    assert not judge(Observation(procs=trees), NOW, FLOORS).idle


def test_a_ppid_cycle_still_counts_every_process() -> None:
    """No such thing on Linux; a garbled reading must not make a process vanish from the count."""
    cycle = table((40, 41, 0, 0), (41, 40, 0, 0))
    trees = procs_activity(cycle, table((40, 41, 0, 0), (41, 40, 900, 0)))
    assert sum(t.procs for t in trees) == 2 and any(t.progressing(FLOORS) for t in trees)
