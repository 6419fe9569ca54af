"""The job under the wrapper: the pid file the wrapper writes (its pid and start time, so a reused pid is
never taken for the job), whether it still runs, and its process tree with their counters (CPU time and I/O:
progress is their growth). What cannot be read is uncertain, and the idle rule counts uncertain as busy.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuc.instance_side.procfs import ProcCounters, ProcStat, parse_full_stat, proc_counters, read_proc_file


@dataclass(frozen=True)
class JobTree:
    """One reading of the job's process tree: the job pid and every descendant, from ppid links.
    Keyed by (pid, start time) so a reused pid is a new process, never a counter that went back."""

    pid: int
    procs: Mapping[tuple[int, int], ProcCounters]


class JobScanError(Exception):
    """The job's tree could not be read: the idle watch counts the pod as busy."""


class JobProbe(Protocol):
    def sample(self) -> JobTree | None:
        """The job's tree now; None when no job runs under the wrapper. Raises JobScanError."""
        ...


def read_job_stamp(job_file: Path) -> tuple[int, int | None] | None:
    """The wrapper's job pid file: "PID START" (START: the job's start time in ticks, which tells our
    job from a process that got its pid after a crash left the file behind), or "PID". None: no job."""
    try:
        text = job_file.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobScanError(f"cannot read {job_file.name}: {type(exc).__name__}") from None
    parts = text.split()
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        raise JobScanError(f"{job_file.name} holds {text[:40]!r}, not a pid")
    return int(parts[0]), int(parts[1]) if len(parts) == 2 else None


def job_stamp(pid: int, proc_root: Path = Path("/proc")) -> str:
    """What the wrapper writes into the job pid file, right after the start (the job cannot be reaped
    before the wrapper waits for it, so its pid is still its own)."""
    raw = read_proc_file(proc_root / str(pid) / "stat")
    stat = parse_full_stat(pid, raw.decode(errors="replace")) if raw else None
    return f"{pid} {stat.start}\n" if stat else f"{pid}\n"


def job_alive(pid: int, start: int | None, proc_root: Path = Path("/proc")) -> bool:
    """Whether the job a stamp names (read_job_stamp) still runs. A pid that now belongs to another process
    (its start time differs) is not the job; what cannot be read counts as running: a second job started
    beside a live one is what destroys a pod under the first."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # there, and another user's
    except OverflowError:
        return False  # no process has such a pid
    if start is None:
        return True
    raw = read_proc_file(proc_root / str(pid) / "stat")
    stat = parse_full_stat(pid, raw.decode(errors="replace")) if raw else None
    return stat is None or stat.start == start


class JobTreeProbe:
    """The job under the wrapper (the pid in `job_file`) and all its descendants, with their counters."""

    def __init__(self, job_file: Path, proc_root: Path = Path("/proc")) -> None:
        self.job_file = job_file
        self.proc_root = proc_root

    def sample(self) -> JobTree | None:
        stamp = read_job_stamp(self.job_file)
        if stamp is None:
            return None
        pid, start = stamp
        try:
            names = os.listdir(self.proc_root)
        except OSError as exc:
            raise JobScanError(f"cannot list {self.proc_root}: {exc.strerror or exc}") from None
        stats: dict[int, ProcStat] = {}
        children: dict[int, list[int]] = {}
        for name in names:
            if not name.isdigit():
                continue
            raw = read_proc_file(self.proc_root / name / "stat")
            stat = parse_full_stat(int(name), raw.decode(errors="replace")) if raw else None
            if stat is not None:
                stats[stat.pid] = stat
                children.setdefault(stat.ppid, []).append(stat.pid)
        job = stats.get(pid)
        if job is None:
            if (self.proc_root / str(pid)).exists():
                # There but unreadable (hidepid, a permission change): uncertain, so never "no job".
                raise JobScanError(f"job pid {pid} is listed but its stat cannot be read")
            return None  # the job ended: the wrapper ends the pod
        if start is not None and job.start != start:
            return None  # the pid was reused after a crash left the file: not our job
        tree: dict[tuple[int, int], ProcCounters] = {}
        todo, seen = [pid], set()
        while todo:
            current = stats[todo.pop()]
            if current.pid in seen:
                continue
            seen.add(current.pid)
            tree[(current.pid, current.start)] = proc_counters(self.proc_root, current)
            todo.extend(c for c in children.get(current.pid, ()) if c in stats)
        return JobTree(pid=pid, procs=tree)
