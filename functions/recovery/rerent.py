"""The act of a claimed recovery: destroy the paused instance, rent the next attempt, register it, record it.

A re-rent: the paused instance destroyed and confirmed gone, the offer listed again (its floor within the
cap), the intent written, then the next attempt created with gpuc's boot (core/bootkit.py onstart_script) and
a one-time boot ticket in its env (derived from the claim; only its sha256 kept), registered here at once (run
id, attempt, price, the run's envelope deadline: watched from its first second, its pings signed with the
token a register without a key derives), recorded with its ticket, and said to the phone with a one-tap
"stop recovery" link. The new pod trades its ticket for the run's kit at POST /v1/boot
(functions/recovery/routes.py) and restores the last push. A pass cut after its intent finds the instance by
its attempt's name and sees it through (_resume).

A stop always wins: asked at any step of a re-rent (the phone, `gpuc down`), the next write of the claim sees
it; before the create nothing is rented, after it the new pod is destroyed (confirmed gone) and its minutes
counted (_undo). A stop asked once the ticket is saved finds the attempt in the run's record: `gpuc down`
destroys it, the phone's stop lets it run (no further re-rent).
"""

from __future__ import annotations

from typing import Any

from gpuc.core import bootkit
from gpuc.core.api import AttemptRecord, Policy
from gpuc.core.budget import usd
from gpuc.core.errors import GpucError
from gpuc.core.ledger.intake import RECOVERY_ENDED_BY
from gpuc.core.pod import RESUME_ENV, WATCHDOG_ENV, pod_name
from gpuc.core.providers.base import Provider
from gpuc.core.signing import derive_key
from gpuc.core.titles import title
from gpuc.functions.app import announce, describe
from gpuc.functions.claims import token_for
from gpuc.functions.grants import results_at_of_run
from gpuc.functions.recovery import runs
from gpuc.functions.recovery.attempts import attempt_spec, create_attempt, recheck
from gpuc.functions.recovery.claim import LostClaim, Sweep, release, write_step
from gpuc.functions.recovery.decide import Decision, Offer, progress_text, stop_text
from gpuc.functions.recovery.runs import StoredRun, Ticket
from gpuc.functions.store import StoredPod

YOU_STOPPED = "you stopped the recovery"
RECOVERING_KIND = "recovering"  # the notification that carries the "stop recovery" link
STOPPED_KIND = "recovery_stopped"


def act(run: Sweep, stored: StoredRun) -> None:
    stored = write_step(run, stored)  # the stop, read again before the first provider call
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
        release(run, stored)
        raise
    run.act(old, stored.provider, "destroy", f"recovery: {acting.why}")
    _mark_destroyed(run, old, acting.why)
    stored = write_step(run, stored, step="destroyed")
    if acting.action == "stop" or stored.stop_asked:
        _stopped(run, stored, acting.why if acting.action == "stop" else YOU_STOPPED)
        return
    _rerent(run, provider, stored)


def _rerent(run: Sweep, provider: Provider, stored: StoredRun) -> None:
    """The paused instance is gone: rent the next attempt. The intent (`renting`, its attempt: the pod's name)
    is written BEFORE the create, so whatever cuts this pass, the next one finds what it rented."""
    deps, acting = run.deps, stored.acting
    assert acting is not None
    if deps.watchdog_key is None:  # registration refuses recovery without it; a key removed since ends it
        _finish_failed(
            run, stored, "this watchdog has no key of its own now (GPUC_WATCHDOG_KEY): a new pod could not boot"
        )
        return
    chosen = Offer(acting.offer_id or "", acting.price_per_hour or 0.0, acting.interruptible, acting.min_bid)
    try:
        offer = recheck(provider, stored, chosen)
    except GpucError as exc:
        _finish_failed(run, stored, f"the offers could not be read again before the re-rent ({describe(exc, deps)})")
        return
    if offer is None:
        _finish_failed(run, stored, f"no offer at or under your price cap ({usd(stored.request.price_cap)}/h) now")
        return
    stored = write_step(
        run,
        stored,
        step="renting",
        attempt=len(stored.attempts) + 1,
        offer_id=offer.id,
        price_per_hour=offer.price_per_hour,
        interruptible=offer.interruptible,
        min_bid=offer.min_bid,
    )
    if stored.stop_asked:
        _stopped(run, stored)  # before the create: nothing rented
        return
    _rent(run, provider, stored)


