"""Recovery's turn in each reaper pass: every live recovering run (functions/recovery/runs.py) is looked at
with its provider (functions/recovery/attempts.py: read twice, offers), decided (functions/recovery/decide.py),
claimed by compare-and-set (functions/recovery/claim.py) and acted on (functions/recovery/rerent.py).

The reaper's sweep (functions/reaper/sweep.py) calls `recover_runs` after the pods, handing over only what
recovery needs of its pass (claim.Sweep): recovery never imports the reaper. Nothing is decided on a provider
the pass could not read; a run whose latest pod ended (the job's end, `gpuc down`, any destroy) is done, never
re-rented; a stop asked while the pod runs again ends the recovery and lets the pod run on.
"""

from __future__ import annotations

import logging

from gpuc.core.budget import ahead_of, outlook, records_burns
from gpuc.core.ledger.intake import RECOVERY_ENDED_BY
from gpuc.functions.app import describe
from gpuc.functions.deadline import deadline_of
from gpuc.functions.recovery import runs
from gpuc.functions.recovery.attempts import look
from gpuc.functions.recovery.claim import Sweep, acting_for, claim, take_over
from gpuc.functions.recovery.rerent import YOU_STOPPED, act, finish
from gpuc.functions.recovery.routes import RECOVER_PROVIDERS
from gpuc.functions.store import FINISHED_STATES

log = logging.getLogger("gpuc.reaper")


def recover_runs(run: Sweep) -> None:
    """Every live recovering run, one at a time; one run's trouble never stops the others or the pass."""
    if run.dry_run:
        return  # a dry run rents nothing and destroys nothing
    for run_id in runs.live_ids(run.deps.store):
        try:
            recover_one(run, run_id)
        except Exception as exc:
            log.error("reaper: recovering run %s: %s", run_id, describe(exc, run.deps))
            why = f"recovery: error ({type(exc).__name__}); the next pass tries again"
            run.act(run_id, provider_of(run, run_id), "skip", why)


def recover_one(run: Sweep, run_id: str) -> None:
    store, now = run.deps.store, run.now
    loaded = runs.load(store, run_id)
    if loaded is None or loaded[0].done:
        if loaded is not None and runs.holds_secrets(loaded[0]):  # ended by an older gpuc: dropped now
            runs.update(store, run_id, lambda r: runs.end(r) if r.done else None)
        runs.index_remove(store, run_id)
        return
    stored, _ = loaded
    if stored.provider in run.blind:
        return  # nothing is decided on a provider this pass could not read
    if stored.acting is not None:
        if now < stored.acting.until:
            return  # another pass is inside its act
        taken = runs.update(store, run_id, lambda r: take_over(r, stored, now))
        if taken is not None:
            act(run, taken[0])
        return
    rec = store.get_pod(stored.latest.pod_id)
    if rec is not None and rec.state in FINISHED_STATES and rec.ended_by != RECOVERY_ENDED_BY:
        finish(run, run_id, f"its pod ended ({rec.ended_by or rec.state})", tell=None)
        return
    provider = run.deps.providers.get(stored.provider)
    seen = stored.model_copy(deep=True)  # what this pass reads of the pause, written only by the claim below
    decision, reading, confirmed = look(provider, seen, now, run.deps.settings.recover_wait_s, budget_left(run, run_id))
    if confirmed and reading in ("gone", "exited"):
        finish(run, run_id, f"its pod is {reading}", tell=None)  # the job's end, or a destroy: never re-rented
        return
    if stored.stop_asked and confirmed and reading in ("running", "provisioning"):
        why = YOU_STOPPED
        finish(run, run_id, why, tell=f"recovery stopped: {why}; the pod runs on, and an outbid now ends it")
        return
    acting = acting_for(decision, now)
    noted = (seen.paused_since, seen.latest.paused_at) == (stored.paused_since, stored.latest.paused_at)
    if acting is None and noted:
        return  # nothing to write
    claimed = runs.update(store, run_id, lambda r: claim(r, stored, seen, acting))
    if claimed is not None and acting is not None:
        act(run, claimed[0])


def budget_left(run: Sweep, run_id: str) -> float | None:
    """What the month's budget leaves for the next attempt (None: no budget set): the month's spend plus every
    OTHER pod ahead at its worst (to its deadline, as if running: the safe direction), as `up` weighs a new pod.
    The run's own paused attempt is left out of what is ahead (it is destroyed before the next is rented),
    never out of what it spent."""
    settings = run.deps.settings
    if settings.monthly_budget is None:
        return None
    records = run.deps.store.list_pods()
    ahead = [
        one
        for rec in records
        if rec.run_id != run_id
        and (
            one := ahead_of(
                rec, deadline=deadline_of(rec, settings), kept=rec.kept_at is not None, pod=None, now=run.now
            )
        )
        is not None
    ]
    return settings.monthly_budget - outlook(records_burns(records), ahead, run.now).total_usd


def provider_of(run: Sweep, run_id: str) -> str:
    """The provider of a run whose pass failed, for the report: its record's, or (a record that cannot be read)
    the one provider recovery rents on (routes.RECOVER_PROVIDERS: registration refuses any other)."""
    try:
        loaded = runs.load(run.deps.store, run_id)
    except Exception:  # the store's own trouble, which the failure may have been: the report still gets a row
        loaded = None
    return loaded[0].provider if loaded is not None else RECOVER_PROVIDERS[0]
