"""Carrying out a recovery decision (functions/reaper/recover.py) against a provider.

One pass of one recovering run: read the latest attempt twice, decide, act. The acts are the money-critical
ones and keep the house rules:
- the paused instance is destroyed and CONFIRMED gone (the provider's destroy reads it back) before anything
  is rented: a destroy that cannot be confirmed rents nothing (two instances never bill at once);
- the next attempt is the same run (its GPUC_RUN_ID, so the same results destination; the ledger's one row),
  image, settings and env, on the chosen offer with the run's own bid (never a bid without a price), and
  GPUC_RESUME_FROM naming the last push so the job starts from it. Its pod is NAMED for its attempt
  (functions/runs.py attempt_run_id): the previous attempt is still listed just after its destroy, and a
  create looks its pod up by name before and after an unclear answer;
- a stop destroys the paused instance too and says why and what was kept.

`look` and the pieces of an act are shared: the watchdog's reaper runs them against the run it keeps in its
store, with a compare-and-set claim before any provider call (functions/reaper/recovering.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from gpuc.core.budget import Attempt
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider
from gpuc.functions.reaper.recover import Decision, Offer, Reading, RecoveryPlan, decide
from gpuc.functions.runs import attempt_run_id

_READING: dict[str, Reading] = {
    "running": "running",
    "provisioning": "provisioning",
    "paused": "paused",
    "exited": "exited",
}


@dataclass
class RecoveringRun:
    """One run rented with --recover N, as a pass works on it."""

    plan: RecoveryPlan
    spec: PodSpec  # the first attempt's, whose image/settings every attempt keeps
    results_at: str  # where the pod pushes (GPUC_RESUME_FROM for the next attempt)
    pod_ids: list[str]
    attempts: list[Attempt]
    paused_since: float | None = None
    stop_asked: bool = False  # the phone's one tap
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


def look(
    provider: Provider, run: RecoveringRun, now: float, wait_s: float, budget_left_usd: float | None = None
) -> tuple[Decision, Reading, bool]:
    """Read the latest attempt twice, note a pause (on `run`), decide. No provider write."""
    if run.done:
        return Decision("none", "recovery over"), "unknown", False
    reading, confirmed = read_twice(provider, run.pod_ids[-1])
    note_pause(run, reading, confirmed, now)
    paused_for = 0.0 if run.paused_since is None else now - run.paused_since
    offers = offers_for(provider, run) if reading == "paused" and paused_for >= wait_s else []
    decision = decide(
        run.plan, run.attempts, reading, confirmed=confirmed, paused_for_s=paused_for, wait_s=wait_s, now=now,
        offers=offers, stop_asked=run.stop_asked, budget_left_usd=budget_left_usd,
    )  # fmt: skip
    return decision, reading, confirmed


def note_pause(run: RecoveringRun, reading: Reading, confirmed: bool, now: float) -> None:
    last = run.attempts[-1]
    if reading == "paused" and confirmed and run.paused_since is None:
        run.paused_since = now
        run.attempts[-1] = replace(last, paused_at=now)
    elif reading == "running" and confirmed and run.paused_since is not None:
        # Resumed: the GPU bills again. The pause is kept out of the figure conservatively (counted as
        # billed), never under-counted.
        run.paused_since = None
        run.attempts[-1] = replace(last, paused_at=None)


def attempt_spec(
    spec: PodSpec, offer: Offer, attempt: int, env: Mapping[str, str], onstart: str | None = None
) -> PodSpec:
    """The spec of attempt `attempt` (2 and up): the first one's, on `offer`, named for its attempt."""
    per_gpu = offer.price_per_hour / spec.gpu_count
    return spec.model_copy(
        update={
            "run_id": attempt_run_id(spec.run_id, attempt),
            "offer_id": offer.id,
            "interruptible": offer.interruptible,
            "bid_per_gpu": per_gpu if offer.interruptible else None,
            "price_per_hour": None if offer.interruptible else offer.price_per_hour,
            "env": {**spec.env, **env},
            "onstart": onstart if onstart is not None else spec.onstart,
        }
    )


def create_attempt(provider: Provider, spec: PodSpec) -> Pod:
    """Create the attempt's pod, never twice: a pass that died after its create (its claim then passed to
    this one) left the pod listed under the attempt's own name: that one is taken, nothing rented again.
    A lookup that fails raises: not knowing is never a reason to rent."""
    found = provider.find_by_name(spec.name)
    if found is not None:
        return found
    return provider.create(spec)