def _rent(run: Sweep, provider: Provider, stored: StoredRun) -> None:
    acting = stored.acting
    assert acting is not None and acting.attempt is not None and run.deps.watchdog_key is not None
    ticket = runs.boot_ticket(run.deps.watchdog_key.get_secret_value(), stored.run_id, acting.attempt, acting.since)
    offer = Offer(acting.offer_id or "", acting.price_per_hour or 0.0, acting.interruptible, acting.min_bid)
    spec = attempt_spec(
        stored.request.spec, offer, acting.attempt, _boot_env(run, stored, ticket), bootkit.onstart_script()
    )
    try:
        # A pass that died after its create (its claim taken over here) left the pod under the attempt's own
        # name, its env holding this same ticket: create_attempt takes that one, never rents a second.
        pod = create_attempt(provider, spec)
    except GpucError as exc:
        why = f"the re-rent failed ({describe(exc, run.deps).replace(ticket, '***')})"  # a provider may echo the env
        _finish_failed(run, stored, why)
        return
    run.act(pod.id, stored.provider, "confirm", f"recovery: attempt {acting.attempt} rented")
    stored = write_step(run, stored, step="rented", pod_id=pod.id, rented_at=run.now)
    _see_through(run, provider, stored, cut=False)


def _resume(run: Sweep, provider: Provider, stored: StoredRun) -> None:
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
        stored = write_step(run, stored, step="rented", pod_id=found.id, rented_at=run.now)
    _see_through(run, provider, stored, cut=True)


def _see_through(run: Sweep, provider: Provider, stored: StoredRun, *, cut: bool) -> None:
    """Register the rented pod, then save its ticket, reading the stop after each: a stop asked at any step
    before the ticket is saved destroys the new pod (confirmed gone) and ends the run."""
    acting = stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    if stored.stop_asked:
        _undo(run, provider, stored)
        return
    if acting.step != "registered":
        _register(run, stored)
        stored = write_step(run, stored, step="registered")
        if stored.stop_asked:
            _undo(run, provider, stored)
            return
    _record(run, provider, stored, cut=cut)


def _record(run: Sweep, provider: Provider, stored: StoredRun, *, cut: bool) -> None:
    deps, now, acting = run.deps, run.now, stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    assert deps.watchdog_key is not None
    ticket = runs.boot_ticket(deps.watchdog_key.get_secret_value(), stored.run_id, acting.attempt, acting.since)
    pod_id, started = acting.pod_id, acting.rented_at if acting.rented_at is not None else now
    told = progress_text(stored.plan, _ended(stored, now), now)

    def record(r: StoredRun) -> StoredRun | None:
        if r.done or r.stop_asked or r.acting is None or r.acting.since != acting.since:
            return None
        new = AttemptRecord(
            pod_id=pod_id,
            start=started,
            price_per_hour=acting.price_per_hour or 0.0,
            disk_per_hour=r.request.disk_per_hour,
            interruptible=acting.interruptible,
        )
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
        deps,
        now,
        title("recovering (outbid)", experiment=stored.experiment),
        f"{told}. New pod {pod_id} ({stored.provider}, {price}/h); it resumes from the last push at "
        f"{stored.request.results_at}.{how} To stop recovering: the button, or `gpuc down {pod_id}` from the laptop.",
        pod_id=pod_id,
        kind=RECOVERING_KIND,
        level="warning",
    )


def _undo(run: Sweep, provider: Provider, stored: StoredRun) -> None:
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
        pod_id=pod_id,
        start=acting.rented_at if acting.rented_at is not None else run.now,
        price_per_hour=acting.price_per_hour or 0.0,
        disk_per_hour=stored.request.disk_per_hour,
        interruptible=acting.interruptible,
        end=run.now,
    )
    tell = (
        f"recovery stopped: {why}; that pod ({pod_id}) is destroyed and confirmed gone, and so is the paused "
        f"instance; the last results pushed are kept at {stored.request.results_at}"
    )
    finish(run, stored.run_id, YOU_STOPPED, tell=tell, rented=rented)


