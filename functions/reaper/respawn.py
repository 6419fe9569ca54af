"""Carrying out a recovery decision (functions/reaper/recover.py) against a provider.

One pass of one recovering run: read the latest attempt twice, decide, act. The acts are the money-critical
ones and keep the house rules:
- the paused instance is destroyed and CONFIRMED gone (the provider's destroy reads it back) before anything
  is rented: a destroy that cannot be confirmed rents nothing (two instances never bill at once);
- the next attempt is the same run: the same run id (so the same pod name, the ledger's one row), image,
  settings and env, on the chosen offer with the run's own bid (never a bid without a price), and
  GPUC_RESUME_FROM naming the last push so the job starts from it;
- a stop destroys the paused instance too and says why and what was kept.
What is NOT built: the watchdog's own schedule calling `recover_pass` (the reaper's sweep does not yet list
recovering runs), and booting the new pod with no laptop (Vast's onstart fetching the kept code bundle):
the drill (testkit/drill_spot.py) plays the boot. Said in docs/interruptible.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuc.core.budget import Attempt
from gpuc.core.errors import GpucError
from gpuc.core.models import PodSpec
from gpuc.core.pod import RESUME_ENV
from gpuc.core.providers.base import Provider
from gpuc.functions.reaper.recover import Decision, Offer, Reading, RecoveryPlan, decide, progress_text, stop_text

_READING: dict[str, Reading] = {
    "running": "running",
    "provisioning": "provisioning",
    "paused": "paused",
    "exited": "exited",
}


@dataclass
class RecoveringRun:
    """The watchdog's record of one run rented with --recover N."""

    plan: RecoveryPlan
    spec: PodSpec  # the first attempt's, whose image/settings every attempt keeps
    results_at: str  # where the pod pushes (GPUC_RESUME_FROM for the next attempt)
    pod_ids: list[str]
    attempts: list[Attempt]
    paused_since: float | None = None
    stop_asked: bool = False  # the phone's one tap
    told: list[str] = field(default_factory=list)  # what the user heard
    done: bool = False


def read_twice(provider: Provider, pod_id: str) -> tuple[Reading, bool]:
    first, second = provider.get(pod_id), provider.get(pod_id)
    a = "gone" if first is None else _READING.get(first.status, "unknown")
    b = "gone" if second is None else _READING.get(second.status, "unknown")
    return a, a == b


def offers_for(provider: Provider, run: RecoveringRun) -> list[Offer]:
    """Offers matching the run's GPU: bids at the run's own price cap where the host takes it; on-demand
    ones only for --recover-on-demand."""
    spec, plan = run.spec, run.plan
    found = [
        Offer(o.id, plan.price_cap, interruptible=True)
        for o in provider.offers(spec.gpu_type, True)
        if o.min_bid is not None and o.min_bid * spec.gpu_count <= plan.price_cap
    ]
    if plan.on_demand_last:
        found += [Offer(o.id, o.price_per_hour, False) for o in provider.offers(spec.gpu_type, False)]
    return found


def recover_pass(
    provider: Provider, run: RecoveringRun, now: float, wait_s: float, budget_left_usd: float | None = None
) -> Decision:
    if run.done:
        return Decision("none", "recovery over")
    pod_id = run.pod_ids[-1]
    reading, confirmed = read_twice(provider, pod_id)
    _note_pause(run, reading, confirmed, now)
    paused_for = 0.0 if run.paused_since is None else now - run.paused_since
    offers = offers_for(provider, run) if reading == "paused" and paused_for >= wait_s else []
    decision = decide(
        run.plan, run.attempts, reading, confirmed=confirmed, paused_for_s=paused_for, wait_s=wait_s, now=now,
        offers=offers, stop_asked=run.stop_asked, budget_left_usd=budget_left_usd,
    )  # fmt: skip
    if decision.action == "rerent" and decision.offer is not None:
        _rerent(provider, run, decision.offer, now)
    elif decision.action == "stop":
        provider.destroy(pod_id)  # confirmed gone, or it raises and the next pass tries again
        run.attempts[-1] = replace(run.attempts[-1], end=now)
        run.told.append(stop_text(decision, run.results_at))
        run.done = True
    return decision


def _note_pause(run: RecoveringRun, reading: Reading, confirmed: bool, now: float) -> None:
    last = run.attempts[-1]
    if reading == "paused" and confirmed and run.paused_since is None:
        run.paused_since = now
        run.attempts[-1] = replace(last, paused_at=now)
    elif reading == "running" and confirmed and run.paused_since is not None:
        # Resumed: the GPU bills again. The pause is kept out of the figure conservatively (counted as
        # billed), never under-counted.
        run.paused_since = None
        run.attempts[-1] = replace(last, paused_at=None)


def _rerent(provider: Provider, run: RecoveringRun, offer: Offer, now: float) -> None:
    provider.destroy(run.pod_ids[-1])  # raises unless confirmed gone: then nothing is rented this pass
    run.attempts[-1] = replace(run.attempts[-1], end=now)
    run.told.append(progress_text(run.plan, run.attempts, now))
    per_gpu = offer.price_per_hour / run.spec.gpu_count
    spec = run.spec.model_copy(
        update={
            "offer_id": offer.id,
            "interruptible": offer.interruptible,
            "bid_per_gpu": per_gpu if offer.interruptible else None,
            "price_per_hour": None if offer.interruptible else offer.price_per_hour,
            "env": {**run.spec.env, RESUME_ENV: run.results_at},
        }
    )
    try:
        pod = provider.create(spec)
    except GpucError as exc:
        # The paused one is gone (confirmed) and nothing new bills: recovery ends here, said, not retried
        # blindly (a create that may have happened is create_once's to find, by the run's name).
        run.told.append(
            f"recovery stopped: the re-rent failed ({exc}); the last results pushed are kept at {run.results_at}"
        )
        run.done = True
        return
    run.pod_ids.append(pod.id)
    run.attempts.append(Attempt(now, offer.price_per_hour, run.plan.disk_per_hour))
    run.paused_since = None
