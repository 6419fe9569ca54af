"""The reaper's part in recovery: each pass, every live recovering run (functions/runs.py) is looked at
with its provider, decided (functions/reaper/recover.py) and acted on (functions/reaper/respawn.py).

Money-critical, so every act is claimed first: the pass writes its intent (`Acting`) into the run's record by
compare-and-set BEFORE any provider call; a second pass at the same time (a scheduled event delivered twice,
the local loop beside a `gpuc watchdog reap`) loses that write and does nothing. The claim's step is written
again before and after each provider call (runs.Acting): each write renews its lease and reads the run again.
A pass that dies inside its act leaves the claim to the next pass once it lapses; every step is safe to
repeat (destroy is idempotent and confirmed; the new pod is looked up by its attempt's own name before any
create), and a pass cut after its intent finds the instance by that name and sees it through (_resume).

A re-rent: the paused instance destroyed and confirmed gone, the offer listed again (its floor within the
cap), the intent written, then the next attempt created with gpuc's boot (core/bootkit.py onstart_script) and
a one-time boot ticket in its env (derived from the claim; only its sha256 kept), registered here at once (run
id, attempt, price, the run's envelope deadline: watched from its first second, its pings signed with the
token a register without a key derives), recorded with its ticket, and said to the phone with a one-tap
"stop recovery" link. A run whose latest pod ended (the job's end, `gpuc down`, any destroy) is done, never
re-rented; from then on the usual rules apply to its pods.

A stop always wins: asked at any step of a re-rent (the phone, `gpuc down`), the next write of the claim sees
it; before the create nothing is rented, after it the new pod is destroyed (confirmed gone) and its minutes
counted (_undo). A stop asked once the ticket is saved finds the attempt in the run's record: `gpuc down`
destroys it, the phone's stop lets it run (no further re-rent).
"""

from __future__ import annotations

import logging
from typing import Any

from gpuc.core import bootkit
from gpuc.core.api import AttemptRecord, Policy
from gpuc.core.budget import ahead_of, outlook, records_burns, usd
from gpuc.core.errors import GpucError
from gpuc.core.ledger.intake import RECOVERY_ENDED_BY
from gpuc.core.pod import RESUME_ENV, WATCHDOG_ENV, pod_name
from gpuc.core.providers.base import Provider
from gpuc.core.signing import derive_key
from gpuc.core.titles import title
from gpuc.functions import runs
from gpuc.functions.app import announce
from gpuc.functions.claims import token_for
from gpuc.functions.deadline import deadline_of
from gpuc.functions.grants import results_at_of_run
from gpuc.functions.reaper.recover import Decision, Offer, RecoveryPlan, progress_text, stop_text
from gpuc.functions.reaper.respawn import RecoveringRun, attempt_spec, create_attempt, look, recheck
from gpuc.functions.reaper.state import Pass, describe
from gpuc.functions.runs import Acting, StoredRun, Ticket
from gpuc.functions.store import FINISHED_STATES, StoredPod

log = logging.getLogger("gpuc.reaper")

# A claim lapses this long after its last step was written (each step renews it): far longer than one step
# (a destroy confirmed, a create with its lookups: each provider call has its own deadline), so a pass still
# inside its act is never taken over; a pass that died is, by the first pass after it. Short, because a pod
# rented by a pass cut before its register waits for this (its boot answered 409 "later") while it bills.
ACT_LEASE_S = 5 * 60.0
YOU_STOPPED = "you stopped the recovery"
RECOVERING_KIND = "recovering"  # the notification that carries the "stop recovery" link
STOPPED_KIND = "recovery_stopped"


def recover_runs(run: Pass) -> None:
    """Every live recovering run, one at a time; one run's trouble never stops the others or the pass."""
    if run.dry_run:
        return  # a dry run rents nothing and destroys nothing
    for run_id in runs.live_ids(run.deps.store):
        try:
            recover_one(run, run_id)
        except Exception as exc:
            log.error("reaper: recovering run %s: %s", run_id, describe(exc, run.deps))
            run.act(run_id, "vast", "skip", f"recovery: error ({type(exc).__name__}); the next pass tries again")


