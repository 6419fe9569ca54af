from __future__ import annotations

import pytest

from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.idle import (
    IdleState,
    Observation,
    Thresholds,
    Verdict,
    advance,
    judge,
    suspension,
)
from gpuc.instance_side.procs import PythonProc, SshSession

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
