"""The idle decision (SPEC layer 2), pure: observations and a time in, a verdict and an action out.

Idle iff every GPU is under the threshold AND no python process runs AND no ssh session is active
(its terminal saw input within the window, F4) AND the job under the wrapper made no progress since
the previous check (its process tree's CPU time and I/O did not grow: a download, a compiled step or
a shell pipeline is work; a job stuck at zero for the whole window is hung, hence idle). Anything we
could not read counts as busy: a wrong "idle" destroys someone's running job, a wrong "busy" costs at
most what the reaper bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.procs import CLK_TCK, JobTree, PythonProc, SshSession

Action = Literal["none", "warn", "destroy"]


@dataclass(frozen=True)
class Thresholds:
    gpu_pct: float
    warn_s: float
    destroy_s: float
    ssh_window_s: float
    check_interval_s: float

    @classmethod
    def from_config(cls, cfg: AgentConfig) -> Thresholds:
        return cls(
            gpu_pct=cfg.idle_gpu_pct,
            warn_s=cfg.idle_warn_s,
            destroy_s=cfg.idle_destroy_s,
            ssh_window_s=cfg.ssh_input_window_s,
            check_interval_s=cfg.idle_check_interval_s,
        )


@dataclass(frozen=True)
class JobActivity:
    """What the job's process tree did between two checks."""

    pid: int
    first: bool  # first sight of this job: nothing to compare with yet
    cpu_ticks: int = 0  # growth since the previous check
    io_bytes: int = 0

    @property
    def progressing(self) -> bool:
        return self.first or self.cpu_ticks > 0 or self.io_bytes > 0


def job_activity(previous: JobTree | None, current: JobTree) -> JobActivity:
    """Growth, process by process. A process that ended is gone from `current` (its time is in its
    parent's cutime/cstime, its I/O in its parent's io, once reaped); one that appeared counts in full.
    Each process's own counters only grow, so clamping at zero just absorbs a re-parented straggler:
    progress is never negative, and any growth anywhere in the tree is progress."""
    if previous is None or previous.pid != current.pid:
        return JobActivity(pid=current.pid, first=True)
    cpu = io = 0
    for key, now in current.procs.items():
        before = previous.procs.get(key)
        cpu += max(0, now.cpu_ticks - (before.cpu_ticks if before else 0))
        if before is None:
            io += now.io_bytes or 0
        elif now.io_bytes is not None and before.io_bytes is not None:  # unreadable io: CPU alone
            io += max(0, now.io_bytes - before.io_bytes)
    return JobActivity(pid=current.pid, first=False, cpu_ticks=cpu, io_bytes=io)


@dataclass(frozen=True)
class Observation:
    gpus: tuple[GpuSample, ...] = ()
    gpu_error: str | None = None  # the whole GPU reading failed
    python: tuple[PythonProc, ...] = ()
    ssh: tuple[SshSession, ...] = ()
    probe_error: str | None = None  # the process or ssh scan failed
    job: JobActivity | None = None  # None: no job under the wrapper (or the scan failed: job_error)
    job_error: str | None = None  # the job's tree could not be read


@dataclass(frozen=True)
class Verdict:
    idle: bool
    reason: str | None  # why busy; None when idle
    active_ssh: int


def active_sessions(sessions: tuple[SshSession, ...], now: float, window_s: float) -> list[SshSession]:
    return [s for s in sessions if now - s.last_input < window_s]


def judge(obs: Observation, now: float, th: Thresholds) -> Verdict:
    active = active_sessions(obs.ssh, now, th.ssh_window_s)
    reason = _busy_reason(obs, active, th)
    return Verdict(idle=reason is None, reason=reason, active_ssh=len(active))


def _busy_reason(obs: Observation, active: list[SshSession], th: Thresholds) -> str | None:
    if obs.gpu_error is not None:
        return f"GPU reading failed ({obs.gpu_error}): counted as busy"
    for gpu in obs.gpus:
        if gpu.error is not None:
            return f"GPU {gpu.index} error ({gpu.error}): counted as busy"
        if gpu.utilization_pct is None:
            return f"GPU {gpu.index} utilisation unknown: counted as busy"
        if gpu.utilization_pct >= th.gpu_pct:
            return f"GPU {gpu.index} at {gpu.utilization_pct:.0f}%"
    if obs.python:
        first = obs.python[0]
        plural = "es" if len(obs.python) > 1 else ""
        return f"{len(obs.python)} python process{plural} (pid {first.pid} {first.comm})"
    if active:
        return f"ssh {active[0].tty} active"
    if obs.job is not None and obs.job.progressing:
        return _job_reason(obs.job)
    if obs.job_error is not None:
        return f"job scan failed ({obs.job_error}): counted as busy"
    if obs.probe_error is not None:
        return f"process scan failed ({obs.probe_error}): counted as busy"
    return None


def _job_reason(job: JobActivity) -> str:
    if job.first:
        return f"job pid {job.pid} just seen: counted as busy until the next check"
    return f"job pid {job.pid} making progress (cpu +{job.cpu_ticks / CLK_TCK:.2f}s, io +{job.io_bytes} B)"


def suspension(keep_file: bool, lease_until: float | None, now: float) -> str | None:
    """Why the idle destroy is suspended (/workspace/.keep or a lease from `gpuc keep`), or None."""
    if keep_file:
        return "kept by /workspace/.keep"
    if lease_until is not None and lease_until > now:
        return "kept by a lease"
    return None


@dataclass(frozen=True)
class IdleState:
    idle_s: float = 0.0
    last_idle_check: float | None = None  # None: the last check was busy (or there was none)
    warned: bool = False

    @property
    def idle_minutes(self) -> float:
        return self.idle_s / 60.0


def advance(
    state: IdleState, verdict: Verdict, now: float, th: Thresholds, suspended: bool
) -> tuple[IdleState, Action]:
    """One check. Idle time is the sum of the gaps between consecutive idle checks.

    Each gap counts at most two check intervals: after a frozen container or a clock jump we
    cannot know the pod was idle all along, and a destroy must never come without its warning.
    A suspension (keep file, lease) holds the count at zero, so the full warning window applies
    again once it lifts.
    """
    if not verdict.idle or suspended:
        return IdleState(), "none"
    if state.last_idle_check is None:
        idle_s = 0.0
    else:
        idle_s = state.idle_s + min(max(0.0, now - state.last_idle_check), 2 * th.check_interval_s)
    if idle_s >= th.warn_s and not state.warned:
        return IdleState(idle_s, now, warned=True), "warn"
    if idle_s >= th.destroy_s:
        return IdleState(idle_s, now, warned=True), "destroy"
    return IdleState(idle_s, now, state.warned), "none"
