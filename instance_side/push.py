"""The periodic results push: results leave the pod while the job runs, a little at a time.

A push sends only what changed since the last VERIFIED push: a file whose (size, mtime) differ from the
last manifest, or that it does not list. Each file sent is verified by name and size at the destination,
as the final sync verifies (sync.py); only then does the manifest move. A file changed within the last
SETTLE_S seconds is still being written: it waits for the next push (a checkpoint half written would
verify by its size at the moment it was read, and be wrong). Files are streamed by the destination's own
copy (a PUT through the run's grant, instance_side/grants.py; shutil.copyfile): nothing here reads a file,
and nothing is hashed, so checking an unchanged tree of 10,000 files is a walk and a dict compare
(bench/push_scan.py).

The manifest is kept twice: on the pod (`<state>/push-manifest.json`, what the next push compares with)
and at the destination beside the results (`logs/push-manifest.json`, written after the files it lists
verified), so a later pod (spot recovery) or the laptop after the pod is gone (`gpuc results`) can read
what the last push left there, and when.

A push runs as its own process (`python -m gpuc.instance_side push`, started by the agent), at low CPU and
I/O priority: the agent's heartbeats never wait on an upload, an upload never weighs on the agent's memory,
and a push under way finishes even if the agent dies. One push at a time (push.lock). Its outcome is
`<state>/push.json`: what the heartbeat reports to the watchdog (when, how many files, where).

The final sync at the job's end stays the gate it is (sync.py, ending.py): a full push, verified.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuc.core.clock import Clock
from gpuc.instance_side.podfiles import PodPaths, atomic_write, try_lock
from gpuc.instance_side.sync import (
    JOB_LOG_NAME,
    OUTCOME_NAME,
    BucketSync,
    Manifest,
    ResultsSync,
    destination,
    scan_results,
    snapshot,
)

SETTLE_S = 5.0  # a file modified this recently is still being written: it goes next time
# A file still being written at two pushes in a row (a metrics log appended every second never settles) is
# sent as a snapshot of what it holds then, if it is this small; a larger one (a checkpoint being saved) waits.
SNAPSHOT_MAX = 64 * 1024 * 1024
MANIFEST_NAME = "logs/push-manifest.json"  # at the destination, beside results/ and the job's log
_VERSION = 1


def manifest_path(paths: PodPaths) -> Path:
    return paths.state / "push-manifest.json"


def state_path(paths: PodPaths) -> Path:
    return paths.state / "push.json"


def _lock_path(paths: PodPaths) -> Path:
    return paths.state / "push.lock"


def _stage(paths: PodPaths) -> Path:
    # Not the final sync's log stage: the two may run at once (a push under way when the job ends).
    return paths.state / "push-stage"


@dataclass(frozen=True)
class PushManifest:
    """What the destination holds, as of the last verified push: name -> (size, mtime_ns)."""

    destination: str = ""
    at: float | None = None
    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # a name stored under an escaped key (sync.py)
    waiting: tuple[str, ...] = ()  # still being written at this push

    def to_json(self) -> str:
        data = {
            "version": _VERSION,
            "destination": self.destination,
            "at": self.at,
            "files": {name: list(stamp) for name, stamp in sorted(self.files.items())},
            "keys": dict(sorted(self.keys.items())),
            "waiting": sorted(self.waiting),
        }
        return json.dumps(data, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PushManifest:
        """A manifest that cannot be read is an empty one: everything is sent again (never a file skipped)."""
        try:
            data = json.loads(text)
            files = {
                str(name): (int(stamp[0]), int(stamp[1]))
                for name, stamp in data["files"].items()
                if isinstance(stamp, list) and len(stamp) == 2
            }
            keys = {str(k): str(v) for k, v in data.get("keys", {}).items()}
            waiting = tuple(str(n) for n in data.get("waiting", []))
            at = data.get("at")
            return cls(str(data.get("destination", "")), float(at) if at is not None else None, files, keys, waiting)
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return cls()

    @classmethod
    def load(cls, path: Path) -> PushManifest:
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except OSError:
            return cls()


@dataclass(frozen=True)
class PushReport:
    """The outcome of one push (`<state>/push.json`). `at`/`files`/`destination`: the last VERIFIED push
    (kept when a later one fails); `error`: the latest push's failure, None once one succeeds."""

    at: float | None = None
    files: int = 0
    sent: int = 0
    sent_bytes: int = 0
    waiting: int = 0
    destination: str = ""
    error: str | None = None
    failed_at: float | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True) + "\n"

    @classmethod
    def load(cls, paths: PodPaths) -> PushReport | None:
        try:
            data = json.loads(state_path(paths).read_text(encoding="utf-8"))
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None

    def summary(self) -> str:
        if self.error:
            return f"FAILED: {self.error}"
        wait = f", {self.waiting} still being written (next push)" if self.waiting else ""
        sent = f"{self.sent} changed files ({self.sent_bytes} bytes) sent"
        return f"{sent}, {self.files} in all at {self.destination}{wait}"


