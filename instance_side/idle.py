"""The idle decision (layer 2 of docs/money.md), pure: observations and a time in, a reading and an action out.

Idle iff every GPU is under the threshold AND no ssh session is active (its terminal saw input within
the window, F4) AND no process makes progress: neither the job under the wrapper nor any other user
process (python or not: `nohup ./train &` over ssh) had its process tree's CPU time or I/O grow by more
than the floor since the previous check. A download, a compiled step or a shell pipeline is work; a job
stuck at zero for the whole window (a deadlock, `input()`, a dead data loader) is hung, hence idle. A
tree not there at the previous check is "just seen": busy until the next one, so a download that just
started is never judged on its first second. Anything we could not read counts as busy: a wrong "idle"
destroys someone's running job, a wrong "busy" costs at most what the reaper bounds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from gpuc.core.warm import warm_lead
from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.jobtree import JobTree
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.procfs import CLK_TCK, ProcCounters
from gpuc.instance_side.procs import ProcTable
from gpuc.instance_side.sshscan import SshSession

Action = Literal["none", "warn", "destroy"]
Key = tuple[int, int]  # (pid, start time)


@dataclass(frozen=True)
class Thresholds:
    gpu_pct: float
    warn_s: float
    destroy_s: float
    ssh_window_s: float
    check_interval_s: float
    # Growth per check at or under these is a heartbeat, not progress (AgentConfig says why these values).
    cpu_floor_s: float = 0.0
    io_floor_bytes: float = 0.0

    @classmethod
    def from_config(cls, cfg: AgentConfig, *, job: bool = False) -> Thresholds:
        """The idle watch's times. A warm pod (`up --warm`) has two: with no job, its warm time (warm_limits);
        while a job runs, the usual idle times, or the warm time if longer, so a job is never judged more
        strictly than the pod waiting between jobs (a hung job is still ended, never a running one early)."""
        destroy_s, warn_s = cfg.idle_destroy_s, cfg.idle_warn_s
        if cfg.warm_s > 0:  # `up --warm`
            destroy_s, warn_s = warm_limits(cfg) if not job else _job_limits(cfg)
        return cls(
            gpu_pct=cfg.idle_gpu_pct,
            warn_s=warn_s,
            destroy_s=destroy_s,
            ssh_window_s=cfg.ssh_input_window_s,
            check_interval_s=cfg.idle_check_interval_s,
            cpu_floor_s=cfg.idle_cpu_floor_s,
            io_floor_bytes=cfg.idle_io_floor_bytes,
        )


def warm_limits(cfg: AgentConfig) -> tuple[float, float]:
    """(destroy, warn) for a warm pod with no job: it ends after its warm time, warned core.warm's lead
    ahead (never at the job's end: "idle 0 min: destroying in 1 min" says nothing the user did not ask for)."""
    return cfg.warm_s, cfg.warm_s - warm_lead(cfg.warm_s, cfg.idle_destroy_s, cfg.idle_warn_s)


def _job_limits(cfg: AgentConfig) -> tuple[float, float]:
    destroy = max(cfg.idle_destroy_s, cfg.warm_s)
    return destroy, destroy - (cfg.idle_destroy_s - cfg.idle_warn_s)


@dataclass(frozen=True)
class TreeActivity:
    """What one process tree did between two checks: the job's, or a user process's and its children's."""

    pid: int  # the tree's root
    first: bool  # not there at the previous check: nothing to compare with yet
    cpu_ticks: int = 0  # growth since the previous check
    io_bytes: int = 0
    unreadable: bool = False  # a member's I/O counters could not be read (now or then): uncertain
    comm: str = ""
    procs: int = 1

    def progressing(self, th: Thresholds) -> bool:
        if self.first or self.unreadable:
            return True
        return self.cpu_ticks > th.cpu_floor_s * CLK_TCK or self.io_bytes > th.io_floor_bytes


def _growth(previous: Mapping[Key, ProcCounters], members: Iterable[tuple[Key, ProcCounters]]) -> tuple[int, int, bool]:
    """Growth, process by process. A process that ended is gone (its time is in its parent's cutime/cstime,
    its I/O in its parent's io, once reaped); one born since the previous check did all it did in this
    interval, so it counts in full. Each process's own counters only grow, so clamping at zero just absorbs
    a re-parented straggler: progress is never negative, and growth anywhere in the tree adds up."""
    cpu = io = 0
    unreadable = False
    for key, now in members:
        before = previous.get(key) or ProcCounters(0, 0)  # born since the previous check: in full
        cpu += max(0, now.cpu_ticks - before.cpu_ticks)
        if now.io_bytes is None or before.io_bytes is None:
            # Unreadable I/O, or no baseline for it: a download costs little CPU, so CPU alone is no proof
            # of a hang.
            unreadable = True
        else:
            io += max(0, now.io_bytes - before.io_bytes)
    return cpu, io, unreadable


def job_activity(previous: JobTree | None, current: JobTree) -> TreeActivity:
    root = next((k for k in current.procs if k[0] == current.pid), (current.pid, -1))
    if previous is None or previous.pid != current.pid or root not in previous.procs:
        return TreeActivity(pid=current.pid, first=True, procs=len(current.procs))
    cpu, io, unreadable = _growth(previous.procs, current.procs.items())
    return TreeActivity(current.pid, False, cpu, io, unreadable, procs=len(current.procs))


def procs_activity(previous: ProcTable | None, current: ProcTable) -> tuple[TreeActivity, ...]:
    """The user's processes as trees (a process whose parent is not one of them is a root: its parent is
    init, sshd, tmux, jupyter...), each with its growth since the previous table."""
    procs = current.procs
    by_pid = {key[0]: key for key in procs}
    children: dict[int, list[Key]] = {}
    for key, proc in procs.items():
        if proc.ppid in by_pid and proc.ppid != key[0]:
            children.setdefault(proc.ppid, []).append(key)
    roots = [key for key, proc in procs.items() if proc.ppid not in by_pid or proc.ppid == key[0]]
    before = previous.counters if previous is not None else {}
    trees: list[TreeActivity] = []
    placed: set[Key] = set()
    for root in [*roots, *procs]:  # then anything a ppid cycle left out (none on Linux) as its own root
        if root in placed:
            continue
        members = _members(root, children, placed)
        comm = procs[root].comm
        if previous is None or root not in previous.procs:
            trees.append(TreeActivity(root[0], True, comm=comm, procs=len(members)))
            continue
        cpu, io, unreadable = _growth(before, ((k, procs[k].counters) for k in members))
        trees.append(TreeActivity(root[0], False, cpu, io, unreadable, comm, len(members)))
    trees += [TreeActivity(pid, False, unreadable=True, comm="?") for pid in current.unreadable]
    return tuple(trees)


def _members(root: Key, children: Mapping[int, list[Key]], placed: set[Key]) -> list[Key]:
    members, todo = [], [root]
    while todo:
        key = todo.pop()
        if key in placed:
            continue
        placed.add(key)
        members.append(key)
        todo.extend(children.get(key[0], ()))
    return members


@dataclass(frozen=True)
class Observation:
    gpus: tuple[GpuSample, ...] = ()
    gpu_error: str | None = None  # the whole GPU reading failed
    procs: tuple[TreeActivity, ...] = ()  # the user's process trees outside the job
    python_procs: int = 0  # python processes among them (the heartbeat's count)
    ssh: tuple[SshSession, ...] = ()
    probe_error: str | None = None  # the process or ssh scan failed
    job: TreeActivity | None = None  # None: no job under the wrapper (or the scan failed: job_error)
    job_error: str | None = None  # the job's tree could not be read


@dataclass(frozen=True)
class IdleReading:
    """One check's judgement of the pod: idle or busy, and why (the count toward the destroy is IdleState's)."""

    idle: bool
    reason: str | None  # why busy; None when idle
    active_ssh: int


def active_sessions(sessions: tuple[SshSession, ...], now: float, window_s: float) -> list[SshSession]:
    return [s for s in sessions if now - s.last_input < window_s]


def judge(obs: Observation, now: float, th: Thresholds) -> IdleReading:
    active = active_sessions(obs.ssh, now, th.ssh_window_s)
    reason = _busy_reason(obs, active, th)
    return IdleReading(idle=reason is None, reason=reason, active_ssh=len(active))


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
    if obs.job is not None and obs.job.progressing(th):
        return _tree_reason(f"job pid {obs.job.pid}", obs.job)
    busy = [tree for tree in obs.procs if tree.progressing(th)]
    if busy:
        more = f" (+{len(busy) - 1} more)" if len(busy) > 1 else ""
        return _tree_reason(f"pid {busy[0].pid} {busy[0].comm}", busy[0]) + more
    if active:
        return f"ssh {active[0].tty} active"
    if obs.job_error is not None:
        return f"job scan failed ({obs.job_error}): counted as busy"
    if obs.probe_error is not None:
        return f"process scan failed ({obs.probe_error}): counted as busy"
    return None


def _tree_reason(who: str, tree: TreeActivity) -> str:
    if tree.first:
        return f"{who} just seen: counted as busy until the next check"
    if tree.unreadable:
        return f"{who}: its I/O counters cannot be read: counted as busy"
    return f"{who} making progress (cpu +{tree.cpu_ticks / CLK_TCK:.2f}s, io +{tree.io_bytes} B)"


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
    state: IdleState, reading: IdleReading, now: float, th: Thresholds, suspended: bool
) -> tuple[IdleState, Action]:
    """One check. Idle time is the sum of the gaps between consecutive idle checks.

    Each gap counts at most two check intervals: after a frozen container or a clock jump we
    cannot know the pod was idle all along, and a destroy must never come without its warning.
    A suspension (keep file, lease) holds the count at zero, so the full warning window applies
    again once it lifts.
    """
    if not reading.idle or suspended:
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
