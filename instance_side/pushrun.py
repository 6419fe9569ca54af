"""A push as the agent runs it: one at a time under push.lock, its outcome in push.json (what the heartbeat
reports), in the agent's process (tests, the drill) or as a process of its own at low CPU and I/O priority.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from gpuc.core.clock import Clock
from gpuc.instance_side.joblogsync import destination
from gpuc.instance_side.manifest import ResultsSync
from gpuc.instance_side.podfiles import PodPaths, atomic_write, try_lock
from gpuc.instance_side.push import IncrementalPush, NotVerified
from gpuc.instance_side.pushmanifest import PushReport, lock_path, state_path
from gpuc.instance_side.pushplan import SETTLE_S

# -- low priority ------------------------------------------------------------------------------------
_IOPRIO_WHO_PROCESS = 1


_IOPRIO_CLASS_IDLE = 3


_IOPRIO_CLASS_SHIFT = 13


_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "i686": 289, "armv7l": 314}


def lower_priority() -> str:
    """CPU nice 19 and the idle I/O class for this process, so a push never slows the job. Best effort:
    what could not be lowered is said, never raised (a push at normal priority beats no push)."""
    said = []
    try:
        os.nice(19 - os.nice(0))
        said.append("nice 19")
    except OSError:
        said.append("nice unchanged")
    said.append("io idle" if _io_idle() else "io priority unchanged")
    return ", ".join(said)


def _io_idle() -> bool:
    number = _SYS_IOPRIO_SET.get(os.uname().machine)
    if number is None or not sys.platform.startswith("linux"):
        return False
    import ctypes  # lazy: only the push's own process lowers its I/O class, never the agent

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT
        return int(libc.syscall(number, _IOPRIO_WHO_PROCESS, 0, value)) == 0
    except (OSError, AttributeError):
        return False


def io_class(pid: int = 0) -> int | None:
    """This process's I/O scheduling class (3: idle), for the tests and the bench; None if unreadable."""
    number = {"x86_64": 252, "aarch64": 31, "i686": 290, "armv7l": 315}.get(os.uname().machine)
    if number is None:
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = int(libc.syscall(number, _IOPRIO_WHO_PROCESS, pid))
    except (OSError, AttributeError):
        return None
    return None if value < 0 else value >> _IOPRIO_CLASS_SHIFT


# -- one push, as a process ---------------------------------------------------------------------------
def start_push(paths: PodPaths, environ: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | None:
    """`python -m gpuc.instance_side push` in a session of its own: it outlives the agent that started it
    (a kill of the agent's process group too). None when it could not start."""
    out = paths.state / "push.out"
    try:
        with out.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "gpuc.instance_side", "push"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ if environ is None else environ),
                start_new_session=True,
            )
    except OSError:
        return None


def heartbeat_fields(report: PushReport | None, now: float) -> dict[str, Any]:
    """What the heartbeat says of the last verified push (core.api.HeartbeatBody): how long ago, how many
    files, where. Seconds ago, not a time: the pod's clock may be off, the watchdog's is not."""
    if report is None or report.at is None:
        return {}
    # Inside core.api's bounds whatever the pod holds: a heartbeat the watchdog refuses is a silent pod.
    return {
        "pushed_ago_s": round(min(max(0.0, now - report.at), _WIRE_MAX_S), 1),
        "pushed_files": min(max(0, int(report.files)), _WIRE_MAX_COUNT),
        "pushed_to": report.destination[:300],
    }


_WIRE_MAX_S = 366 * 86400.0  # core.api.MAX_LIMIT_S


_WIRE_MAX_COUNT = 1_000_000  # core.api.Count


# -- the agent's side -------------------------------------------------------------------------------
class Pusher(Protocol):
    """How the agent runs a push: `start` one (nothing if one is under way), `finished` hands over the
    report of a push that ended since the last call, `last` is what push.json says now."""

    def start(self) -> None: ...

    def finished(self) -> PushReport | None: ...

    def last(self) -> PushReport | None: ...


def push_once(sync: ResultsSync, paths: PodPaths, clock: Clock, *, settle_s: float = SETTLE_S) -> PushReport | None:
    """One push under the lock, its outcome written to push.json. None: another push is under way.
    Without a destination that takes files a few at a time (none configured, unusable, a test's fake),
    the push is the sync's own whole push, verified: the same outcome as before, said the same way."""
    with try_lock(lock_path(paths)) as held:
        if not held:
            return None
        previous = PushReport.load(paths) or PushReport()
        dest = destination(sync)
        try:
            if dest is not None:
                report = IncrementalPush(dest, paths, clock, settle_s=settle_s).run()
            else:
                report = _whole(sync, paths, clock)
        except Exception as exc:
            report = PushReport(
                at=previous.at,
                files=previous.files,
                destination=previous.destination or sync.describe(),
                error=(str(exc) or type(exc).__name__)[:300],
                failed_at=clock.now(),
            )
        with contextlib.suppress(OSError):
            atomic_write(state_path(paths), report.to_json(), 0o600)
        return report


def _whole(sync: ResultsSync, paths: PodPaths, clock: Clock) -> PushReport:
    now = clock.now()
    manifest = sync.push(paths.results)
    if not sync.verify(manifest):
        raise NotVerified(sync.describe())
    return PushReport(
        at=now,
        files=len(manifest.files),
        sent=len(manifest.files),
        sent_bytes=manifest.total_bytes,
        destination=sync.describe(),
    )


class InlinePusher:
    """The push in the agent's own process, to its end (tests, the drill's stand-in pods)."""

    def __init__(self, sync: ResultsSync, paths: PodPaths, clock: Clock, *, settle_s: float = SETTLE_S) -> None:
        self.sync = sync
        self.paths = paths
        self.clock = clock
        self.settle_s = settle_s
        self._done: PushReport | None = None

    def start(self) -> None:
        self._done = push_once(self.sync, self.paths, self.clock, settle_s=self.settle_s)

    def finished(self) -> PushReport | None:
        done, self._done = self._done, None
        return done

    def last(self) -> PushReport | None:
        return PushReport.load(self.paths)


class ProcessPusher:
    """The push as its own process, at low priority (see the module's docstring)."""

    def __init__(self, paths: PodPaths) -> None:
        self.paths = paths
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return  # one under way: it sends what changed since the last verified push anyway
        self.proc = start_push(self.paths)

    def finished(self) -> PushReport | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        self.proc = None
        return self.last()

    def last(self) -> PushReport | None:
        return PushReport.load(self.paths)
