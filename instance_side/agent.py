"""The pod agent (layer 2 of docs/money.md, and the heartbeat half of its out-of-band layer).

`tick(now)` is one step: read -> decide -> heartbeat -> act -> log. `run_forever` only calls it and
sleeps, so tests drive hours of pod life with a FakeClock. Nothing one check does can end the loop:
an error is logged and the next check runs; only SIGTERM or the pod's end stop it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from gpuc.core.clock import Clock
from gpuc.core.warm import WARM_SAYS
from gpuc.instance_side.agentmemory import AgentMemory, memory_path
from gpuc.instance_side.deadline import DeadlineWatch, ends_pod
from gpuc.instance_side.ending import Ender, Ending, Outcome, span
from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.heartbeat import PodClient, event_body, heartbeat_body
from gpuc.instance_side.idle import (
    Action,
    IdleReading,
    IdleState,
    Observation,
    Thresholds,
    advance,
    judge,
    suspension,
)
from gpuc.instance_side.jobtree import JobScanError, read_job_stamp
from gpuc.instance_side.kept import ENDS_THE_WATCH
from gpuc.instance_side.keptwatch import KeptWatch
from gpuc.instance_side.manifest import ResultsSync
from gpuc.instance_side.observe import Observer, Probes
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, atomic_write, is_ended
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.pushrun import InlinePusher, Pusher, heartbeat_fields

# A millisecond of slack: a tick that wakes exactly one interval later counts as due.
_DUE_SLACK = 0.001


class Agent:
    def __init__(
        self,
        cfg: AgentConfig,
        paths: PodPaths,
        *,
        probes: Probes,
        client: PodClient,
        ender: Ender,
        sync: ResultsSync,
        clock: Clock,
        log: PodLog,
        pusher: Pusher | None = None,
    ) -> None:
        self.cfg = cfg
        self.paths = paths
        self.client = client
        self.ender = ender
        self.sync = sync
        self.clock = clock
        self.log = log
        self.pusher = pusher or InlinePusher(sync, paths, clock, settle_s=cfg.sync_settle_s)
        self.th = Thresholds.from_config(cfg)
        self._job_seen: bool | None = None  # a warm pod's idle watch: was a job there at the previous check
        self.state = IdleState()
        self.lease_until: float | None = None
        self.stopped = False
        self.next_check = 0.0
        self.next_heartbeat = 0.0
        self.next_sync: float | None = None
        # A pod kept for its results (an end's sync failed): retried, then stopped at its kept window (F16).
        self.kept = KeptWatch(ender, cfg, paths, clock)
        self.sync_failing = False
        self.deadline = DeadlineWatch.of(cfg, client, ender, log)  # F15: ends the pod whatever it is doing
        # The user's word from the phone, from a heartbeat answer: acted on once per intent_at.
        self.intent: tuple[str, float] | None = None
        self._obeyed: float | None = None
        self._last: tuple[Observation, IdleReading, IdleState, bool] | None = None  # for the next heartbeat
        self.observer = Observer(probes)

    # -- one step -----------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        if self.stopped or self._ended():
            return
        if self.next_sync is None and self.cfg.sync_interval_s > 0:  # 0: no periodic push
            self.next_sync = now + self.cfg.sync_interval_s
        self._push_finished()
        if now + _DUE_SLACK < self.next_check:
            self._heartbeat_if_due(now)  # a heartbeat interval shorter than the check interval
            if not self._deadline(now):
                self._obey(now)
            return
        self.next_check = now + self.cfg.idle_check_interval_s
        obs = self.observer.observe()
        self._warm_turn(obs)
        reading = judge(obs, now, self.th)
        keep = self.paths.keep_file.exists()
        preview, _ = advance(self.state, reading, now, self.th, suspension(keep, self.lease_until, now) is not None)
        self._last = (obs, reading, preview, keep)
        self._heartbeat_if_due(now)
        if self._deadline(now) or self._obey(now):  # after the answer: its deadline, or the phone's word
            return
        # The answer may have brought a lease (`gpuc keep`): decide with it, not before it.
        kept = suspension(keep, self.lease_until, now)
        self.state, action = advance(self.state, reading, now, self.th, kept is not None)
        self.log.line(self._summary(obs, reading, kept, action))
        if not self._hold_kept(now):
            self._act(action, now)
        self._periodic_sync(now)
        self._remember(now)

    def next_wake(self) -> float:
        wake = min(self.next_check, self.next_heartbeat)
        due = self.deadline.next_due()
        if due is not None and due > self.clock.now():
            wake = min(wake, due)
        if self.client.pending:
            wake = min(wake, max(self.client.next_attempt, self.clock.now()))
        return wake

    def _warm_turn(self, obs: Observation) -> None:
        """A warm pod (`up --warm`) is watched by its warm time between jobs and by the usual idle times while
        one runs (idle.Thresholds); its idle count starts again when a job starts or ends, so the warm time
        counts from the last job's end and a job's own quiet minutes never shorten it. A job whose tree could
        not be read counts as there (the longer of the two)."""
        if self.cfg.warm_s <= 0:
            return
        job = obs.job is not None or obs.job_error is not None
        if job == self._job_seen:
            return
        if self._job_seen is not None:
            self.state = IdleState()
        self._job_seen = job
        self.th = Thresholds.from_config(self.cfg, job=job)

    # -- heartbeats ---------------------------------------------------------------------------
    def _heartbeat_if_due(self, now: float) -> None:
        if self._last is not None and now + _DUE_SLACK >= self.next_heartbeat:
            self.next_heartbeat = now + self.cfg.heartbeat_interval_s
            self.client.queue_heartbeat(self._body(*self._last))
        answer = self.client.flush(now)
        if answer is not None:
            self.lease_until = answer.lease_until
            before = self.deadline.deadline_at
            self.deadline.adopt(answer.deadline_at)
            after = self.deadline.deadline_at
            if before is not None and after is not None and after < before:  # a budget's pull-in, say
                self.push_now("the watchdog set the deadline earlier")
            if answer.intent is not None and answer.intent_at is not None:
                self.intent = (answer.intent, answer.intent_at)

    def _body(self, obs: Observation, reading: IdleReading, state: IdleState, keep: bool) -> dict[str, Any]:
        gpu_error = obs.gpu_error or (self.observer.probes.gpu.note if not obs.gpus else None)
        return heartbeat_body(
            self.cfg.pod_id,
            gpus=[g.as_json() for g in obs.gpus[:16]],
            gpu_error=None if gpu_error is None else self.log.scrub(gpu_error)[:500],
            python_procs=obs.python_procs,
            active_ssh=reading.active_ssh,
            idle_minutes=round(state.idle_minutes, 2),
            busy_reason=None if reading.reason is None else self.log.scrub(reading.reason)[:200],
            job_running=self._job_running(obs),
            keep_file=keep,
            kept_left_s=self.kept.left(self.clock.now()),
            **heartbeat_fields(self.pusher.last(), self.clock.now()),
        )

    def _job_running(self, obs: Observation) -> bool:
        if obs.job is not None:
            return True  # the probe read its tree this check
        if obs.job_error is None:
            return False
        try:  # the tree could not be read: is the pid at least alive?
            stamp = read_job_stamp(self.paths.job)
        except JobScanError:
            return True  # a pid file that is there but unreadable is uncertain, so busy: never "no job"
        if stamp is None:
            return False
        try:
            os.kill(stamp[0], 0)
        except ProcessLookupError:
            return False
        except OSError:
            return True  # EPERM: it exists, under another user
        return True

    def _deadline(self, now: float) -> bool:
        """True when the deadline ended the pod: whatever the job, the GPU, ssh, .keep or a lease say. A pod
        kept for its results is the kept window's (kept.py; the watchdog stops it at its deadline, F16)."""
        if self.kept.left(now) is not None:
            return self.stopped
        warned = self.deadline.warned_for
        if ends_pod(self.deadline.step(now, self.cfg.pod_id)):
            self.stopped = True
        elif self.deadline.warned_for != warned:
            self.push_now("deadline warning")
        return self.stopped

    # -- acting on the decision ---------------------------------------------------------------
    def _act(self, action: Action, now: float) -> None:
        if action == "warn":
            self.client.queue_event(event_body(self.cfg.pod_id, "idle_warning", self._idle_warning()))
            self.client.flush(now)
            self.push_now("idle warning")
        elif action == "destroy":
            self._end_pod(Ending(kind="idle_destroy", message=self._idle_end()))

    def _warm_waiting(self) -> bool:
        """A warm pod between jobs: its idle watch is its warm time, and its words say so."""
        return self.cfg.warm_s > 0 and self._job_seen is False

    def _idle_warning(self) -> str:
        left = max(0.0, self.th.destroy_s - self.state.idle_s)
        if self._warm_waiting():
            pod = self.cfg.pod_id
            return (
                f"{WARM_SAYS} for {span(self.state.idle_s)} (--warm {span(self.cfg.warm_s)}): it syncs results/ "
                f"and ends itself in {span(left)} unless a job starts (`gpuc run {pod} --sync --wait -- CMD`; "
                f"`gpuc keep {pod} --for 2h` holds it)"
            )
        job = self._last[0].job if self._last is not None else None
        hung = "" if job is None else f" (the job, pid {job.pid}, made no CPU or I/O progress: hung?)"
        return (
            f"idle for {self.state.idle_minutes:.0f} min{hung}: destroying in {left / 60:.0f} min unless it "
            "gets busy (touch /workspace/.keep or gpuc keep POD --for 2h to keep it)"
        )

    def _idle_end(self) -> str:
        if self._warm_waiting():
            return f"{WARM_SAYS} for {span(self.state.idle_s)} (--warm {span(self.cfg.warm_s)})"
        return f"idle for {self.state.idle_minutes:.0f} min"

    def _end_pod(self, ending: Ending) -> None:
        """The idle watch's end: sync -> notify -> destroy. A failed sync keeps the pod, and from the next
        check `_hold_kept` holds it (as after a deadline end: the kept state is the Ender's, on the pod)."""
        outcome: Outcome = self.ender.end(ending)
        self.log.line(f"{ending.kind} end: {outcome}")
        if outcome in ("destroyed", "destroy_failed", "ended"):
            self.stopped = True

    def _hold_kept(self, now: float) -> bool:
        """True while the pod is kept for its results: its end is then the kept window's (kept.py), whoever
        holds it (this agent, or the wrapper's reminders), never the idle rule's."""
        outcome = self.kept.tick(now)
        if outcome is None:
            return False
        if outcome in ENDS_THE_WATCH:
            self.log.line(f"kept pod: {outcome}")
            self.stopped = outcome != "kept_alive"
            self.kept.release()
        return True

    def _obey(self, now: float) -> bool:
        """The user's word from the phone, exactly as the agent's own decision: "end" is the idle watch's
        ending (sync -> notify -> destroy, kept on a failed sync); "retry_sync" is the kept loop's retry,
        due now. True when the pod ended. A kept pod's end stays its kept window's ("destroy anyway" is
        the watchdog's)."""
        if self.intent is None:
            return False
        kind, at = self.intent
        self.intent = None
        if at == self._obeyed:
            return False  # said again until the watchdog hears the outcome: acted on once
        self._obeyed = at
        kept = self.kept.left(now) is not None
        if kind == "retry_sync" and kept:
            self.log.line("phone: retry the results sync now")
            self.kept.retry_now()
        elif kind == "end" and not kept:
            self.log.line("phone: end the pod now (sync first)")
            self._end_pod(Ending(kind="phone_destroy", message="destroy asked from the phone"))
        return self.stopped

    def _periodic_sync(self, now: float) -> None:
        """Push what changed in results/ during a long run (push.py): a destroy from outside (silence, the
        provider) then loses at most one interval, and a paused or stopped pod's disk is out of reach."""
        if self.stopped or self.next_sync is None or now + _DUE_SLACK < self.next_sync:
            return
        self.next_sync = now + self.cfg.sync_interval_s
        if self.paths.results.is_dir():
            self.pusher.start()
            self._push_finished()

    def push_now(self, why: str) -> None:
        """Once more, now: the pod was told it may go (a warning, an earlier deadline, a SIGTERM)."""
        if self.cfg.sync_interval_s <= 0 or not self.paths.results.is_dir():
            return
        self.log.line(f"results push now: {why}")
        self.pusher.start()
        self._push_finished()

    def _push_finished(self) -> None:
        report = self.pusher.finished()
        if report is None:
            return
        ok = report.error is None
        detail = self.log.scrub(report.summary())
        self.log.line(f"periodic results push {'ok' if ok else 'FAILED'}: {detail}")
        if not ok and not self.sync_failing:
            # On the transition only: the user hears once, not every interval.
            self.client.queue_event(
                event_body(self.cfg.pod_id, "sync_failed", f"periodic results push failed: {detail}", note="periodic")
            )
        self.sync_failing = not ok

    # -- what a restarted agent carries on from (the wrapper restarts a dead agent: wrapper.py) ------
    def _remember(self, now: float) -> None:
        memory = AgentMemory(
            pod_id=self.cfg.pod_id,
            saved_at=now,
            idle_s=self.state.idle_s,
            last_idle_check=self.state.last_idle_check,
            warned=self.state.warned,
            deadline_at=self.deadline.deadline_at,
            warned_for=self.deadline.warned_for,
            lease_until=self.lease_until,
            obeyed=self._obeyed,
            next_sync=self.next_sync,
            sync_failing=self.sync_failing,
        )
        try:
            atomic_write(memory_path(self.paths), json.dumps(asdict(memory)) + "\n", 0o600)
        except OSError as exc:
            self.log.line(f"could not save the agent's state ({exc.strerror or exc}); going on")

    def restore(self) -> bool:
        """Carry on from a previous agent of this pod (it died: OOM, a kill): its idle window, the deadline
        the watchdog last gave, the lease, the push schedule. The seq is on disk already (heartbeat.py).
        False when there is nothing to carry on from."""
        memory = AgentMemory.load(memory_path(self.paths))
        if memory is None or memory.pod_id != self.cfg.pod_id:
            return False
        self.state = IdleState(memory.idle_s, memory.last_idle_check, memory.warned)
        if memory.deadline_at is not None:
            self.deadline.deadline_at = memory.deadline_at
        self.deadline.warned_for = memory.warned_for
        self.lease_until = memory.lease_until
        self._obeyed = memory.obeyed
        self.next_sync = memory.next_sync if self.cfg.sync_interval_s > 0 else None
        self.sync_failing = memory.sync_failing
        return True

    # -- bookkeeping --------------------------------------------------------------------------
    def _ended(self) -> bool:
        if is_ended(self.paths, self.cfg.pod_id):
            self.log.line("pod ended: heartbeats stop, agent exits")
            self.stopped = True
        return self.stopped

    def _summary(self, obs: Observation, reading: IdleReading, kept: str | None, action: Action) -> str:
        gpus = ",".join(f"{g.index}:{_util(g)}" for g in obs.gpus) or ("err" if obs.gpu_error else "none")
        state = "idle" if reading.idle else "busy"
        parts = [
            f"check {state} idle={self.state.idle_minutes:.1f}min gpus={gpus} procs={_procs(obs, self.th)}",
            f"ssh={reading.active_ssh}/{len(obs.ssh)}",
            f"job={_job(obs)}",
            f"hb={'ok' if self.client.failures == 0 else f'retrying({self.client.failures})'}",
        ]
        if reading.reason:
            parts.append(f"reason={reading.reason}")
        if kept:
            parts.append(kept)
        if action != "none":
            parts.append(f"action={action}")
        return " ".join(parts)

    # -- the loop -----------------------------------------------------------------------------
    def start(self) -> None:
        reader = type(self.observer.probes.gpu).__name__
        self.log.line(f"agent started: pod {self.cfg.pod_id} ({self.cfg.provider}), gpu reader {reader}")
        if self.restore():
            idle = f"idle {self.state.idle_minutes:.1f} min" if self.state.last_idle_check is not None else "busy"
            self.log.line(f"agent restarted: carrying on from the previous agent's state ({idle})")
            self.client.queue_event(
                event_body(
                    self.cfg.pod_id,
                    "info",
                    "the pod's agent had died (out of memory, or killed) and was restarted; the job went on, "
                    "results pushes go on",
                )
            )
            return
        if self.cfg.notify_start:  # one push per run is noise on a phone unless asked (GPUC_NOTIFY_START=1)
            self.client.queue_event(
                event_body(self.cfg.pod_id, "agent_start", f"agent started (pid {os.getpid()}, {reader})")
            )

    def run_forever(self, should_stop: Callable[[], bool]) -> None:
        self.start()
        while not should_stop() and not self.stopped:
            now = self.clock.now()
            try:
                self.tick(now)
                wake = self.next_wake()
            except Exception as exc:
                self.log.line(f"check failed, going on: {type(exc).__name__}: {self.log.scrub(str(exc))}")
                wake = now + self.cfg.idle_check_interval_s
            self._sleep_until(max(wake, now + 0.05), should_stop)
        self.log.line("agent stopped")

    def _sleep_until(self, wake: float, should_stop: Callable[[], bool]) -> None:
        # Short naps so SIGTERM is honoured within a second; at one wake-up a second the cost is
        # microseconds per minute.
        while not should_stop():
            left = wake - self.clock.now()
            if left <= 0:
                return
            self.clock.sleep(min(1.0, left))


def _job(obs: Observation) -> str:
    if obs.job_error is not None:
        return "err"
    if obs.job is None:
        return "none"
    job = obs.job
    return f"{job.pid}:new" if job.first else f"{job.pid}:+{job.cpu_ticks}t+{job.io_bytes}B"


def _procs(obs: Observation, th: Thresholds) -> str:
    """The user's process trees outside the job: "busy/all"."""
    if obs.probe_error is not None and not obs.procs:
        return "err"
    return f"{sum(1 for t in obs.procs if t.progressing(th))}/{len(obs.procs)}"


def _util(gpu: GpuSample) -> str:
    if gpu.error:
        return "err"
    return "?" if gpu.utilization_pct is None else f"{gpu.utilization_pct:.0f}%"