def plan(
    files: Mapping[str, int], mtimes: Mapping[str, int], last: PushManifest, now: float, settle_s: float = SETTLE_S
) -> tuple[dict[str, int], list[str]]:
    """(what to send: name -> size, what waits: changed too recently). Unchanged: same size and mtime."""
    send: dict[str, int] = {}
    waiting: list[str] = []
    for name, size in files.items():
        mtime = mtimes.get(name, 0)
        if last.files.get(name) == (size, mtime):
            continue
        if 0 <= now - mtime / 1e9 < settle_s:
            waiting.append(name)
        else:
            send[name] = size
    return send, waiting


class IncrementalPush:
    def __init__(self, dest: BucketSync, paths: PodPaths, clock: Clock, *, settle_s: float = SETTLE_S) -> None:
        self.dest = dest
        self.paths = paths
        self.clock = clock
        self.settle_s = settle_s

    def run(self) -> PushReport:
        """One push. Raises (SyncError, OSError) when it failed: the manifest then stays as it was."""
        now = self.clock.now()
        last = PushManifest.load(manifest_path(self.paths))
        if last.destination and last.destination != self.dest.describe():
            last = PushManifest()  # another destination (changed settings): it holds none of it
        results = self.paths.results
        shutil.rmtree(_stage(self.paths), ignore_errors=True)
        listing = scan_results(results)
        send, waiting = plan(listing.files, listing.mtimes, last, now, self.settle_s)
        sent = self._send(results, send)
        again = {n: results / n for n in waiting if n in last.waiting and listing.files[n] <= SNAPSHOT_MAX}
        snapped = self._snapshots(again, PushManifest())
        sources = {JOB_LOG_NAME: self.paths.job_log, OUTCOME_NAME: self.paths.outcome}
        # A name results/ holds is the job's own: gpuc's copy of its log never goes over it.
        logs = self._snapshots({n: src for n, src in sources.items() if n not in listing.files}, last)
        stamps = {n: (s, listing.mtimes.get(n, 0)) for n, s in listing.files.items() if n not in waiting}
        # A file that waits keeps what the destination holds of it (the last push's stamp), if anything.
        stamps.update({n: last.files[n] for n in waiting if n in last.files})
        stamps.update(snapped)
        stamps.update(logs)
        keys = {n: k for n, k in {**last.keys, **sent.keys}.items() if n in stamps}
        pushed = PushManifest(self.dest.describe(), now, stamps, keys, tuple(sorted(waiting)))
        if stamps != last.files or keys != last.keys:
            # Nothing changed: nothing is written at the destination (a git remote gets no empty commit
            # every interval); the destination is as current as the pod's results, which is what `at` says.
            self._publish(pushed, listing.files)
        atomic_write(manifest_path(self.paths), pushed.to_json(), 0o600)
        return PushReport(
            at=now,
            files=sum(1 for name in stamps if name not in logs),
            sent=len(send) + len(snapped),
            sent_bytes=sum(send.values()) + sum(size for size, _ in snapped.values()),
            waiting=len(waiting) - len(snapped),
            destination=self.dest.describe(),
        )

    def _send(self, root: Path, files: Mapping[str, int]) -> Manifest:
        if not files:
            return Manifest(self.dest.describe())
        manifest = self.dest.push_files(root, files)
        if not self.dest.verify(manifest):
            raise _NotVerified(self.dest.describe())
        return manifest

    def _snapshots(self, sources: Mapping[str, Path], last: PushManifest) -> dict[str, tuple[int, int]]:
        """Files sent as a copy of what they hold now (the job's log and outcome; a result still being
        written): a file that grows while it is sent must stay the size that is verified. Only what changed
        since `last`. Returns each one's stamp: (size sent, mtime), mtime 0 when it grew meanwhile (sent
        again next time)."""
        stage = _stage(self.paths)
        kept: dict[str, tuple[int, int]] = {}
        changed: dict[str, int] = {}
        for name, src in sources.items():
            try:
                st = src.stat()
            except OSError:
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            if last.files.get(name) == stamp:
                kept[name] = stamp
                continue
            target = stage / name
            target.parent.mkdir(parents=True, exist_ok=True)
            snapshot(src, target, None)
            size = target.stat().st_size
            changed[name] = size
            kept[name] = (size, st.st_mtime_ns) if size == st.st_size else (size, 0)
        self._send(stage, changed)
        return kept

    def _publish(self, pushed: PushManifest, results: Mapping[str, int]) -> None:
        """The manifest at the destination, after the files it lists verified: what it says is there, is."""
        if MANIFEST_NAME in results:
            return  # the job's own file of that name: never overwritten
        stage = _stage(self.paths)
        target = stage / MANIFEST_NAME
        target.parent.mkdir(parents=True, exist_ok=True)
        text = pushed.to_json()
        target.write_text(text, encoding="utf-8")
        self._send(stage, {MANIFEST_NAME: len(text.encode())})