def recover_one(run: Pass, run_id: str) -> None:
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
        taken = runs.update(store, run_id, lambda r: _take_over(r, stored, now))
        if taken is not None:
            _act(run, taken[0])
        return
    rec = store.get_pod(stored.latest.pod_id)
    if rec is not None and rec.state in FINISHED_STATES and rec.ended_by != RECOVERY_ENDED_BY:
        _finish(run, run_id, f"its pod ended ({rec.ended_by or rec.state})", tell=None)
        return
    provider = run.deps.providers.get(stored.provider)
    mem = to_memory(stored)
    decision, reading, confirmed = look(provider, mem, now, run.deps.settings.recover_wait_s, budget_left(run, run_id))
    if confirmed and reading in ("gone", "exited"):
        _finish(run, run_id, f"its pod is {reading}", tell=None)  # the job's end, or a destroy: never re-rented
        return
    if stored.stop_asked and confirmed and reading in ("running", "provisioning"):
        why = YOU_STOPPED
        _finish(run, run_id, why, tell=f"recovery stopped: {why}; the pod runs on, and an outbid now ends it")
        return
    acting = _acting(decision, now)
    noted = (mem.paused_since, mem.attempts[-1].paused_at) == (stored.paused_since, stored.latest.paused_at)
    if acting is None and noted:
        return  # nothing to write
    claimed = runs.update(store, run_id, lambda r: _claim(r, stored, mem, acting))
    if claimed is not None and acting is not None:
        _act(run, claimed[0])


def to_memory(stored: StoredRun) -> RecoveringRun:
    r = stored.request
    plan = RecoveryPlan(r.recover, stored.envelope, r.price_cap, r.disk_per_hour, r.on_demand_last)
    return RecoveringRun(
        plan, r.spec, r.results_at, [a.pod_id for a in stored.attempts], [runs.to_attempt(a) for a in stored.attempts],
        paused_since=stored.paused_since, stop_asked=stored.stop_asked, done=stored.done,
    )  # fmt: skip


def budget_left(run: Pass, run_id: str) -> float | None:
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
        and (one := ahead_of(rec, deadline=deadline_of(rec, settings), kept=rec.kept_at is not None, pod=None,
                             now=run.now)) is not None
    ]  # fmt: skip
    return settings.monthly_budget - outlook(records_burns(records), ahead, run.now).total_usd


def _acting(decision: Decision, now: float) -> Acting | None:
    if decision.action == "stop":
        return Acting(action="stop", since=now, until=now + ACT_LEASE_S, why=decision.why)
    if decision.action == "rerent" and decision.offer is not None:
        o = decision.offer
        return Acting(
            action="rerent", since=now, until=now + ACT_LEASE_S, why=decision.why, offer_id=o.id,
            price_per_hour=o.price_per_hour, interruptible=o.interruptible, min_bid=o.min_bid,
        )  # fmt: skip
    return None


def _claim(r: StoredRun, read: StoredRun, mem: RecoveringRun, acting: Acting | None) -> StoredRun | None:
    """The CAS's condition: nothing changed that the decision rested on (another pass's claim or attempt, a
    stop asked since, the run's end)."""
    if r.done or r.acting is not None or len(r.attempts) != len(read.attempts) or r.stop_asked != read.stop_asked:
        return None
    r.paused_since = mem.paused_since
    r.attempts[-1] = r.attempts[-1].model_copy(update={"paused_at": mem.attempts[-1].paused_at})
    r.acting = acting
    return r


def _take_over(r: StoredRun, read: StoredRun, now: float) -> StoredRun | None:
    if r.done or r.acting is None or read.acting is None or r.acting.since != read.acting.since:
        return None
    if now < r.acting.until or len(r.attempts) != len(read.attempts):
        return None
    r.acting = r.acting.model_copy(update={"until": now + ACT_LEASE_S})
    return r


class LostClaim(Exception):
    """The run's claim is no longer this pass's (another pass took it over after its lease): it stops here."""


def _step(run: Pass, stored: StoredRun, **changes: Any) -> StoredRun:
    """Write the claim's progress by CAS (renewing its lease) and read the run again: the stop asked since the
    last write shows here, before or after every provider call."""
    since = stored.acting.since if stored.acting else None
    until = max(run.now, run.deps.clock.now()) + ACT_LEASE_S

    def step(r: StoredRun) -> StoredRun | None:
        if r.done or r.acting is None or r.acting.since != since:
            return None
        r.acting = r.acting.model_copy(update={**changes, "until": until})
        return r

    written = runs.update(run.deps.store, stored.run_id, step)
    if written is None:
        raise LostClaim(f"run {stored.run_id}: the claim passed to another pass")
    return written[0]


