"""The pod's edges, faked once for both the pod tests (tests/instance_side) and the drill.

Each fake is as strict as what it stands for and can show its hazards: a GPU reading that fails, a
process scan that fails, a sync that fails or does not verify, a self-destroy the pod's key may not
make, a pod clock that is off, a job under the wrapper that works without python or the GPU, or hangs.
The job is not faked at the probe: `FakeProcTree` writes a /proc on disk and the real `JobTreeProbe`
reads it, so the drill and the tests exercise the parsing a pod runs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuc.core.atomicfile import atomic_write
from gpuc.core.clock import Clock, FakeClock
from gpuc.instance_side.gpu import GpuReadError, GpuSample
from gpuc.instance_side.jobtree import JobScanError, JobTree, JobTreeProbe, job_stamp
from gpuc.instance_side.manifest import Manifest, ResultsSync
from gpuc.instance_side.procfs import CLK_TCK, ProcCounters
from gpuc.instance_side.procs import ProcTable, UserProc
from gpuc.instance_side.sshscan import SshSession


# -- probes ------------------------------------------------------------------------------------------
@dataclass
class FakeGpu:
    util: float | None = 0.0
    error: str | None = None  # the whole read fails
    device_error: str | None = None  # one GPU is lost
    note: str | None = None

    def read(self) -> list[GpuSample]:
        if self.error:
            raise GpuReadError(self.error)
        return [GpuSample(index=0, name="RTX 4090", utilization_pct=self.util, error=self.device_error)]


@dataclass
class FakeProcs:
    """The user's processes outside the job: each pid in `pids` works (a python whose CPU time grows by a
    second at every sample, far above the floor), each in `hung` sits at zero; `error` fails the scan.
    (The real ProcScanner reads a FakeProcTree in tests/instance_side/test_pod_procs.py, and the real
    /proc in the drill's hung-job rows.)"""

    pids: list[int] = field(default_factory=list)
    hung: list[int] = field(default_factory=list)
    error: Exception | None = None
    samples: int = 0

    def sample(self, skip: Collection[int] = ()) -> ProcTable:
        if self.error:
            raise self.error
        self.samples += 1
        working = {p: ProcCounters(self.samples * CLK_TCK, 0) for p in self.pids}
        idle = {p: ProcCounters(0, 0) for p in self.hung}
        return ProcTable(
            {
                (pid, 1000): UserProc(pid, 1, "python3", True, counters)
                for pid, counters in {**idle, **working}.items()
                if pid not in skip
            }
        )


@dataclass
class FakeSsh:
    sessions_: list[SshSession] = field(default_factory=list)

    def sessions(self) -> list[SshSession]:
        return list(self.sessions_)


@dataclass
class _Proc:
    pid: int
    comm: str
    ppid: int
    state: str
    start: int
    utime: int = 0
    stime: int = 0
    cutime: int = 0
    cstime: int = 0
    rchar: int = 0
    wchar: int = 0
    flags: int = 0x00400100  # PF_RANDOMIZE | PF_FORKNOEXEC: a user process (PF_KTHREAD 0x00200000 off)
    io: bool = True  # False: /proc/<pid>/io unreadable (another user's process, no ptrace right)


class FakeProcTree:
    """A /proc on disk, in the kernel's formats, for the real scanners (procs.py reads a proc_root)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "self").mkdir(exist_ok=True)  # non-numeric entries are not processes
        self._procs: dict[int, _Proc] = {}

    def add(
        self,
        pid: int,
        comm: str,
        argv: Sequence[str] = (),
        *,
        ppid: int = 1,
        state: str = "S",
        start: int = 1000,
        environ: dict[str, str] | None = None,
        exe: str | None = None,
        stdin: str | None = None,
        io: bool = True,
    ) -> None:
        d = self.root / str(pid)
        d.mkdir(parents=True)
        self._procs[pid] = _Proc(pid=pid, comm=comm, ppid=ppid, state=state, start=start, io=io)
        (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (environ or {}).items()))
        if exe:
            os.symlink(exe, d / "exe")
        if stdin:
            (d / "fd").mkdir()
            os.symlink(stdin, d / "fd" / "0")
        self._render(pid)

    def set(self, pid: int, **counters: int | str) -> None:
        """Change a process's counters (utime, stime, cutime, cstime, rchar, wchar), state or flags."""
        proc = self._procs[pid]
        for name, value in counters.items():
            if not hasattr(proc, name) or name in ("pid", "comm"):
                raise AttributeError(f"a fake process has no {name!r}")
            setattr(proc, name, value)
        self._render(pid)

    def counters(self, pid: int) -> _Proc:
        return self._procs[pid]

    def remove(self, pid: int) -> None:
        """The process ended and was reaped: gone from /proc."""
        self._procs.pop(pid, None)
        shutil.rmtree(self.root / str(pid), ignore_errors=True)

    def _render(self, pid: int) -> None:
        p = self._procs[pid]
        d = self.root / str(pid)
        # Fields 1-24 of proc(5), the rest zero: pid (comm) state ppid pgrp session tty_nr tpgid flags
        # minflt cminflt majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue
        # starttime vsize rss ...
        fields = [p.state, p.ppid, p.pid, p.pid, 0, -1, p.flags, 100, 0, 0, 0]
        fields += [p.utime, p.stime, p.cutime, p.cstime, 20, 0, 1, 0, p.start, 10_000_000, 500]
        fields += [0] * 28
        (d / "stat").write_text(f"{p.pid} ({p.comm}) " + " ".join(str(f) for f in fields) + "\n")
        io = d / "io"
        if p.io:
            io.write_text(
                f"rchar: {p.rchar}\nwchar: {p.wchar}\nsyscr: 0\nsyscw: 0\n"
                "read_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n"
            )
        elif io.exists():
            io.unlink()


class FakeJob:
    """The job under the wrapper: a pid file and a small process tree (`sh -c ...` and the worker it
    started) in a FakeProcTree, whose counters grow with the clock at the rates set, read through the
    real JobTreeProbe. `hang()` stops the growth; `error` makes the scan fail."""

    def __init__(self, tree: FakeProcTree, job_file: Path, clock: Clock) -> None:
        self.tree = tree
        self.job_file = job_file
        self.clock = clock
        self.probe = JobTreeProbe(job_file, tree.root)
        self.pid: int | None = None
        self.worker: int | None = None
        self.cpu_per_s = 0.0  # CPU seconds per second (1.0: one core flat out)
        self.io_per_s = 0.0  # bytes written per second
        self.error: str | None = None
        self._at = clock.now()

    def start(self, pid: int = 4242, *, worker: str = "curl", cpu_per_s: float = 0.0, io_per_s: float = 0.0) -> None:
        self._advance()
        self.tree.add(pid, "sh", ["sh", "-c", f"{worker} ..."], ppid=pid - 1, start=5000)
        self.tree.add(pid + 1, worker, [worker, "..."], ppid=pid, start=5001)
        self.pid, self.worker = pid, pid + 1
        atomic_write(self.job_file, job_stamp(pid, self.tree.root), 0o644)
        self.run(cpu_per_s=cpu_per_s, io_per_s=io_per_s)

    def run(self, *, cpu_per_s: float, io_per_s: float = 0.0) -> None:
        self._advance()
        self.cpu_per_s, self.io_per_s = cpu_per_s, io_per_s

    def hang(self) -> None:
        self.run(cpu_per_s=0.0, io_per_s=0.0)

    def stop(self) -> None:
        """The job exited: the wrapper removes the pid file."""
        if self.pid is not None:
            self.tree.remove(self.pid)
            self.tree.remove(self.pid + 1)
        self.pid = self.worker = None
        self.job_file.unlink(missing_ok=True)

    def sample(self) -> JobTree | None:
        if self.error:
            raise JobScanError(self.error)
        self._advance()
        return self.probe.sample()

    def _advance(self) -> None:
        now = self.clock.now()
        elapsed, self._at = max(0.0, now - self._at), now
        if self.worker is None or elapsed == 0:
            return
        proc = self.tree.counters(self.worker)
        ticks = proc.utime + round(self.cpu_per_s * elapsed * CLK_TCK)
        self.tree.set(self.worker, utime=ticks, wchar=proc.wchar + round(self.io_per_s * elapsed))


# -- sync, destroy, clock ---------------------------------------------------------------------------
@dataclass
class FakeSync:
    """Records "sync"/"verify" in `calls`. Alone it sends one fake file; with `inner` (a real sync) it
    delegates, and with `clock` each push takes `push_s` of virtual time, as an upload would."""

    calls: list[str] = field(default_factory=list)
    fail: str | None = None
    verified: bool = True
    pushes: int = 0
    inner: ResultsSync | None = None
    clock: FakeClock | None = None
    push_s: float = 0.0

    def describe(self) -> str:
        return self.inner.describe() if self.inner is not None else "fake://bucket"

    def push(self, results_dir: Path) -> Manifest:
        self.pushes += 1
        self.calls.append("sync")
        if self.clock is not None and self.push_s:
            self.clock.advance(self.push_s)
        if self.fail:
            raise OSError(self.fail)
        if self.inner is not None:
            return self.inner.push(results_dir)
        return Manifest("fake://bucket", {"a.txt": 3})

    def verify(self, manifest: Manifest) -> bool:
        self.calls.append("verify")
        return self.verified and (self.inner.verify(manifest) if self.inner is not None else True)


@dataclass
class FakeDestroyer:
    """The pod's self-destroy. `target` is what it does at the provider (the drill's in-memory one);
    `refuse` is a pod key the provider will not honour (F9). `destroys` counts the ones that went through."""

    calls: list[str] = field(default_factory=list)
    refuse: bool = False
    target: Callable[[], str] | None = None
    destroys: int = 0
    # The kept window's self-stop (F16): `stop_target` is what it does at the provider; `refuse_stop` a key
    # the provider will not honour for it either.
    refuse_stop: bool = False
    stop_target: Callable[[], str] | None = None
    stops: int = 0

    def destroy_self(self) -> str:
        self.calls.append("destroy")
        if self.refuse:
            raise RuntimeError("403: this pod's key may not terminate pods")
        result = self.target() if self.target is not None else "destroyed"
        self.destroys += 1
        return result

    def stop_self(self) -> str:
        self.calls.append("stop")
        if self.refuse_stop:
            raise RuntimeError("403: this pod's key may not stop pods")
        result = self.stop_target() if self.stop_target is not None else "stopped"
        self.stops += 1
        return result


class SkewedClock:
    """A pod whose clock is off: `skew_s` ahead of the true (base) clock; sleeping passes true time."""

    def __init__(self, base: Clock, skew_s: float) -> None:
        self.base = base
        self.skew_s = skew_s

    def now(self) -> float:
        return self.base.now() + self.skew_s

    def sleep(self, seconds: float) -> None:
        self.base.sleep(seconds)