def _stopped(run: Sweep, stored: StoredRun, why: str = YOU_STOPPED) -> None:
    """The run ends with nothing rented after the paused instance's destroy (confirmed gone before this: its
    attempt ends here, so its disk stops counting)."""
    tell = stop_text(Decision("stop", why), stored.request.results_at)
    finish(run, stored.run_id, why, tell=tell, ended=stored.latest.pod_id)


def _finish_failed(run: Sweep, stored: StoredRun, why: str) -> None:
    """After the paused instance's destroy, the next attempt cannot be rented: the run ends."""
    kept = stored.request.results_at
    tell = f"recovery stopped: {why}; the last results pushed are kept at {kept}"
    finish(run, stored.run_id, why, tell=tell, ended=stored.latest.pod_id)


def _mark_destroyed(run: Sweep, pod_id: str, why: str) -> None:
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


def _boot_env(run: Sweep, stored: StoredRun, ticket: str) -> dict[str, str]:
    """RECOVERY.md's env of a re-rented pod. The ticket is the one secret: Vast echoes env in every listing,
    so it is worth one boot only (spent at its first use)."""
    kit = stored.request.kit
    env = {
        bootkit.BOOT_TICKET_ENV: ticket,
        bootkit.BOOT_URL_ENV: str(kit.config.get("watchdog_url") or run.deps.settings.watchdog_url),
        RESUME_ENV: stored.request.results_at,
        "GPUC_RUN_ID": stored.run_id,
        "GPUC_EXPERIMENT": stored.experiment,
    }
    if run.deps.watchdog_id is not None:
        env[WATCHDOG_ENV] = run.deps.watchdog_id
    return env


def _register(run: Sweep, stored: StoredRun) -> None:
    """The new pod, watched from its first second: registered as `up` registers one without a key of its own
    (its token derived from this watchdog's key: the boot answer hands it over). Safe to repeat."""
    deps, acting = run.deps, stored.acting
    assert acting is not None and acting.pod_id is not None and acting.attempt is not None
    pod_id, attempt = acting.pod_id, acting.attempt
    name = pod_name(runs.attempt_run_id(stored.run_id, attempt))
    token = token_for(deps, stored.provider, pod_id, name)
    first = deps.store.get_pod(stored.attempts[0].pod_id)
    record = StoredPod(
        pod_id=pod_id,
        provider=stored.provider,
        name=name,
        experiment=stored.experiment,
        gpu=stored.request.spec.gpu_type,
        price_per_hour=acting.price_per_hour,
        started_at=acting.rented_at if acting.rented_at is not None else run.now,
        registered_at=run.now,
        deadline_at=stored.envelope.deadline,
        run_id=stored.run_id,
        attempt=attempt,
        key=derive_key(token) if token is not None else "",
        interruptible=acting.interruptible,
        policy=first.policy if first is not None else Policy.model_validate({}),
        # The same run's prefix as every attempt before: its grants reach that, and nothing else (grants.py).
        results_at=results_at_of_run(deps.settings, stored.request.results_at, stored.experiment, stored.run_id),
    )
    deps.store.register(record)
    # A pass that listed it meanwhile took it for a stray (adopted): a register rewrites what `up` would,
    # never a run's marks, so they are set here, once.
    deps.store.update_if(pod_id, {"run_id": None}, {"run_id": stored.run_id, "attempt": attempt})


def finish(
    run: Sweep,
    run_id: str,
    why: str,
    *,
    tell: str | None,
    ended: str | None = None,
    rented: AttemptRecord | None = None,
) -> None:
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
        run.deps,
        now,
        title("recovery stopped", experiment=stored.experiment),
        f"{tell}. Spent {usd(runs.spent_usd(stored, now))} of {usd(stored.request.envelope_usd)} "
        f"over {len(stored.attempts)} attempt(s).",
        pod_id=stored.latest.pod_id,
        kind=STOPPED_KIND,
        level="warning",
    )