def _act(run: Pass, stored: StoredRun) -> None:
    stored = _step(run, stored)  # the stop, read again before the first provider call
    acting = stored.acting
    assert acting is not None
    provider = run.deps.providers.get(stored.provider)
    if acting.step in ("renting", "rented", "registered"):
        _resume(run, provider, stored)  # a pass cut after its intent: what it rented boots, or is destroyed
        return
    old = stored.latest.pod_id
    try:
        provider.destroy(old)  # raises unless confirmed gone: then nothing is rented
    except Exception:
        _release(run, stored)
        raise
    run.act(old, stored.provider, "destroy", f"recovery: {acting.why}")
    _mark_destroyed(run, old, acting.why)
    stored = _step(run, stored, step="destroyed")
    if acting.action == "stop" or stored.stop_asked:
        _stopped(run, stored, acting.why if acting.action == "stop" else YOU_STOPPED)
        return
    _rerent(run, provider, stored)


def _rerent(run: Pass, provider: Provider, stored: StoredRun) -> None:
    """The paused instance is gone: rent the next attempt. The intent (`renting`, its attempt: the pod's name)
    is written BEFORE the create, so whatever cuts this pass, the next one finds what it rented."""
    deps, acting = run.deps, stored.acting
    assert acting is not None
    if deps.watchdog_key is None:  # registration refuses recovery without it; a key removed since ends it
        _finish_failed(run, stored, "this watchdog has no key of its own now (GPUC_WATCHDOG_KEY): a new pod could "
                       "not boot")  # fmt: skip
        return
    chosen = Offer(acting.offer_id or "", acting.price_per_hour or 0.0, acting.interruptible, acting.min_bid)
    try:
        offer = recheck(provider, to_memory(stored), chosen)
    except GpucError as exc:
        _finish_failed(run, stored, f"the offers could not be read again before the re-rent ({describe(exc, deps)})")
        return
    if offer is None:
        _finish_failed(run, stored, f"no offer at or under your price cap ({usd(stored.request.price_cap)}/h) now")
        return
    stored = _step(
        run, stored, step="renting", attempt=len(stored.attempts) + 1, offer_id=offer.id,
        price_per_hour=offer.price_per_hour, interruptible=offer.interruptible, min_bid=offer.min_bid,
    )  # fmt: skip
    if stored.stop_asked:
        _stopped(run, stored)  # before the create: nothing rented
        return
    _rent(run, provider, stored)


def _rent(run: Pass, provider: Provider, stored: StoredRun) -> None:
    acting = stored.acting
    assert acting is not None and acting.attempt is not None and run.deps.watchdog_key is not None
    ticket = runs.boot_ticket(run.deps.watchdog_key.get_secret_value(), stored.run_id, acting.attempt, acting.since)
    offer = Offer(acting.offer_id or "", acting.price_per_hour or 0.0, acting.interruptible, acting.min_bid)
    spec = attempt_spec(stored.request.spec, offer, acting.attempt, _boot_env(run, stored, ticket),
                        bootkit.onstart_script())  # fmt: skip
    try:
        # A pass that died after its create (its claim taken over here) left the pod under the attempt's own
        # name, its env holding this same ticket: create_attempt takes that one, never rents a second.
        pod = create_attempt(provider, spec)
    except GpucError as exc:
        why = f"the re-rent failed ({describe(exc, run.deps).replace(ticket, '***')})"  # a provider may echo the env
        _finish_failed(run, stored, why)
        return
    run.act(pod.id, stored.provider, "confirm", f"recovery: attempt {acting.attempt} rented")
    stored = _step(run, stored, step="rented", pod_id=pod.id, rented_at=run.now)
    _see_through(run, provider, stored, cut=False)


def _resume(run: Pass, provider: Provider, stored: StoredRun) -> None:
    """A claim taken over at `renting` or later: the instance is found by its attempt's name (the create may
    or may not have gone through), then registered and its ticket made valid, or destroyed when the stop came;
    the user hears which. A name that finds nothing is rented now (nothing was), unless the stop came."""
    acting = stored.acting
    assert acting is not None and acting.attempt is not None
    if acting.pod_id is None:
        found = provider.find_by_name(pod_name(runs.attempt_run_id(stored.run_id, acting.attempt)))
        if found is None:
            if stored.stop_asked:
                _stopped(run, stored)  # the cut pass rented nothing, and nothing is rented now
            else:
                _rent(run, provider, stored)
            return
        stored = _step(run, stored, step="rented", pod_id=found.id, rented_at=run.now)
    _see_through(run, provider, stored, cut=True)


def _see_through(run: Pass, provider: Provider, stored: StoredRun, *, cut: bool) -> None:
    """Register the rented pod, then save its ticket, reading the stop after each: a stop asked at any step
    before the ticket is saved destroys the new pod (confirmed gone) and ends the run."""
    acting = stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    if stored.stop_asked:
        _undo(run, provider, stored)
        return
    if acting.step != "registered":
        _register(run, stored)
        stored = _step(run, stored, step="registered")
        if stored.stop_asked:
            _undo(run, provider, stored)
            return
    _record(run, provider, stored, cut=cut)


