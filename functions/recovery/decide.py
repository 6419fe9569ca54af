"""Recovery of an outbid interruptible run: the watchdog's choice, as pure rules.

The watchdog recovers, not the laptop (it may be closed). For a run rented with `--recover N`, on each pass
it reads the pod's state twice (as every reaper rule does) and asks `decide`:

- running, provisioning, or read once only: nothing (no action on an uncertain reading);
- the job ended (its exit code, zero or not): never a re-rent. Preemptions and errors are counted apart:
  a job that fails is not retried (SkyPilot's max_restarts_on_errors counts these; we do not re-run them);
- paused (outbid) for less than GPUC_RECOVER_WAIT_S: wait for the bid to win again (Vast resumes it);
- paused longer: stop recovering when any bound says so (the user's tap, N recoveries used, the deadline,
  the envelope, the budget, no offer within the price cap), else destroy it (confirmed gone) and rent the
  next offer. With `--recover-on-demand` the last recovery rents on-demand when the envelope allows.

A stop destroys the paused instance too: its results were pushed while it ran (the incremental push), and
a paused instance bills its disk for nothing. A webhook (`client:outbid`) only makes the watchdog look
sooner (functions/recovery/webhook.py); it never decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpuc.core.api import AttemptRecord
from gpuc.core.budget import Envelope, attempt_fits, run_spent, usd

Action = Literal["none", "wait", "rerent", "stop"]
Reading = Literal["running", "provisioning", "paused", "exited", "gone", "unknown"]


@dataclass(frozen=True)
class RecoveryPlan:
    """What `up --interruptible --recover N` asked, recorded with the run."""

    recover: int  # recoveries allowed (0: today's behaviour, the paused pod is reaped, no re-rent)
    envelope: Envelope
    price_cap: float  # per machine-hour: no re-rent above it (the first attempt's bid)
    disk_per_hour: float
    on_demand_last: bool = False  # --recover-on-demand


@dataclass(frozen=True)
class Offer:
    id: str
    price_per_hour: float  # for the whole machine: the bid to send (interruptible) or the on-demand price
    interruptible: bool
    min_bid: float | None = None  # the machine's floor for a bid, as listed (re-checked before the create)


@dataclass(frozen=True)
class Decision:
    action: Action
    why: str
    offer: Offer | None = None

    def __str__(self) -> str:
        return f"{self.action}: {self.why}"


def decide(
    plan: RecoveryPlan,
    attempts: Sequence[AttemptRecord],
    reading: Reading,
    *,
    confirmed: bool,
    paused_for_s: float,
    wait_s: float,
    now: float,
    offers: Sequence[Offer] = (),
    stop_asked: bool = False,
    budget_left_usd: float | None = None,
) -> Decision:
    """The next step for a run whose latest attempt reads `reading` (`confirmed`: the same twice)."""
    if reading != "paused":
        if reading == "exited":
            return Decision("none", "the job ended: an exit, zero or not, is never recovered")
        return Decision("none", f"the pod is {reading}")
    if not confirmed:
        return Decision("none", "paused in one reading only: read again before acting")
    if plan.recover <= 0:
        return Decision("none", "no recovery asked (--recover 0): the paused-pod rule reaps it")
    used = len(attempts) - 1
    if stop_asked:
        return Decision("stop", "you stopped the recovery")
    if paused_for_s < wait_s:
        return Decision("wait", f"outbid {paused_for_s:.0f} s ago: waiting up to {wait_s:.0f} s to resume")
    if used >= plan.recover:
        return Decision("stop", f"outbid again after {used} of {plan.recover} recoveries")
    return _next_attempt(plan, attempts, now, offers, budget_left_usd, last=used + 1 == plan.recover)


def _next_attempt(
    plan: RecoveryPlan,
    attempts: Sequence[AttemptRecord],
    now: float,
    offers: Sequence[Offer],
    budget_left_usd: float | None,
    *,
    last: bool,
) -> Decision:
    env = plan.envelope
    if env.hours_left(now) <= 0:
        return Decision("stop", "the run's deadline (from its first attempt) has passed")
    usable = [o for o in offers if o.interruptible and o.price_per_hour <= plan.price_cap]
    if plan.on_demand_last and last:
        # The ladder's last rung: on-demand cannot be outbid; only if the envelope holds its price.
        fitting = [o for o in offers if not o.interruptible and _fits(plan, attempts, o, now)]
        usable = fitting or usable
    if not usable:
        return Decision("stop", f"no offer at or under your price cap ({usd(plan.price_cap)}/h)")
    offer = min(usable, key=lambda o: o.price_per_hour)
    if not _fits(plan, attempts, offer, now):
        worst = run_spent(attempts, now) + (offer.price_per_hour + plan.disk_per_hour) * env.hours_left(now)
        return Decision(
            "stop", f"the next attempt's worst case {usd(worst)} would pass the envelope {usd(env.cap_usd)}"
        )
    if budget_left_usd is not None:
        worst_next = (offer.price_per_hour + plan.disk_per_hour) * env.hours_left(now)
        if worst_next > budget_left_usd:
            return Decision("stop", f"the next attempt's worst case {usd(worst_next)} would cross the budget")
    return Decision("rerent", f"attempt {len(attempts) + 1} of {plan.recover + 1}", offer)


def _fits(plan: RecoveryPlan, attempts: Sequence[AttemptRecord], offer: Offer, now: float) -> bool:
    return attempt_fits(attempts, offer.price_per_hour, plan.disk_per_hour, plan.envelope, now)


def progress_text(plan: RecoveryPlan, attempts: Sequence[AttemptRecord], now: float) -> str:
    """What the phone hears at a re-rent: 'outbid: recovering, attempt 2 of 3, $0.31 spent of $2.40'."""
    spent = run_spent(attempts, now)
    return (
        f"outbid: recovering, attempt {len(attempts) + 1} of {plan.recover + 1}, "
        f"{usd(spent)} spent of {usd(plan.envelope.cap_usd)}"
    )


def stop_text(decision: Decision, results: str | None) -> str:
    """What the user is told when recovery stops: why, and what was kept."""
    kept = f"the last results pushed are kept at {results}" if results else "no results were pushed"
    return f"recovery stopped: {decision.why}; the paused instance is destroyed; {kept}"
