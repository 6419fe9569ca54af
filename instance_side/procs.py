"""What the idle watch needs from the process table: python processes, ssh sessions, and the
progress of the job under the wrapper (its process tree's CPU time and I/O).

Read straight from /proc (a root directory is a parameter, so tests build a fake tree). A process
that vanishes mid-scan is skipped, never an error: pods start and end processes all the time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuc.instance_side.gpu import read_sim_file

_PYTHON = re.compile(r"^(python|pypy)[0-9.]*[dmu]?$")
# Our own agent and wrapper are python too; counting them would keep every pod busy forever.
OWN_MARKER = "gpuc.instance_side"
_SSHD = ("sshd", "sshd-session")  # OpenSSH >= 9.8 runs sessions as sshd-session
_SSHD_TTYS = re.compile(r"@((?:pts/\d+,?)+)")
# /proc/<pid>/stat counts CPU time in clock ticks (USER_HZ, 100 on every Linux we run on).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_IO_FIELDS = (b"rchar", b"wchar", b"read_bytes", b"write_bytes")


@dataclass(frozen=True)
class PythonProc:
    pid: int
    comm: str  # the kernel's 15-character name: never the argv, which may carry a token


@dataclass(frozen=True)
class SshSession:
    tty: str  # "pts/0"
    last_input: float  # epoch seconds: the terminal's atime, what `w` shows as IDLE


class ProcessProbe(Protocol):
    def python_procs(self) -> list[PythonProc]: ...


class SshProbe(Protocol):
    def sessions(self) -> list[SshSession]: ...


@dataclass(frozen=True)
class ProcCounters:
    """What one process of the job's tree has done so far. Both only ever grow for a given process."""

    cpu_ticks: int  # utime + stime + cutime + cstime: a reaped child's time moves into its parent's
    io_bytes: int | None  # rchar + wchar + read_bytes + write_bytes; None: /proc/<pid>/io unreadable


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


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    comm: str


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    except OSError:
        return None


def _procs(proc_root: Path) -> Iterator[_Proc]:
    try:
        names = os.listdir(proc_root)
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        stat = _read(proc_root / name / "stat")
        if stat is None:
            continue
        parsed = _parse_stat(int(name), stat.decode(errors="replace"))
        if parsed is not None:
            yield parsed


def _parse_stat(pid: int, text: str) -> _Proc | None:
    # comm may hold spaces and parentheses: it runs from the first "(" to the LAST ")".
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    rest = text[end + 2 :].split()
    if len(rest) < 2 or rest[0] == "Z":
        return None  # a zombie is not running anything
    try:
        return _Proc(pid=pid, ppid=int(rest[1]), comm=text[start + 1 : end])
    except ValueError:
        return None


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    start: int  # clock ticks after boot
    cpu_ticks: int


def _parse_full_stat(pid: int, text: str) -> _Stat | None:
    end = text.rfind(")")
    rest = text[end + 2 :].split() if end >= 0 else []
    # Zombies stay in: their CPU time is still theirs until the parent reaps them into its cutime.
    if len(rest) < 20:
        return None
    try:
        cpu = sum(int(v) for v in rest[11:15])  # utime stime cutime cstime (fields 14-17)
        return _Stat(pid=pid, ppid=int(rest[1]), start=int(rest[19]), cpu_ticks=cpu)
    except ValueError:
        return None


def _parse_io(raw: bytes) -> int | None:
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
    raw = _read(proc_root / str(pid) / "stat")
    stat = _parse_full_stat(pid, raw.decode(errors="replace")) if raw else None
    return f"{pid} {stat.start}\n" if stat else f"{pid}\n"


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
        stats: dict[int, _Stat] = {}
        children: dict[int, list[int]] = {}
        for name in names:
            if not name.isdigit():
                continue
            raw = _read(self.proc_root / name / "stat")
            stat = _parse_full_stat(int(name), raw.decode(errors="replace")) if raw else None
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
            raw_io = _read(self.proc_root / str(current.pid) / "io")
            io = _parse_io(raw_io) if raw_io else None
            tree[(current.pid, current.start)] = ProcCounters(current.cpu_ticks, io)
            todo.extend(c for c in children.get(current.pid, ()) if c in stats)
        return JobTree(pid=pid, procs=tree)