def record_sync(dest: BucketSync, manifest: Manifest, paths: PodPaths, clock: Clock | None = None) -> None:
    """After a verified whole sync: the push manifest (on the pod and at the destination) and push.json say
    what the destination now holds. A file whose size changed since the sync read it is stamped so that the
    next push sends it again."""
    from gpuc.core.clock import SystemClock

    clock = clock or SystemClock()
    listing = scan_results(paths.results)
    stamps = {
        name: (size, listing.mtimes.get(name, 0) if listing.files.get(name) == size else 0)
        for name, size in manifest.files.items()
    }
    beside = {name: (size, 0) for part in manifest.parts[1:] for name, size in part.files.items()}
    pushed = PushManifest(dest.describe(), clock.now(), {**stamps, **beside}, dict(manifest.keys))
    with try_lock(_lock_path(paths)) as held:
        if not held:
            return  # a periodic push is under way: it records what it verified itself
        IncrementalPush(dest, paths, clock)._publish(pushed, listing.files)
        atomic_write(manifest_path(paths), pushed.to_json(), 0o600)
        report = PushReport(at=pushed.at, files=len(stamps), sent=len(stamps), destination=dest.describe())
        atomic_write(state_path(paths), report.to_json(), 0o600)


class _NotVerified(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(f"the listing at {where} does not match what was sent")


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


def push_once(sync: ResultsSync, paths: PodPaths, clock: Clock) -> PushReport | None:
    """One push under the lock, its outcome written to push.json. None: another push is under way.
    Without a destination that takes files a few at a time (none configured, unusable, a test's fake),
    the push is the sync's own whole push, verified: the same outcome as before, said the same way."""
    with try_lock(_lock_path(paths)) as held:
        if not held:
            return None
        previous = PushReport.load(paths) or PushReport()
        dest = destination(sync)
        try:
            report = IncrementalPush(dest, paths, clock).run() if dest is not None else _whole(sync, paths, clock)
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
        raise _NotVerified(sync.describe())
    return PushReport(
        at=now,
        files=len(manifest.files),
        sent=len(manifest.files),
        sent_bytes=manifest.total_bytes,
        destination=sync.describe(),
    )


class InlinePusher:
    """The push in the agent's own process, to its end (tests, the drill's stand-in pods)."""

    def __init__(self, sync: ResultsSync, paths: PodPaths, clock: Clock) -> None:
        self.sync = sync
        self.paths = paths
        self.clock = clock
        self._done: PushReport | None = None

    def start(self) -> None:
        self._done = push_once(self.sync, self.paths, self.clock)

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
