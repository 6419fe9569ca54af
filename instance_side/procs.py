"""What the idle watch needs from the process table: the user's processes with their counters, ssh
sessions, and the job under the wrapper's process tree (CPU time and I/O: progress is their growth).

Read straight from /proc (a root directory is a parameter, so tests build a fake tree). A process
that vanishes mid-scan is skipped, never an error: pods start and end processes all the time. One we
may not read is uncertain, and the idle rule counts uncertain as busy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuc.core.podpaths import POD_ROOT_ENV
from gpuc.instance_side.gpu import read_sim_file

_PYTHON = re.compile(r"^(python|pypy)[0-9.]*[dmu]?$")
# Our own agent and wrapper are python too; counting them would keep every pod busy forever.
OWN_MARKER = "gpuc.instance_side"
_SSHD = ("sshd", "sshd-session")  # OpenSSH >= 9.8 runs sessions as sshd-session
# What a pod image runs beside the user's work, by program name (the kernel's comm, argv[0], or the
# script or module a python runs): init and supervisors, remote access, the web front ends RunPod and
# Vast images start, system daemons, keep-alives and the tools one watches a job with. None of them is
# the user's work: jupyter streaming a notebook's output or htop redrawing is not a job making progress,
# and counting them would keep every pod busy for ever. What they start for the user (a jupyter kernel,
# a shell in tmux, a cron job) is counted on its own. Measured on idle copies: 0 CPU, 0 bytes a minute.
INFRA = frozenset(
    {
        *("init", "tini", "dumb-init", "docker-init", "catatonit", "s6-svscan", "s6-supervise"),
        *("runsvdir", "runsv", "supervisord", "systemd"),
        *(*_SSHD, "sshd-auth", "dropbear", "tmux", "tmux: server", "screen", "SCREEN"),
        *("nginx", "caddy", "jupyter", "jupyter-lab", "jupyter-notebook", "jupyter-server", "jupyterlab"),
        *("jupyterhub", "notebook", "tensorboard", "syncthing", "cloudflared", "filebrowser"),
        *("cron", "crond", "rsyslogd", "dbus-daemon", "agetty", "nvidia-persistenced"),
        *("sleep", "tail", "top", "htop", "btop", "nvtop", "watch", "nvidia-smi", "gpustat", "less"),
    }
)
# What `watch` runs (`watch nvidia-smi`, left in a tmux window) is watching too: each run a new process,
# "just seen" at any check that catches one, which would keep the pod busy for as long as it is left.
WATCHERS = frozenset({"watch"})
PF_KTHREAD = 0x00200000  # /proc/<pid>/stat flags: a kernel thread (outside a container's pid namespace)
_SSHD_TTYS = re.compile(r"@((?:pts/\d+,?)+)")
# /proc/<pid>/stat counts CPU time in clock ticks (USER_HZ, 100 on every Linux we run on).
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_IO_FIELDS = (b"rchar", b"wchar", b"read_bytes", b"write_bytes")


@dataclass(frozen=True)
class SshSession:
    tty: str  # "pts/0"
    last_input: float  # epoch seconds: the terminal's atime, what `w` shows as IDLE


class SshProbe(Protocol):
    def sessions(self) -> list[SshSession]: ...


@dataclass(frozen=True)
class ProcCounters:
    """What one process has done so far. Both only ever grow for a given process."""

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
class UserProc:
    """One of the user's processes, outside the job under the wrapper."""

    pid: int
    ppid: int
    comm: str  # the kernel's 15-character name: never the argv, which may carry a token
    python: bool
    counters: ProcCounters


@dataclass(frozen=True)
class ProcTable:
    """One reading of the user's processes, keyed by (pid, start time) as the job's tree is."""

    procs: Mapping[tuple[int, int], UserProc]
    unreadable: tuple[int, ...] = ()  # listed, but their stat may not be read: uncertain, hence busy

    @property
    def counters(self) -> dict[tuple[int, int], ProcCounters]:
        return {key: proc.counters for key, proc in self.procs.items()}


class ProcScanError(Exception):
    """The process table could not be read: the idle watch counts the pod as busy."""


class ProcessProbe(Protocol):
    def sample(self, skip: Collection[int] = ()) -> ProcTable:
        """The user's processes now, leaving out the pids in `skip` (the job's tree, judged on its own).
        Raises ProcScanError."""
        ...


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    comm: str


def _read(path: str | Path) -> bytes | None:
    try:
        with open(path, "rb") as fh:  # not Path.read_bytes: path objects cost more than the read, per check
            return fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError, NotADirectoryError):
        return None
    except OSError:
        return None