def _record(run: Pass, provider: Provider, stored: StoredRun, *, cut: bool) -> None:
    deps, now, acting = run.deps, run.now, stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    assert deps.watchdog_key is not None
    ticket = runs.boot_ticket(deps.watchdog_key.get_secret_value(), stored.run_id, acting.attempt, acting.since)
    pod_id, started = acting.pod_id, acting.rented_at if acting.rented_at is not None else now
    told = progress_text(to_memory(stored).plan, [runs.to_attempt(a) for a in _ended(stored, now)], now)

    def record(r: StoredRun) -> StoredRun | None:
        if r.done or r.stop_asked or r.acting is None or r.acting.since != acting.since:
            return None
        new = AttemptRecord(
            pod_id=pod_id, start=started, price_per_hour=acting.price_per_hour or 0.0,
            disk_per_hour=r.request.disk_per_hour, interruptible=acting.interruptible,
        )  # fmt: skip
        r.attempts = [*_ended(r, now), new]
        r.tickets.setdefault(pod_id, Ticket(sha256=runs.ticket_hash(ticket)))  # a boot may have spent it already
        r.paused_since, r.acting = None, None
        r.told.append(told)
        return r

    if runs.update(deps.store, stored.run_id, record) is None:
        again = runs.load(deps.store, stored.run_id)
        mine = again is not None and again[0].acting is not None and again[0].acting.since == acting.since
        if again is None or not mine or not again[0].stop_asked:
            raise LostClaim(f"run {stored.run_id}: the claim passed to another pass")
        _undo(run, provider, again[0])  # the stop came just before the ticket was saved
        return
    price = usd(acting.price_per_hour or 0.0)
    how = " A pass was cut short after renting it; this pass registered it, its boot ticket valid." if cut else ""
    announce(
        deps, now, title("recovering (outbid)", experiment=stored.experiment),
        f"{told}. New pod {pod_id} ({stored.provider}, {price}/h); it resumes from the last push at "
        f"{stored.request.results_at}.{how} To stop recovering: the button, or `gpuc down {pod_id}` from the laptop.",
        pod_id=pod_id, kind=RECOVERING_KIND, level="warning",
    )  # fmt: skip


def _undo(run: Pass, provider: Provider, stored: StoredRun) -> None:
    """The stop came while this attempt was being rented: its pod is destroyed, confirmed gone (raises when not:
    the claim stays, and the next pass destroys it again), its minutes counted, and the run ends."""
    acting = stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    pod_id = acting.pod_id
    provider.destroy(pod_id)
    why = f"you stopped the recovery while attempt {acting.attempt} was being rented"
    run.act(pod_id, stored.provider, "destroy", f"recovery: {why}")
    _mark_destroyed(run, pod_id, why)
    rented = AttemptRecord(
        pod_id=pod_id, start=acting.rented_at if acting.rented_at is not None else run.now,
        price_per_hour=acting.price_per_hour or 0.0, disk_per_hour=stored.request.disk_per_hour,
        interruptible=acting.interruptible, end=run.now,
    )  # fmt: skip
    tell = (
        f"recovery stopped: {why}; that pod ({pod_id}) is destroyed and confirmed gone, and so is the paused "
        f"instance; the last results pushed are kept at {stored.request.results_at}"
    )
    _finish(run, stored.run_id, YOU_STOPPED, tell=tell, rented=rented)


def _stopped(run: Pass, stored: StoredRun, why: str = YOU_STOPPED) -> None:
    """The run ends with nothing rented after the paused instance's destroy (confirmed gone before this: its
    attempt ends here, so its disk stops counting)."""
    tell = stop_text(Decision("stop", why), stored.request.results_at)
    _finish(run, stored.run_id, why, tell=tell, ended=stored.latest.pod_id)


def _finish_failed(run: Pass, stored: StoredRun, why: str) -> None:
    """After the paused instance's destroy, the next attempt cannot be rented: the run ends."""
    kept = stored.request.results_at
    tell = f"recovery stopped: {why}; the last results pushed are kept at {kept}"
    _finish(run, stored.run_id, why, tell=tell, ended=stored.latest.pod_id)


def _release(run: Pass, stored: StoredRun) -> None:
    """A destroy that did not confirm: the claim goes, so the next pass decides afresh."""
    since = stored.acting.since if stored.acting else None

    def release(r: StoredRun) -> StoredRun | None:
        if r.acting is None or r.acting.since != since:
            return None
        r.acting = None
        return r

    runs.update(run.deps.store, stored.run_id, release)


