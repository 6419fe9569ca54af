"""Reading /proc (under a root directory that is a parameter, so tests build a fake tree): a process's stat,
its I/O counters, its start time. A process that vanished mid-read is None, never an error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (outside a container's pid namespace)


# /proc/<pid>/stat counts CPU time in clock ticks (USER_HZ, 100 on every Linux we run on).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_IO_FIELDS = (b"rchar", b"wchar", b"read_bytes", b"write_bytes")


@dataclass(frozen=True)
class ProcCounters:
    """What one process has done so far. Both only ever grow for a given process."""

    cpu_ticks: int  # utime + stime + cutime + cstime: a reaped child's time moves into its parent's
    io_bytes: int | None  # rchar + wchar + read_bytes + write_bytes; None: /proc/<pid>/io unreadable


@dataclass(frozen=True)
class ProcEntry:
    pid: int
    ppid: int
    comm: str


def read_proc_file(path: str | Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:  # not Path.read_bytes: path objects cost more than the read, per check
            return fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    except OSError:
        return None


def read_or_denied(path: str) -> bytes | PermissionError | None:
    """None: the process is gone (it ended mid-scan); a PermissionError: it is there but not ours to read."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except PermissionError as exc:
        return exc
    except OSError:
        return None


def proc_entries(proc_root: Path) -> Iterator[ProcEntry]:
    try:
        names = os.listdir(proc_root)
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        stat = read_proc_file(proc_root / name / "stat")
        if stat is None:
            continue
        parsed = parse_stat(int(name), stat.decode(errors="replace"))
        if parsed is not None:
            yield parsed


def parse_stat(pid: int, text: str) -> ProcEntry | None:
    # comm may hold spaces and parentheses: it runs from the first "(" to the LAST ")".
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    rest = text[end + 2 :].split()
    if len(rest) < 2 or rest[0] == "Z":
        return None  # a zombie is not running anything
    try:
        return ProcEntry(pid=pid, ppid=int(rest[1]), comm=text[start + 1 : end])
    except ValueError:
        return None


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    start: int  # clock ticks after boot
    cpu_ticks: int
    state: str = "S"
    flags: int = 0
    comm: str = ""


def parse_full_stat(pid: int, text: str) -> ProcStat | None:
    start, end = text.find("("), text.rfind(")")
    rest = text[end + 2 :].split() if end >= 0 else []
    # Zombies stay in: their CPU time is still theirs until the parent reaps them into its cutime.
    if len(rest) < 20:
        return None
    try:
        cpu = sum(int(v) for v in rest[11:15])  # utime stime cutime cstime (fields 14-17)
        return ProcStat(
            pid=pid,
            ppid=int(rest[1]),
            start=int(rest[19]),
            cpu_ticks=cpu,
            state=rest[0],
            flags=int(rest[6]),
            comm=text[start + 1 : end],
        )
    except ValueError:
        return None


def parse_io(raw: bytes) -> int | None:
    total, found = 0, 0
    for line in raw.splitlines():
        name, _, value = line.partition(b":")
        if name.strip() in _IO_FIELDS:
            try:
                total += int(value)
            except ValueError:
                return None
            found += 1
    return total if found else None


def proc_counters(proc_root: str | Path, stat: ProcStat) -> ProcCounters:
    # /proc/<pid>/io needs ptrace rights (another user's process, without root): None, never a guess.
    raw_io = read_proc_file(f"{proc_root}/{stat.pid}/io")
    return ProcCounters(stat.cpu_ticks, parse_io(raw_io) if raw_io else None)
