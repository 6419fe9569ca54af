"""How a pod ends, whoever ends it (the job wrapper, the idle watch): sync -> notify -> destroy, in
that order and never another.

- No verified sync, no destroy: the pod stays up and the user is told "kept alive: sync failed".
  Kept has a bound (F16, instance_side/kept.py): retried at the nag interval, then STOPPED at the end of
  the kept window, never destroyed: GPU billing ends, the disk with results/ stays.
- The notification carries `end_at`, so the functions close the ledger row BEFORE the destroy call.
  A notification that cannot be delivered within its budget never holds the destroy back (F13).
- After the destroy call, successful or refused, the `ended` marker stops the heartbeats; a refused
  self-destroy is reported, and the reaper's silence limit does the rest (F9).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast, get_args

from gpuc.core.clock import Clock
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.instance_side.heartbeat import PodClient, event_body
from gpuc.instance_side.joblog import note_pod_end
from gpuc.instance_side.kept import KeptState, clear_kept, read_kept, record_kept, stopped, warned, write_kept
from gpuc.instance_side.manifest import ResultsSync
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, hold_end_lock, is_ended, mark_ended
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.selfdestroy import Destroyer

NOTIFY_BUDGET_S = 8.0
KEPT_MESSAGE = "kept alive: sync failed"
GET_THEM = "`gpuc results {pod}` copies them to your laptop and ends the pod"

Outcome = Literal[
    "destroyed",
    "destroy_failed",
    "kept_sync_failed",
    "kept_alive",
    "dry_run",
    "in_progress",
    "ended",
    "kept_stopped",  # the kept window is over: stopped, disk (results/) kept
    "stop_failed",  # ... and the stop was refused: still kept, still billing; the watchdog stops it
]
# verify_failed: a pod that booted itself (instance_side/boot.py) and is not the machine the run pays for
EndKind = Literal["job_exit", "idle_destroy", "deadline_destroy", "phone_destroy", "verify_failed"]


@dataclass(frozen=True)
class Ending:
    kind: EndKind
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
        with hold_end_lock(self.paths) as mine:
            if not mine:
                self.log.line("another process is ending this pod; leaving it to them")
                return "in_progress"
            if is_ended(self.paths, self.cfg.pod_id):
                self.log.line("pod already ended; nothing to do")
                return "ended"
            return self._end(ending)

    def _end(self, ending: Ending) -> Outcome:
        note_pod_end(self.paths, ending.kind, ending.message)
        synced = self._sync()
        if synced is None:
            self.nag(record_kept(self.paths, self._kept_state(ending)))
            return "kept_sync_failed"
        return self._finish(ending, synced)

    def _finish(self, ending: Ending, synced: str) -> Outcome:
        clear_kept(self.paths)  # the results are safe: nothing left to keep the pod for
        end_at = self.clock.now()
        self._notify(ending, synced, end_at)
        if self.keep_alive:
            self.log.line(f"{self._kept_why()}: not destroying; the idle watch still applies")
            return "kept_alive"
        return self._destroy(end_at)

    # -- the three steps ----------------------------------------------------------------------
    def _sync(self) -> str | None:
        """What was sent, for the notification (files and bytes; the log names the destination), when the
        remote listing matches it, else None."""
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
        return manifest.short()

    def _notify(self, ending: Ending, synced: str, end_at: float) -> None:
        ending_now = not self.keep_alive
        tail = "destroying the pod" if ending_now else self._kept_why()
        event = event_body(
            self.cfg.pod_id,
            ending.kind,
            f"{ending.message}; results: {synced}; {tail}",
            exit_code=ending.exit_code,
            duration_s=ending.duration_s,
            # On the pod's clock: the client puts it on the functions' clock as it signs (a clock
            # that is off must not bill minutes that never happened, or hide ones that did).
            end_at=end_at if ending_now else None,
        )
        if self.client.deliver(event, self.notify_budget_s):
            self.log.line(f"notified: {ending.kind}")
        else:
            self.log.line(f"notification {ending.kind} not delivered; going on (the reaper closes the books)")

    def _destroy(self, end_at: float) -> Outcome:
        """A refused or stopped-only destroy is said with the end time again: the watchdog records the end from
        whichever word reaches it first (the end notification may have been lost), and its reaper destroys the
        pod after the grace; a stopped pod it was told nothing about waits the stopped limit (F7: 24 h)."""
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
                    end_at=end_at,
                ),
                self.notify_budget_s,
            )
            return "destroy_failed"
        self.log.line(f"destroy: {result}")
        mark_ended(self.paths, self.cfg.pod_id)
        if isinstance(result, StoppedInstead):
            # Only stopped (a refusal, or a "not found" the pod saw through): it still bills its disk.
            text = f"{result}; heartbeats stop now, the reaper will destroy the pod"
            event = event_body(self.cfg.pod_id, "destroy_failed", text, end_at=end_at)
            self.client.deliver(event, self.notify_budget_s)
            return "destroy_failed"
        return "destroyed"

    def _kept_why(self) -> str:
        if self.cfg.warm_s > 0:
            warm = span(self.cfg.warm_s)
            return f"the pod stays warm (--warm {warm}): with no job for {warm} it syncs results/ and ends itself"
        return "kept: KEEP_ALIVE=1"

    def nag(self, state: KeptState | None = None) -> None:
        """The "kept alive" alert, repeated at the nag interval by whoever holds the kept pod (kept.py).
        It tells the watchdog how long the pod is kept before it stops itself: its backstop if it cannot."""
        reason = self.last_sync_error or "unknown"
        state = state or read_kept(self.paths) or self._kept_state(None)
        left = max(0.0, state.stop_at(self.cfg.kept_window_s) - self.clock.now())
        plan = f"it stops in {span(left)} (GPU billing ends, the disk with results/ stays)"
        self.log.line(f"{KEPT_MESSAGE} ({reason}); the pod stays up, {plan}")
        event = event_body(
            self.cfg.pod_id,
            "sync_failed",
            f"{KEPT_MESSAGE}: {reason}; results/ is only on the pod: {plan}. " + GET_THEM.format(pod=self.cfg.pod_id),
            note="pod kept; results not copied",
        )
        self.client.deliver({**event, "kept_left_s": left}, self.notify_budget_s)

    # -- the kept window (kept.py decides when) ------------------------------------------------
    def ending_of(self, state: KeptState) -> Ending:
        return Ending(
            kind=cast(EndKind, state.kind) if state.kind in get_args(EndKind) else "job_exit",
            message=state.message,
            exit_code=state.exit_code,
            duration_s=state.duration_s,
        )

    def warn_stop(self, state: KeptState, stop_at: float) -> None:
        left = max(0.0, stop_at - self.clock.now())
        write_kept(self.paths, warned(state))
        text = (
            f"stopping in {span(left)}: GPU billing ends, the disk with results/ stays; "
            f"`gpuc results {self.cfg.pod_id}` gets them"
        )
        self.log.line(f"kept window ends soon: {text}")
        event = event_body(self.cfg.pod_id, "kept_stopping", f"{KEPT_MESSAGE}, {text}")
        self.client.deliver({**event, "kept_left_s": left}, self.notify_budget_s)

    def stop_kept(self) -> Outcome:
        """The kept window is over: one last try (a sync that works ends the pod as usual), else STOP it.
        Never a destroy: the results exist nowhere else."""
        with hold_end_lock(self.paths) as mine:
            if not mine:
                return "in_progress"
            if is_ended(self.paths, self.cfg.pod_id):
                return "ended"
            state = read_kept(self.paths)
            if state is None:
                return "ended"  # ended meanwhile (a sync that worked): nothing to stop
            synced = self._sync()
            if synced is not None:
                return self._finish(self.ending_of(state), synced)
            return self._stop(state)

    def _stop(self, state: KeptState) -> Outcome:
        reason = self.last_sync_error or "unknown"
        self.log.line(f"kept window over ({reason}): stopping pod {self.cfg.pod_id} through {self.cfg.provider}")
        try:
            result = self.destroyer().stop_self()
        except Exception as exc:
            refusal = self.log.scrub(str(exc) or type(exc).__name__)
            self.log.line(f"self-stop refused: {refusal}")
            text = (
                f"{KEPT_MESSAGE}; the kept window is over but the pod could not stop itself ({refusal}): it "
                "still bills. The watchdog stops it with the account key; " + GET_THEM.format(pod=self.cfg.pod_id)
            )
            event = event_body(self.cfg.pod_id, "stop_failed", text)
            self.client.deliver({**event, "kept_left_s": 0.0}, self.notify_budget_s)  # the watchdog's cue
            return "stop_failed"
        write_kept(self.paths, stopped(state, self.clock.now()))
        self.log.line(f"stop: {result}")
        text = (
            f"stopped after the kept window ({KEPT_MESSAGE}: {reason}): GPU billing ended; the disk with results/ "
            f"stays (and bills for its storage). {GET_THEM.format(pod=self.cfg.pod_id)}; "
            f"`gpuc down {self.cfg.pod_id} --force` destroys them"
        )
        self.client.deliver(event_body(self.cfg.pod_id, "kept_stopped", text), self.notify_budget_s)
        return "kept_stopped"

    def _kept_state(self, ending: Ending | None) -> KeptState:
        if ending is None:
            return KeptState(since=self.clock.now(), kind="job_exit", message="kept alive")
        return KeptState(
            since=self.clock.now(),
            kind=ending.kind,
            message=ending.message,
            exit_code=ending.exit_code,
            duration_s=ending.duration_s,
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


def span(seconds: float) -> str:
    """For the pod's sentences: 40 s, 12 min, 2 h 5 min."""
    if seconds < 59.5:
        return f"{max(0, round(seconds))} s"
    if seconds >= 3600:
        hours, rest = divmod(int(seconds) // 60, 60)
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    return f"{max(0, round(seconds / 60))} min"
