"""The month's budget, watched by the reaper: GPUC_MONTHLY_BUDGET from the watchdog's own settings (the .env
of `gpuc watchdog serve`; on AWS, the reaper function's environment, set by `gpuc watchdog deploy`).

The watchdog has no ledger: the month's spend comes from the store's records (core/budget.py: price x the
part of [started_at, end_at or now] inside this UTC month). A record without a price is unknown, named in
the alert, never counted as $0.

- At budget_alert_fraction of the budget: one alert, nagged, one all-clear (the reaper's run_problem).
- Once the month would cross the budget (core/budget.py's one rule, the one `up` refuses by: the month's spend
  plus every pod still running or kept at its worst case to its deadline), every running pod's deadline is
  pulled in to min(its deadline, max(when the month reaches the budget if they all run on, now +
  budget_pull_in_s)), in one warning that names the pods, their new end and how to push one out. At 100 %
  spent that is now + budget_pull_in_s. Once per pod and month
  (`budget_pulled_at`): a later `gpuc keep POD --for 2h` is the user's act, and the next pass leaves it.
  The deadline itself is enforced by the pod's agent (sync first) and by the reaper's deadline rule.

Never in a dry run; never on a pod the provider does not show as gpuc's and running (a stopped pod kept for
its results is not ended by a budget); never a reason for the pass to fail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from gpuc.core.budget import Outlook, ahead_of, outlook, records_burns, spend_text, usd
from gpuc.core.clock import iso
from gpuc.core.ledger.months import current_month, month_window
from gpuc.core.notify.message import counted
from gpuc.core.pod import Pod
from gpuc.functions.app import announce
from gpuc.functions.deadline import deadline_of
from gpuc.functions.reaper.alerts import run_problem
from gpuc.functions.reaper.state import Pass
from gpuc.functions.store import MARKABLE_STATES, StoredPod

log = logging.getLogger("gpuc.reaper")

BILLING_STATUSES = ("running", "provisioning", "exited")  # a pod the budget ends (exited: RunPod restarts it)
KEY = "budget"


def watch_budget(run: Pass, pods: Mapping[str, Pod]) -> None:
    """One pass's look at the month's budget; `pods` are the live pods the providers showed this pass."""
    budget = run.deps.settings.monthly_budget
    if budget is None:
        return
    try:
        # Every record, destroyed ones and those on a provider unread this pass included: the month's spend is
        # the store's, not this pass's sight (leaving any out, the budget would never reach 100 %).
        records = run.deps.store.list_pods()
        ahead = month_ahead(run, records, pods)
        alert_budget(run, ahead.spend.total_usd / budget, spend_text(ahead.spend, budget))
        runs_out = ahead.runs_out_at(budget)
        if runs_out is not None:
            target = max(runs_out, run.now + run.deps.settings.budget_pull_in_s)
            pull_in(run, records, pods, target, ahead.text(budget))
    except Exception as exc:  # the budget is a guard on top: it never costs the pass its destroys' record
        log.error("reaper: budget check failed: %s", type(exc).__name__)


def month_ahead(run: Pass, records: Sequence[StoredPod], pods: Mapping[str, Pod]) -> Outlook:
    """core.budget's one rule, as `up` weighs it: the month's spend plus every pod still running or kept at
    its worst case (to its deadline; a stopped kept pod, its disk to the month's end)."""
    ahead = []
    for rec in records:
        pod = pods.get(rec.pod_id)
        one = ahead_of(
            rec,
            deadline=deadline_of(rec, run.deps.settings),
            kept=rec.kept_at is not None,
            pod=pod,
            now=run.now,
            movable=may_pull(run, rec, pod),
        )
        if one is not None:
            ahead.append(one)
    return outlook(records_burns(records), ahead, run.now)


def alert_budget(run: Pass, fraction: float, spent: str) -> None:
    settings = run.deps.settings
    line = settings.budget_alert_fraction
    over = fraction >= 1.0
    pull = f"{settings.budget_pull_in_s / 60:.0f} min"
    then = (
        f"Every running pod's deadline is pulled in to at most {pull} from now (a separate message names them)."
        if over
        else "Once the running pods' worst case would cross the budget, gpuc pulls their deadlines in to when the "
        f"month would reach it (at least {pull} ahead; results synced first), and `gpuc up` refuses a pod whose "
        "worst case would cross it."
    )
    run_problem(
        run,
        KEY,
        fraction >= line,
        title=f"gpuc: the month's budget is {'SPENT' if over else f'{100 * fraction:.0f} % spent'}",
        message=f"{spent}. {then} Raise GPUC_MONTHLY_BUDGET (on the watchdog too) to allow more.",
        clear_title=f"gpuc: the month's spend is under {100 * line:.0f} % of the budget again",
        detail="100 %" if over else f"{100 * line:.0f} %",  # crossing 100 % is news, not a nag
        level="error" if over else "warning",
    )


def pull_in(run: Pass, records: Sequence[StoredPod], pods: Mapping[str, Pod], target: float, spent: str) -> None:
    """Every pod the watchdog may pull in ends by `target` at the latest: when the month reaches the budget
    if they all run on, never sooner than budget_pull_in_s from now (time to sync)."""
    pulled: list[tuple[StoredPod, float]] = []
    for rec in records:
        if not may_pull(run, rec, pods.get(rec.pod_id)):
            continue
        new = target if rec.deadline_at is None else min(rec.deadline_at, target)
        if run.dry_run:
            run.act(rec.pod_id, rec.provider, "warn", f"budget: deadline would be pulled in to {iso(new)}")
            continue
        # The CAS on both fields: a `gpuc keep` (or another pass) that lands between our read and this write wins.
        expect = {"deadline_at": rec.deadline_at, "budget_pulled_at": rec.budget_pulled_at}
        if run.deps.store.update_if(rec.pod_id, expect, {"deadline_at": new, "budget_pulled_at": run.now}):
            run.act(rec.pod_id, rec.provider, "warn", f"budget: deadline pulled in to {iso(new)}")
            pulled.append((rec, new))
    if pulled:
        tell_pulled(run, pulled, spent)


def may_pull(run: Pass, rec: StoredPod, pod: Pod | None) -> bool:
    """A pod the store watches, the provider shows as gpuc's and billing, not yet pulled in this month."""
    if rec.state not in MARKABLE_STATES or pod is None or not pod.managed or pod.status not in BILLING_STATUSES:
        return False
    start, end = month_window(current_month(run.now))
    return rec.budget_pulled_at is None or not start <= rec.budget_pulled_at < end


def tell_pulled(run: Pass, pulled: list[tuple[StoredPod, float]], spent: str) -> None:
    ends = "; ".join(f"{rec.pod_id} ({rec.experiment}) at {iso(new)}" for rec, new in pulled)
    example = pulled[0][0].pod_id
    announce(
        run.deps,
        run.now,
        f"gpuc: budget: {counted(len(pulled), 'pod')} end by {iso(max(new for _, new in pulled))}",
        f"{spent}: at worst the month would cross its budget. Deadlines pulled in: {ends}. Each pod syncs its "
        f"results, then is destroyed (stopped instead if its sync fails). To keep one longer: `gpuc keep {example} "
        f"--for 2h` (or `gpuc extend {example}`); this month's budget does not pull it in again. "
        f"Budget {usd(run.deps.settings.monthly_budget or 0.0)} (GPUC_MONTHLY_BUDGET).",
        kind="budget_pull_in",
        level="warning",
    )
