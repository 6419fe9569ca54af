"""Who holds a kept pod, and when its next step is due (docs/failure-matrix.md F16): the wrapper after a job's
end, or the agent after an idle or deadline end. The steps themselves (retry, warn, stop) are the Ender's; the kept
state they read and write is kept.py's. Apart from both so that the state file never imports the ending.

Standard library only: the agent holds this module for the pod's life.
"""

from __future__ import annotations

import contextlib
import fcntl
import os

from gpuc.core.clock import Clock
from gpuc.instance_side.ending import Ender, Outcome
from gpuc.instance_side.kept import STILL_KEPT, STOP_WARN_S, KeptState, read_kept
from gpuc.instance_side.podfiles import AgentConfig, PodPaths


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
        self._take_retry()
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
            nag: float = self.cfg.nag_interval_s
            return now + nag
        stop_at = state.stop_at(self.cfg.kept_window_s)
        if now >= stop_at:
            return now if self._next_stop is None else self._next_stop
        due = [self._nag_due(state, now), stop_at]
        if not state.warned:
            due.append(stop_at - STOP_WARN_S)
        return min(due)

    def retry_now(self) -> None:
        """The user asked from the phone: the next tick retries the end (sync first) as a nag would, or,
        past the window, tries the last sync and the stop at once. Said through a file: the agent hears
        the phone, but the wrapper may be the one holding the kept pod (after a job's failed sync), and it
        naps a second at most between ticks."""
        with contextlib.suppress(OSError):  # then the holder's own nag interval still retries
            self.paths.retry_asked.touch()

    def _take_retry(self) -> None:
        """The holder, at each tick: a retry asked (by any process) is due now."""
        try:
            self.paths.retry_asked.unlink()
        except FileNotFoundError:
            return
        except OSError:
            pass
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
