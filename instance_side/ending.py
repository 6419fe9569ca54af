"""How a pod ends, whoever ends it (the job wrapper, the idle watch): sync -> notify -> destroy, in
that order and never another.

- No verified sync, no destroy: the pod stays up and the user is told "kept alive: sync failed".
- The notification carries `end_at`, so the functions close the ledger row BEFORE the destroy call.
  A notification that cannot be delivered within its budget never holds the destroy back (F13).
- After the destroy call, successful or refused, the `ended` marker stops the heartbeats; a refused
  self-destroy is reported, and the reaper's silence limit does the rest (F9).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from gpuc.core.clock import Clock
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.instance_side.heartbeat import PodClient, event_body
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, is_ended, mark_ended
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.selfdestroy import Destroyer
from gpuc.instance_side.sync import ResultsSync

NOTIFY_BUDGET_S = 8.0
KEPT_MESSAGE = "kept alive: sync failed"

Outcome = Literal["destroyed", "destroy_failed", "kept_sync_failed", "kept_alive", "dry_run", "in_progress", "ended"]


@dataclass(frozen=True)
class Ending:
    kind: Literal["job_exit", "idle_destroy", "deadline_destroy"]
    message: str  # what happened: "job exited with code 1 after 42s", "idle for 20 min"
    exit_code: int | None = None
    duration_s: float | None = None


class Ender:
    def __init__(
        self,
        *,
        cfg: AgentConfig,
        paths: PodPaths,
        sync: ResultsSync,
        client: PodClient,
        destroyer: Callable[[], Destroyer],
        clock: Clock,
        log: PodLog,
        keep_alive: bool = False,
        dry_run: bool = False,
        notify_budget_s: float = NOTIFY_BUDGET_S,
    ) -> None:
        self.cfg = cfg
        self.paths = paths
        self.sync = sync
        self.client = client
        self.destroyer = destroyer
        self.clock = clock
        self.log = log
        self.keep_alive = keep_alive
        self.dry_run = dry_run
        self.notify_budget_s = notify_budget_s
        self.last_sync_error: str | None = None

    def end(self, ending: Ending) -> Outcome:
        if self.dry_run:
            return self._dry_run(ending)
        with _exclusive(self.paths) as mine:
            if not mine:
                self.log.line("another process is ending this pod; leaving it to them")
                return "in_progress"
            if is_ended(self.paths, self.cfg.pod_id):
                self.log.line("pod already ended; nothing to do")
                return "ended"
            return self._end(ending)

    def _end(self, ending: Ending) -> Outcome:
        synced = self._sync()
        if synced is None:
            self.nag()
            return "kept_sync_failed"
        self._notify(ending, synced)
        if self.keep_alive:
            self.log.line("KEEP_ALIVE=1: not destroying; the idle watch still applies")
            return "kept_alive"
        return self._destroy()

    # -- the three steps ----------------------------------------------------------------------
    def _sync(self) -> str | None:
        """The manifest summary when the remote listing matches what was sent, else None."""
        self.log.line(f"syncing results/ to {self.sync.describe()}")
        try:
            manifest = self.sync.push(self.paths.results)
            verified = self.sync.verify(manifest)
        except Exception as exc:  # any failure at all means results may be lost: keep the pod
            self.last_sync_error = self.log.scrub(str(exc) or type(exc).__name__)
            self.log.line(f"sync failed: {self.last_sync_error}")
            return None
        if not verified:
            self.last_sync_error = "the remote listing does not match what was sent"
            self.log.line(f"sync failed: {self.last_sync_error}")
            return None
        self.last_sync_error = None
        self.log.line(f"sync verified: {manifest.summary()}")
        return manifest.summary()

    def _notify(self, ending: Ending, synced: str) -> None:
        ending_now = not self.keep_alive
        tail = "destroying the pod" if ending_now else "kept alive (KEEP_ALIVE=1)"
        event = event_body(
            self.cfg.pod_id,
            ending.kind,
            f"{ending.message}; results: {synced}; {tail}",
            exit_code=ending.exit_code,
            duration_s=ending.duration_s,
            # On the pod's clock: the client puts it on the functions' clock as it signs (a clock
            # that is off must not bill minutes that never happened, or hide ones that did).
            end_at=self.clock.now() if ending_now else None,
        )
        if self.client.deliver(event, self.notify_budget_s):
            self.log.line(f"notified: {ending.kind}")
        else:
            self.log.line(f"notification {ending.kind} not delivered; going on (the reaper closes the books)")

    def _destroy(self) -> Outcome:
        self.log.line(f"destroying pod {self.cfg.pod_id} through {self.cfg.provider}")
        try:
            result = self.destroyer().destroy_self()
        except Exception as exc:
            reason = self.log.scrub(str(exc) or type(exc).__name__)
            self.log.line(f"self-destroy refused: {reason}")
            mark_ended(self.paths, self.cfg.pod_id)
            self.client.deliver(
                event_body(
                    self.cfg.pod_id,
                    "destroy_failed",
                    f"self-destroy refused ({reason}); heartbeats stop now, the reaper will destroy the pod",
                ),
                self.notify_budget_s,
            )
            return "destroy_failed"
        self.log.line(f"destroy: {result}")
        mark_ended(self.paths, self.cfg.pod_id)
        if isinstance(result, StoppedInstead):
            # Only stopped (a refusal, or a "not found" the pod saw through): it still bills its disk.
            text = f"{result}; heartbeats stop now, the reaper will destroy the pod"
            self.client.deliver(event_body(self.cfg.pod_id, "destroy_failed", text), self.notify_budget_s)
            return "destroy_failed"
        return "destroyed"

    def nag(self) -> None:
        """The "kept alive" alert; the wrapper repeats it every nag interval while it lives."""
        reason = self.last_sync_error or "unknown"
        self.log.line(f"{KEPT_MESSAGE} ({reason}); the pod stays up until you decide")
        self.client.deliver(
            event_body(
                self.cfg.pod_id,
                "sync_failed",
                f"{KEPT_MESSAGE}: {reason}",
                note="pod kept; results not copied",
            ),
            self.notify_budget_s,
        )

    def _dry_run(self, ending: Ending) -> Outcome:
        self.log.line(f"DRY_RUN: would sync results/ to {self.sync.describe()} and verify the listing")
        code = "" if ending.exit_code is None else f" with exit code {ending.exit_code}"
        self.log.line(f"DRY_RUN: would notify {ending.kind}{code} and the end time")
        if self.keep_alive:
            self.log.line("DRY_RUN: would not destroy (KEEP_ALIVE=1)")
        else:
            self.log.line(f"DRY_RUN: would destroy pod {self.cfg.pod_id} through {self.cfg.provider}")
        return "dry_run"


@contextmanager
def _exclusive(paths: PodPaths) -> Iterator[bool]:
    """One ending at a time: the wrapper and the idle watch may decide in the same minute."""
    try:
        fd = os.open(paths.end_lock, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield True  # no state dir to lock in: nothing else can be ending it through us either
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