def _read_or_denied(path: str) -> bytes | PermissionError | None:
    """None: the process is gone (it ended mid-scan); a PermissionError: it is there but not ours to read."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except PermissionError as exc:
        return exc
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
    state: str = "S"
    flags: int = 0
    comm: str = ""


def _parse_full_stat(pid: int, text: str) -> _Stat | None:
    start, end = text.find("("), text.rfind(")")
    rest = text[end + 2 :].split() if end >= 0 else []
    # Zombies stay in: their CPU time is still theirs until the parent reaps them into its cutime.
    if len(rest) < 20:
        return None
    try:
        cpu = sum(int(v) for v in rest[11:15])  # utime stime cutime cstime (fields 14-17)
        return _Stat(
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
    raw = _read(proc_root / str(pid) / "stat")
    stat = _parse_full_stat(pid, raw.decode(errors="replace")) if raw else None
    return stat is None or stat.start == start


def _counters(proc_root: str | Path, stat: _Stat) -> ProcCounters:
    # /proc/<pid>/io needs ptrace rights (another user's process, without root): None, never a guess.
    raw_io = _read(f"{proc_root}/{stat.pid}/io")
    return ProcCounters(stat.cpu_ticks, _parse_io(raw_io) if raw_io else None)


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
            tree[(current.pid, current.start)] = _counters(self.proc_root, current)
            todo.extend(c for c in children.get(current.pid, ()) if c in stats)
        return JobTree(pid=pid, procs=tree)


class ProcScanner:
    """The user's processes on this machine (or, in a local sandbox, only those of one pod), with their
    counters: every process but the kernel's threads, pid 1, gpuc's own agent and wrapper, zombies, the
    pod image's infrastructure (INFRA) and whatever `watch` runs (WATCHERS)."""

    def __init__(
        self, proc_root: Path = Path("/proc"), *, only_pod: str | None = None, only_root: Path | None = None
    ) -> None:
        self.proc_root = proc_root
        # A sandbox's own processes carry a mark in their environment: the local provider's its pod id,
        # a rehearsal's emulated pod the root its ssh prelude exports (GPUC_POD_ROOT).
        self.only_pod = only_pod
        self._marks = tuple(
            mark.encode()
            for mark in (
                f"GPUC_POD_ID={only_pod}" if only_pod is not None else None,
                f"{POD_ROOT_ENV}={only_root}" if only_root is not None else None,
            )
            if mark is not None
        )
        self.own_pid = os.getpid()

    def sample(self, skip: Collection[int] = ()) -> ProcTable:
        try:
            listing = os.listdir(self.proc_root)
        except OSError as exc:
            raise ProcScanError(f"cannot list {self.proc_root}: {exc.strerror or exc}") from None
        found: dict[tuple[int, int], UserProc] = {}
        unreadable: list[int] = []
        parents: dict[int, int] = {}
        watchers: set[int] = set()
        for name in listing:
            if not name.isdigit() or int(name) in (1, self.own_pid) or int(name) in skip:
                continue
            raw = _read_or_denied(f"{self.proc_root}/{name}/stat")
            if isinstance(raw, PermissionError):
                # hidepid or a permission change: it may be the user's work. A sandbox counts only what it
                # can prove is its own pod's, and a process it may not read is not.
                if not self._marks:
                    unreadable.append(int(name))
                continue
            stat = _parse_full_stat(int(name), raw.decode(errors="replace")) if raw else None
            if stat is None or stat.state in ("Z", "X") or stat.flags & PF_KTHREAD:
                continue  # gone, a zombie (it runs nothing) or a kernel thread
            parents[stat.pid] = stat.ppid
            argv = self._argv(stat.pid)
            names = program_names(stat.comm, argv)
            if not WATCHERS.isdisjoint(names):
                watchers.add(stat.pid)
            proc = self._user_proc(stat, argv, names)
            if proc is not None:
                found[(stat.pid, stat.start)] = proc
        if watchers:
            found = {k: p for k, p in found.items() if not _descends(p.pid, watchers, parents)}
        return ProcTable(procs=found, unreadable=tuple(sorted(unreadable)))

    def _user_proc(self, stat: _Stat, argv: list[str], names: set[str]) -> UserProc | None:
        if any(OWN_MARKER in a for a in argv) or not INFRA.isdisjoint(names):
            return None
        if self._marks and not self._in_pod(stat.pid):
            return None
        python = self._is_python(stat, argv)
        return UserProc(stat.pid, stat.ppid, stat.comm, python, _counters(self.proc_root, stat))

    def _argv(self, pid: int) -> list[str]:
        raw = _read(f"{self.proc_root}/{pid}/cmdline")
        if not raw:
            return []  # kernel threads and zombies have no command line
        return raw.decode(errors="replace").rstrip("\0").split("\0")

    def _is_python(self, stat: _Stat, argv: list[str]) -> bool:
        # A shebang script (torchrun, accelerate) runs with argv[0] = the interpreter; a venv python
        # may be named anything, but its exe link resolves to the real interpreter.
        if (argv and _PYTHON.match(os.path.basename(argv[0]))) or _PYTHON.match(stat.comm):
            return True
        try:
            exe = os.readlink(f"{self.proc_root}/{stat.pid}/exe")
        except OSError:
            return False
        return bool(_PYTHON.match(os.path.basename(exe)))

    def _in_pod(self, pid: int) -> bool:
        raw = _read(f"{self.proc_root}/{pid}/environ")
        if raw is None:
            return False
        return not set(self._marks).isdisjoint(raw.split(b"\0"))


def _descends(pid: int, ancestors: set[int], parents: Mapping[int, int]) -> bool:
    seen: set[int] = set()
    while pid in parents and pid not in seen:
        seen.add(pid)
        pid = parents[pid]
        if pid in ancestors:
            return True
    return False


def program_names(comm: str, argv: list[str]) -> set[str]:
    """The names a process goes by: its comm, its argv[0] (a daemon's title, "nginx: worker process",
    counts by its first word), and for a python, the script or module it runs (`jupyter-lab`,
    `python -m jupyterlab`)."""
    names = {comm}
    if not argv:
        return names
    first = os.path.basename(argv[0].split(" ", 1)[0].rstrip(":"))
    names.add(first)
    if _PYTHON.match(first) or _PYTHON.match(comm):
        script = _python_target(argv[1:])
        if script:
            names.add(script)
    return names


def _python_target(args: list[str]) -> str | None:
    it = iter(args)
    for arg in it:
        if arg == "-m":
            return next(it, "").split(".")[0] or None
        if arg == "-c":
            return None
        if arg in ("-W", "-X"):
            next(it, None)  # an option with a value
        elif not arg.startswith("-"):
            return os.path.basename(arg)
    return None


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
