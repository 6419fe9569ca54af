"""Carrying out a recovery decision (functions/recovery/decide.py) against a provider.

One pass of one recovering run: read the latest attempt twice, decide, act. The acts are the money-critical
ones and keep the house rules:
- the paused instance is destroyed and CONFIRMED gone (the provider's destroy reads it back) before anything
  is rented: a destroy that cannot be confirmed rents nothing (two instances never bill at once);
- the next attempt is the same run (its GPUC_RUN_ID, so the same results destination; the ledger's one row),
  image, settings and env, on the chosen offer with the run's own bid (never a bid without a price), and
  GPUC_RESUME_FROM naming the last push so the job starts from it. Its pod is NAMED for its attempt
  (functions/recovery/runs.py attempt_run_id): the previous attempt is still listed just after its destroy, and a
  create looks its pod up by name before and after an unclear answer;
- a stop destroys the paused instance too and says why and what was kept.

`look` and the pieces of an act are shared: the watchdog's reaper runs them against the run it keeps in its
store, with a compare-and-set claim before any provider call (functions/recovery/rerent.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuc.core.models import Offer as ProviderOffer
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider
from gpuc.core.providers.vast import VastProvider
from gpuc.functions.recovery.decide import Decision, Offer, Reading, decide
from gpuc.functions.recovery.runs import StoredRun, attempt_run_id

_READING: dict[str, Reading] = {
    "running": "running",
    "provisioning": "provisioning",
    "paused": "paused",
    "exited": "exited",
}


def read_twice(provider: Provider, pod_id: str) -> tuple[Reading, bool, bool]:
    """(the reading, whether both reads agree, whether a paused pod's GPU still bills)."""
    first, second = provider.get(pod_id), provider.get(pod_id)
    a = "gone" if first is None else _READING.get(first.status, "unknown")
    b = "gone" if second is None else _READING.get(second.status, "unknown")
    return a, a == b, gpu_bills(first) or gpu_bills(second)


def gpu_bills(pod: Pod | None) -> bool:
    """A pod read as paused whose GPU still bills: Vast's `frozen` ("GPU charges apply": vast-ai/docs
    manage-instances.mdx), which core/providers/vast.py maps to paused with its actual_status first in
    raw_status. Either read saying so counts: a bill is never left out on one reading."""
    return pod is not None and pod.status == "paused" and pod.raw_status.split("/", 1)[0] == "frozen"


def offers_for(provider: Provider, run: StoredRun) -> list[Offer]:
    """The run's own machine again: its GPU type and COUNT under the filters `up` rented with (the provider's
    defaults), bid as `up` bid: the run's bid per GPU x its GPUs, which is the price cap (for the whole
    machine). An offer whose floor (`min_bid`, for the whole machine: what the create's `price` is held to)
    is above the cap is left out, and so is one of another GPU count (a search that ignored num_gpus): a
    2-GPU run is never re-rented on one GPU at the 2-GPU bid. On-demand ones only for --recover-on-demand."""
    spec, plan = run.request.spec, run.plan
    found = [
        Offer(o.id, plan.price_cap, interruptible=True, min_bid=o.min_bid)
        for o in same_machine(provider, spec, interruptible=True)
        if o.min_bid is not None and o.min_bid <= plan.price_cap
    ]
    if plan.on_demand_last:
        found += [Offer(o.id, o.price_per_hour, False) for o in same_machine(provider, spec, interruptible=False)]
    return found


def same_machine(provider: Provider, spec: PodSpec, *, interruptible: bool) -> list[ProviderOffer]:
    """What `up` searched for this spec (client/pods/plan.py `_listed`): the GPU type and count."""
    if isinstance(provider, VastProvider):
        listed = provider.offers(spec.gpu_type, interruptible, num_gpus=spec.gpu_count)
    else:
        listed = provider.offers(spec.gpu_type, interruptible)
    return [o for o in listed if o.gpu_count == spec.gpu_count]


def recheck(provider: Provider, run: StoredRun, chosen: Offer) -> Offer | None:
    """The offer as listed NOW, just before the create (a pass that took over a claim may come minutes after
    the choice, and a floor moves): the same one if its floor is still within the cap, else the cheapest other
    that is, else None (nothing is rented)."""
    fresh = [o for o in offers_for(provider, run) if o.interruptible == chosen.interruptible]
    if not chosen.interruptible:
        fresh = [o for o in fresh if o.price_per_hour <= chosen.price_per_hour]  # the envelope was weighed at it
    same = [o for o in fresh if o.id == chosen.id]
    return next(iter(same or fresh), None)


def look(
    provider: Provider, run: StoredRun, now: float, wait_s: float, budget_left_usd: float | None = None
) -> tuple[Decision, Reading, bool]:
    """Read the latest attempt twice, note a pause (on `run`: the caller's copy of the stored run, which the claim
    then writes), decide. No provider write."""
    if run.done:
        return Decision("none", "recovery over"), "unknown", False
    reading, confirmed, billing = read_twice(provider, run.latest.pod_id)
    note_pause(run, reading, confirmed, now, gpu_billed=billing)
    paused_for = 0.0 if run.paused_since is None else now - run.paused_since
    offers = offers_for(provider, run) if reading == "paused" and paused_for >= wait_s else []
    decision = decide(
        run.plan,
        run.attempts,
        reading,
        confirmed=confirmed,
        paused_for_s=paused_for,
        wait_s=wait_s,
        now=now,
        offers=offers,
        stop_asked=run.stop_asked,
        budget_left_usd=budget_left_usd,
    )
    return decision, reading, confirmed


def note_pause(run: StoredRun, reading: Reading, confirmed: bool, now: float, *, gpu_billed: bool = False) -> None:
    """The pause starts the recovery's wait; the attempt's GPU stops billing at it, unless the pod is frozen
    (its GPU bills on: the envelope and the ledger count it as running, whatever the wait decides)."""
    last = run.attempts[-1]
    if reading == "paused" and confirmed and run.paused_since is None:
        run.paused_since = now
        run.attempts[-1] = last.model_copy(update={"paused_at": None if gpu_billed else now})
    elif reading == "paused" and gpu_billed and last.paused_at is not None:
        # Frozen since: billed from the pause on, never less.
        run.attempts[-1] = last.model_copy(update={"paused_at": None})
    elif reading == "running" and confirmed and run.paused_since is not None:
        # Resumed: the GPU bills again. The pause is kept out of the figure conservatively (counted as
        # billed), never under-counted.
        run.paused_since = None
        run.attempts[-1] = last.model_copy(update={"paused_at": None})


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