class ProcScanner:
    """Python processes on this machine, or, in a local sandbox, only those of one pod."""

    def __init__(self, proc_root: Path = Path("/proc"), *, only_pod: str | None = None) -> None:
        self.proc_root = proc_root
        self.only_pod = only_pod
        self.own_pid = os.getpid()

    def python_procs(self) -> list[PythonProc]:
        found = []
        for proc in _procs(self.proc_root):
            if proc.pid == self.own_pid:
                continue
            argv = self._argv(proc.pid)
            if not argv or not self._is_python(proc, argv) or any(OWN_MARKER in a for a in argv):
                continue
            if self.only_pod is not None and not self._in_pod(proc.pid):
                continue
            found.append(PythonProc(pid=proc.pid, comm=proc.comm))
        return sorted(found, key=lambda p: p.pid)

    def _argv(self, pid: int) -> list[str]:
        raw = _read(self.proc_root / str(pid) / "cmdline")
        if not raw:
            return []  # kernel threads and zombies have no command line
        return raw.decode(errors="replace").rstrip("\0").split("\0")

    def _is_python(self, proc: _Proc, argv: list[str]) -> bool:
        # A shebang script (torchrun, accelerate) runs with argv[0] = the interpreter; a venv python
        # may be named anything, but its exe link resolves to the real interpreter.
        if _PYTHON.match(os.path.basename(argv[0])) or _PYTHON.match(proc.comm):
            return True
        try:
            exe = os.readlink(self.proc_root / str(proc.pid) / "exe")
        except OSError:
            return False
        return bool(_PYTHON.match(os.path.basename(exe)))

    def _in_pod(self, pid: int) -> bool:
        raw = _read(self.proc_root / str(pid) / "environ")
        if raw is None:
            return False
        return f"GPUC_POD_ID={self.only_pod}".encode() in raw.split(b"\0")


class SshScanner:
    """Interactive ssh sessions: the pseudo-terminals that sshd's session processes hold.

    sshd keeps only the pty master; the slave (`pts/N`) is visible in the session's title
    ("sshd: root@pts/0") and as the stdin of the shell it forked. Sessions without a terminal
    (`ssh pod cmd`, scp) have no input to watch; the processes they run are counted on their own.
    """

    def __init__(self, proc_root: Path = Path("/proc"), dev_root: Path = Path("/dev")) -> None:
        self.proc_root = proc_root
        self.dev_root = dev_root

    def sessions(self) -> list[SshSession]:
        procs = list(_procs(self.proc_root))
        sshd = {p.pid for p in procs if p.comm in _SSHD}
        ttys: set[str] = set()
        for proc in procs:
            if proc.pid in sshd:
                ttys.update(self._titled_ttys(proc.pid))
            elif proc.ppid in sshd:
                tty = self._stdin_tty(proc.pid)
                if tty:
                    ttys.add(tty)
        return [s for s in (self._session(t) for t in sorted(ttys)) if s is not None]

    def _titled_ttys(self, pid: int) -> list[str]:
        raw = _read(self.proc_root / str(pid) / "cmdline")
        match = _SSHD_TTYS.search(raw.decode(errors="replace")) if raw else None
        return [t for t in match.group(1).split(",") if t] if match else []

    def _stdin_tty(self, pid: int) -> str | None:
        try:
            target = os.readlink(self.proc_root / str(pid) / "fd" / "0")
        except OSError:
            return None
        return target.removeprefix("/dev/") if target.startswith("/dev/pts/") else None

    def _session(self, tty: str) -> SshSession | None:
        try:
            return SshSession(tty=tty, last_input=os.stat(self.dev_root / tty).st_atime)
        except OSError:
            return None  # the session closed between the scan and the stat


class SimSshProbe:
    """The local sandbox has no sshd: sessions come from the sim file the tests and demo write."""

    def __init__(self, sim_path: Path) -> None:
        self.sim_path = sim_path

    def sessions(self) -> list[SshSession]:
        data = read_sim_file(self.sim_path) or {}
        raw = data.get("ssh_sessions") or []
        if not isinstance(raw, list):
            raise ValueError("ssh_sessions in the sim file is not a list")
        return [
            SshSession(tty=str(s.get("tty", f"pts/{i}")), last_input=float(s["last_input"]))
            for i, s in enumerate(raw)
            if isinstance(s, dict)
        ]
