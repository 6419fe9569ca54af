"""The ssh sessions open on the pod (a user typing in one keeps the pod): the sshd processes and their
terminals, under OpenSSH's names before and after 9.8.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuc.instance_side.gpu import read_sim_file
from gpuc.instance_side.procfs import proc_entries, read_proc_file

SSHD_NAMES = ("sshd", "sshd-session")  # OpenSSH >= 9.8 runs sessions as sshd-session


_SSHD_TTYS = re.compile(r"@((?:pts/\d+,?)+)")


@dataclass(frozen=True)
class SshSession:
    tty: str  # "pts/0"
    last_input: float  # epoch seconds: the terminal's atime, what `w` shows as IDLE


class SshProbe(Protocol):
    def sessions(self) -> list[SshSession]: ...


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
        procs = list(proc_entries(self.proc_root))
        sshd = {p.pid for p in procs if p.comm in SSHD_NAMES}
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
        raw = read_proc_file(self.proc_root / str(pid) / "cmdline")
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
