"""A pod kept for its results (SPEC F16): its end's sync failed, so results/ exists only on its disk.

Kept is not forever. While kept, the end is retried at the nag interval (each failed try is the nag; a
try that syncs ends the pod as usual: notify -> destroy). Fifteen minutes before the kept window is over
the user hears "stopping in 15 min"; at its end, after one last try, the pod STOPS itself (never a
destroy): GPU billing ends, the disk with results/ stays for `gpuc results POD`.

One piece of code for whoever holds the kept pod: the wrapper's reminder loop after a job's end, or the
agent after an idle or deadline end (and after a wrapper whose reminders were stopped with Ctrl-C). The
state is a file on the pod (`kept.json`), so the window does not restart when the holder changes or the
agent restarts; a lock (`kept.lock`) makes one holder at a time. The watchdog, told by each nag how long
is left, stops the pod itself if it is still running a period after that (the agent died or froze).

Standard library only: the agent holds this module for the pod's life.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from gpuc.core.clock import Clock
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, atomic_write

if TYPE_CHECKING:
    from gpuc.instance_side.ending import Ender, Outcome

STOP_WARN_S = 15 * 60.0  # "stopping in 15 min": time to answer before the GPU is released
# What `tick` answers while the pod stays kept (retried or not), and once its watch has nothing left to do.
STILL_KEPT: Final = "kept_sync_failed"
ENDS_THE_WATCH = ("destroyed", "destroy_failed", "ended", "kept_stopped", "kept_alive")


@dataclass(frozen=True)
class KeptState:
    since: float  # the pod's clock: the first end whose sync failed
    kind: str  # that end, to retry as it was (its exit code goes into the notification)
    message: str
    exit_code: int | None = None
    duration_s: float | None = None
    warned: bool = False  # "stopping in 15 min" went out
    stopped_at: float | None = None

    def stop_at(self, window_s: float) -> float:
        return self.since + window_s


def kept_file(paths: PodPaths) -> Path:
    return paths.state / "kept.json"


def read_kept(paths: PodPaths) -> KeptState | None:
    """The pod's kept state, or None when it is not kept. A file that cannot be read as one keeps the pod
    kept from now (a damaged file must not lift the keep; it can only restart the window)."""
    path = kept_file(paths)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return KeptState(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        with contextlib.suppress(OSError):
            since = path.stat().st_mtime
            return KeptState(since=since, kind="job_exit", message="kept (its state file was damaged)")
        return None


def write_kept(paths: PodPaths, state: KeptState) -> None:
    with contextlib.suppress(OSError):  # the disk may be full: that is often why the sync failed
        atomic_write(kept_file(paths), json.dumps(asdict(state)) + "\n", 0o644)


def record_kept(paths: PodPaths, state: KeptState) -> KeptState:
    """Kept from now, unless it already was: the first failed end starts the window and stays the one
    retried (a later idle or deadline end of the same kept pod does not restart it)."""
    existing = read_kept(paths)
    if existing is not None and existing.stopped_at is None:
        return existing
    write_kept(paths, state)
    return state


def clear_kept(paths: PodPaths) -> None:
    with contextlib.suppress(OSError):
        kept_file(paths).unlink()


class KeptWatch:
    """When the kept pod's next step is due, and that only one process takes it. The steps themselves
    (retry, warn, stop) are the Ender's: the same sync -> notify -> destroy order, plus the stop."""

    def __init__(self, ender: Ender, cfg: AgentConfig, paths: PodPaths, clock: Clock) -> None:
        self.ender = ender
        self.cfg = cfg
        self.paths = paths
        self.clock = clock
        self._lock_fd: int | None = None
        self._next_nag: float | None = None
        self._next_stop: float | None = None  # after a refused stop: try again a nag interval later

    def left(self, now: float) -> float | None:
        """Seconds until the kept pod stops itself (for the heartbeats), or None when it is not kept."""
        state = read_kept(self.paths)
        if state is None or state.stopped_at is not None:
            return None
        return max(0.0, state.stop_at(self.cfg.kept_window_s) - now)

    def tick(self, now: float) -> Outcome | None:
        """None: not kept. "in_progress": kept, but another process holds it. Else what this step did."""
        state = read_kept(self.paths)
        if state is None:
            return None
        if state.stopped_at is not None:
            return "kept_stopped"
        if not self._hold():
            return "in_progress"
        stop_at = state.stop_at(self.cfg.kept_window_s)
        if now >= stop_at:  # past the window, only the stop is left to try (each refusal is said)
            if self._next_stop is not None and now < self._next_stop:
                return STILL_KEPT
            outcome = self.ender.stop_kept()
            if outcome == "stop_failed":
                self._next_stop = now + self.cfg.nag_interval_s
            return outcome
        if not state.warned and now >= stop_at - STOP_WARN_S:
            self.ender.warn_stop(state, stop_at)
        if now >= self._nag_due(state, now):
            self._next_nag = now + self.cfg.nag_interval_s
            return self.ender.end(self.ender.ending_of(state))
        return STILL_KEPT

    def next_due(self, now: float) -> float:
        """When `tick` next has something to do (the wrapper sleeps until then, in short naps)."""
        state = read_kept(self.paths)
        if state is None or state.stopped_at is not None:
            return now + self.cfg.nag_interval_s
        stop_at = state.stop_at(self.cfg.kept_window_s)
        if now >= stop_at:
            return now if self._next_stop is None else self._next_stop
        due = [self._nag_due(state, now), stop_at]
        if not state.warned:
            due.append(stop_at - STOP_WARN_S)
        return min(due)

    def retry_now(self) -> None:
        """The user asked from the phone: the next tick retries the end (sync first) as a nag would, or,
        past the window, tries the last sync and the stop at once."""
        self._next_nag = float("-inf")
        self._next_stop = None

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _nag_due(self, state: KeptState, now: float) -> float:
        if self._next_nag is None:
            # The failed end itself was the first nag; a holder that takes over keeps the same rhythm.
            interval = self.cfg.nag_interval_s
            self._next_nag = state.since + interval * (int(max(0.0, now - state.since) // interval) + 1)
        return self._next_nag

    def _hold(self) -> bool:
        if self._lock_fd is not None:
            return True
        try:
            fd = os.open(self.paths.state / "kept.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return True  # no state dir to lock in: nobody else can be holding it through us either
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True


def stopped(state: KeptState, now: float) -> KeptState:
    return replace(state, stopped_at=now)


def warned(state: KeptState) -> KeptState:
    return replace(state, warned=True)