def _mark_destroyed(run: Pass, pod_id: str, why: str) -> None:
    rec = run.deps.store.get_pod(pod_id)
    if rec is None or rec.state == "destroyed":
        return
    changes: dict[str, Any] = {"state": "destroyed", "destroy_at": None, "reason": f"recovery: {why}"}
    if rec.end_at is None:
        changes.update(end_at=run.now, ended_by=RECOVERY_ENDED_BY)
    run.deps.store.update_if(pod_id, {"state": rec.state}, changes)


def _ended(r: StoredRun, now: float) -> list[AttemptRecord]:
    last = r.attempts[-1]
    return [*r.attempts[:-1], last.model_copy(update={"end": last.end if last.end is not None else now})]


def _boot_env(run: Pass, stored: StoredRun, ticket: str) -> dict[str, str]:
    """RECOVERY.md's env of a re-rented pod. The ticket is the one secret: Vast echoes env in every listing,
    so it is worth one boot only (spent at its first use)."""
    kit = stored.request.kit
    env = {
        bootkit.BOOT_TICKET_ENV: ticket,
        bootkit.BOOT_URL_ENV: str(kit.config.get("functions_url") or run.deps.settings.functions_url),
        RESUME_ENV: stored.request.results_at,
        "GPUC_RUN_ID": stored.run_id,
        "GPUC_EXPERIMENT": stored.experiment,
    }
    if run.deps.watchdog_id is not None:
        env[WATCHDOG_ENV] = run.deps.watchdog_id
    return env


def _register(run: Pass, stored: StoredRun) -> None:
    """The new pod, watched from its first second: registered as `up` registers one without a key of its own
    (its token derived from this watchdog's key: the boot answer hands it over). Safe to repeat."""
    deps, acting = run.deps, stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    pod_id, attempt = acting.pod_id, acting.attempt
    name = pod_name(runs.attempt_run_id(stored.run_id, attempt))
    token = token_for(deps, stored.provider, pod_id, name)
    first = deps.store.get_pod(stored.attempts[0].pod_id)
    record = StoredPod(
        pod_id=pod_id, provider=stored.provider, name=name, experiment=stored.experiment,
        gpu=stored.request.spec.gpu_type, price_per_hour=acting.price_per_hour,
        started_at=acting.rented_at if acting.rented_at is not None else run.now,
        registered_at=run.now, deadline_at=stored.envelope.deadline, run_id=stored.run_id, attempt=attempt,
        key=derive_key(token) if token is not None else "", interruptible=acting.interruptible,
        policy=first.policy if first is not None else Policy.model_validate({}),
        # The same run's prefix as every attempt before: its grants reach that, and nothing else (grants.py).
        results_at=results_at_of_run(deps.settings, stored.request.results_at, stored.experiment, stored.run_id),
    )  # fmt: skip
    deps.store.register(record)
    # A pass that listed it meanwhile took it for a stray (adopted): a register rewrites what `up` would,
    # never a run's marks, so they are set here, once.
    deps.store.update_if(pod_id, {"run_id": None}, {"run_id": stored.run_id, "attempt": attempt})


def _finish(
    run: Pass, run_id: str, why: str, *, tell: str | None, ended: str | None = None,
    rented: AttemptRecord | None = None,
) -> None:  # fmt: skip
    """The run is done: never re-rented again, its kit's secrets dropped (runs.end). `tell`: what the user
    hears (None: the pod's own end said it). `rented`: an attempt destroyed as the stop came, counted."""
    now = run.now

    def done(r: StoredRun) -> StoredRun | None:
        if r.done:
            return None
        if ended is not None and r.attempts[-1].pod_id == ended and r.attempts[-1].end is None:
            r.attempts[-1] = r.attempts[-1].model_copy(update={"end": now})
        if rented is not None:
            r.attempts = [*_ended(r, now), rented]
        runs.end(r)
        if tell is not None:
            r.stopped_why = why
            r.told.append(tell)
        return r

    finished = runs.update(run.deps.store, run_id, done)
    runs.index_remove(run.deps.store, run_id)
    if finished is None or tell is None:
        return
    stored = finished[0]
    run.act(stored.latest.pod_id, stored.provider, "stop", f"recovery: {why}")
    announce(
        run.deps, now, title("recovery stopped", experiment=stored.experiment),
        f"{tell}. Spent {usd(runs.spent_usd(stored, now))} of {usd(stored.request.envelope_usd)} "
        f"over {len(stored.attempts)} attempt(s).",
        pod_id=stored.latest.pod_id, kind=STOPPED_KIND, level="warning",
    )  # fmt: skip
