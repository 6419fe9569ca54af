"""The pod's own deadline (F15 in docs/failure-matrix.md): at `up --max-hours` the pod ends,
whatever its job, GPU or ssh say.

The agent knows the deadline from its config (`up` writes it) and adopts the watchdog's word from every
heartbeat answer: later after `gpuc extend`, earlier after a budget pulls it in. When the watchdog cannot be
reached the last known value holds; an absurd one (outside 2020..2100) is never taken (heartbeat.py).

`warn_s` ahead it notifies once (per deadline value: an extension warns again); `lead_s` ahead it ends the
pod through the same Ender as the job's end (sync -> notify -> destroy). The lead lets the sync finish
before the watchdog's own backstop, which ends the pod at the deadline itself. A failed sync keeps the pod
for its results: from then on it is the kept window's (kept.py), and the watchdog STOPS it at the deadline,
never destroys it (GPU billing ends, the disk with results/ stays: functions/reaper/rules.py's kept gate).
Neither `.keep` nor a lease suspends the deadline: both are for the idle watch.

The deadline is kept on the watchdog's clock and compared on the pod's: local = deadline - offset, where
the offset is what the heartbeat client learnt of the functions' time (a pod clock minutes off must not
end the pod minutes early or late).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuc.core.clock import iso
from gpuc.instance_side.ending import Ender, Ending, Outcome
from gpuc.instance_side.heartbeat import PodClient, event_body
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.podlog import PodLog

FINAL: tuple[Outcome, ...] = ("destroyed", "destroy_failed", "ended")  # the agent's work is over


@dataclass
class DeadlineWatch:
    cfg: AgentConfig
    client: PodClient
    ender: Ender
    log: PodLog
    deadline_at: float | None = None  # on the watchdog's clock
    warned_for: float | None = None  # the deadline value the warning went out for
    blocked_at: float | None = None  # an ending kept the pod (sync failed): retried at the nag interval

    @classmethod
    def of(cls, cfg: AgentConfig, client: PodClient, ender: Ender, log: PodLog) -> DeadlineWatch:
        return cls(cfg, client, ender, log, deadline_at=cfg.deadline_at)

    def adopt(self, deadline_at: float | None) -> None:
        """The watchdog's word, from a heartbeat answer; None (no word) keeps what is known."""
        if deadline_at is None or deadline_at == self.deadline_at:
            return
        self.log.line(f"deadline: the watchdog says {iso(deadline_at)} (was {iso(self.deadline_at) or 'none'})")
        self.deadline_at = deadline_at
        self.blocked_at = None  # a new deadline: a new attempt at it

    def local(self) -> float | None:
        return None if self.deadline_at is None else self.deadline_at - self.client.signer.offset_s

    def next_due(self) -> float | None:
        """When the next warning or ending falls due (pod clock), for the agent's sleep."""
        at = self.local()
        if at is None:
            return None
        warn: float = self.cfg.deadline_warn_s
        lead: float = self.cfg.deadline_lead_s
        if self.warned_for != self.deadline_at:
            return at - max(warn, lead)
        return at - lead

    def step(self, now: float, pod_id: str) -> Outcome | None:
        """Warn or end when due; the ending's outcome when one was attempted."""
        at = self.local()
        if at is None:
            return None
        if now >= at - self.cfg.deadline_lead_s:
            return self._end(now)
        if now >= at - self.cfg.deadline_warn_s and self.warned_for != self.deadline_at:
            self.warned_for = self.deadline_at
            left = max(0.0, at - now) / 60
            self.client.queue_event(
                event_body(
                    pod_id,
                    "deadline_warning",
                    f"deadline {iso(self.deadline_at)} in {left:.0f} min ({self._which()}): the pod syncs results/ "
                    "and is destroyed then (stopped instead if the sync fails), whatever its job is doing; "
                    f"`gpuc extend {pod_id} 2h` moves it",
                )
            )
            self.client.flush(now)
        return None

    def _which(self) -> str:
        # A warm pod's deadline follows its jobs (each `gpuc run` moves it), unless --max-hours fixed it.
        return "the warm pod's deadline" if self.cfg.warm_s > 0 else "--max-hours"

    def _end(self, now: float) -> Outcome | None:
        if self.blocked_at is not None and now - self.blocked_at < self.cfg.nag_interval_s:
            return None
        # lead_s early, so the sync is done before the watchdog's backstop: say so, not "reached".
        left = max(0.0, (self.local() or now) - now)
        ending = Ending(
            kind="deadline_destroy",
            message=f"deadline {iso(self.deadline_at)} ({self._which()}) in {left / 60:.0f} min: ending now,"
            " results/ first",
        )
        outcome = self.ender.end(ending)
        self.log.line(f"deadline end: {outcome}")
        # Kept (sync failed, KEEP_ALIVE): try again at the nag interval; the watchdog STOPS it at the
        # deadline all the same (a kept pod is never destroyed unasked). Another process ending it
        # ("in_progress"): look again next check.
        self.blocked_at = None if outcome in (*FINAL, "in_progress") else now
        return outcome


def ends_pod(outcome: Outcome | None) -> bool:
    return outcome in FINAL
