"""What the idle watch needs from the process table: the user's processes with their counters (this module),
ssh sessions (sshscan.py), and the job under the wrapper's process tree (jobtree.py; CPU time and I/O: progress
is their growth), all read through procfs.py.

Read straight from /proc (a root directory is a parameter, so tests build a fake tree). A process
that vanishes mid-scan is skipped, never an error: pods start and end processes all the time. One we
may not read is uncertain, and the idle rule counts uncertain as busy.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpuc.core.podpaths import POD_ROOT_ENV
from gpuc.instance_side.procfs import (
    PF_KTHREAD,
    ProcCounters,
    ProcStat,
    parse_full_stat,
    proc_counters,
    read_or_denied,
    read_proc_file,
)
from gpuc.instance_side.sshscan import SSHD_NAMES

_PYTHON = re.compile(r"^(python|pypy)[0-9.]*[dmu]?$")
# Our own agent and wrapper are python too; counting them would keep every pod busy forever.
OWN_MARKER = "gpuc.instance_side"
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
        *(*SSHD_NAMES, "sshd-auth", "dropbear", "tmux", "tmux: server", "screen", "SCREEN"),
        *("nginx", "caddy", "jupyter", "jupyter-lab", "jupyter-notebook", "jupyter-server", "jupyterlab"),
        *("jupyterhub", "notebook", "tensorboard", "syncthing", "cloudflared", "filebrowser"),
        *("cron", "crond", "rsyslogd", "dbus-daemon", "agetty", "nvidia-persistenced"),
        *("sleep", "tail", "top", "htop", "btop", "nvtop", "watch", "nvidia-smi", "gpustat", "less"),
    }
)
# What `watch` runs (`watch nvidia-smi`, left in a tmux window) is watching too: each run a new process,
# "just seen" at any check that catches one, which would keep the pod busy for as long as it is left.
WATCHERS = frozenset({"watch"})


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
            raw = read_or_denied(f"{self.proc_root}/{name}/stat")
            if isinstance(raw, PermissionError):
                # hidepid or a permission change: it may be the user's work. A sandbox counts only what it
                # can prove is its own pod's, and a process it may not read is not.
                if not self._marks:
                    unreadable.append(int(name))
                continue
            stat = parse_full_stat(int(name), raw.decode(errors="replace")) if raw else None
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

    def _user_proc(self, stat: ProcStat, argv: list[str], names: set[str]) -> UserProc | None:
        if any(OWN_MARKER in a for a in argv) or not INFRA.isdisjoint(names):
            return None
        if self._marks and not self._in_pod(stat.pid):
            return None
        python = self._is_python(stat, argv)
        return UserProc(stat.pid, stat.ppid, stat.comm, python, proc_counters(self.proc_root, stat))

    def _argv(self, pid: int) -> list[str]:
        raw = read_proc_file(f"{self.proc_root}/{pid}/cmdline")
        if not raw:
            return []  # kernel threads and zombies have no command line
        return raw.decode(errors="replace").rstrip("\0").split("\0")

    def _is_python(self, stat: ProcStat, argv: list[str]) -> bool:
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
        raw = read_proc_file(f"{self.proc_root}/{pid}/environ")
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
