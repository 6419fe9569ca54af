"""What the idle watch needs from the process table: python processes and ssh sessions.

Read straight from /proc (a root directory is a parameter, so tests build a fake tree). A process
that vanishes mid-scan is skipped, never an error: pods start and end processes all the time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuc.instance_side.gpu import read_sim_file

_PYTHON = re.compile(r"^(python|pypy)[0-9.]*[dmu]?$")
# Our own agent and wrapper are python too; counting them would keep every pod busy forever.
OWN_MARKER = "gpuc.instance_side"
_SSHD = ("sshd", "sshd-session")  # OpenSSH >= 9.8 runs sessions as sshd-session
_SSHD_TTYS = re.compile(r"@((?:pts/\d+,?)+)")


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
