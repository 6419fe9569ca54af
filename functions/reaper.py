"""The reaper: destroys what no in-pod code can, and never kills on uncertainty.

One pass (`reap_once`) = look (every provider read happens first) -> judge each pod -> act. Per pod:

    silent past the limit / stopped too long / paused too long / gpuc-named but never registered /
    ended but still alive
      -> "down": marked "will destroy at T = now + destroy_grace_s" (notified)
      -> at T, judged again: still a kill AND the provider positively shows the pod, ours, in an
         expected state -> "destroying": the ledger end is recorded, notified, destroyed, listed again
      -> "destroyed" once the provider confirms it gone (notified)
    a ping in between cancels the mark ("back", notified).

Alert only, never a kill: the provider reports the GPU busy (F10: cut off from us but working), the
provider says "unknown", a lease (`gpuc keep`) holds, or many pods went silent at once (suspect the
watchdog). A provider error anywhere in a pass makes the pass blind: no mark, no destroy, one alert.
At most max_destroys_per_run destroys per pass. Every state change is a compare-and-set, so two
passes at once act once. A pod the provider does not mark as gpuc's is never touched.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuc.core.api import ReapAction, ReapReport
from gpuc.core.clock import iso
from gpuc.core.errors import GpucError
from gpuc.core.models import Pod, is_gpuc_name
from gpuc.core.notify import Level
from gpuc.core.redact import redact
from gpuc.functions.app import Deps, announce
from gpuc.functions.store import LIVE_STATES, MARKABLE_STATES, StoredPod

log = logging.getLogger("gpuc.reaper")

SILENCE_STATUSES = ("running", "exited")  # a pod that should be pinging
BUSY_RULES = ("silence", "ended", "unregistered")  # rules the provider's GPU reading can veto
CONFIRM_ATTEMPTS = 3
CONFIRM_DELAY_S = 2.0
META_REAPER = "reaper"

ActionKind = Literal["warn", "mark", "cancel", "destroy", "alert", "skip", "confirm"]


@dataclass(frozen=True)
class Verdict:
    kind: Literal["fine", "wait", "alert", "kill"]
    rule: str = ""
    reason: str = ""
    # When the provider itself reports the state (stopped, paused, unregistered), the deadline is known
    # in advance: the warning goes out one grace ahead so the destroy lands at limit + one period.
    due_at: float | None = None


FINE = Verdict("fine")
WAIT = Verdict("wait")


@dataclass
class Sight:
    """What the providers showed in this pass."""

    pods: dict[str, Pod] = field(default_factory=dict)  # pod id -> live pod of a known record
    gone: set[str] = field(default_factory=set)  # positively gone (absent, and `get` agrees)
    strays: list[tuple[str, Pod]] = field(default_factory=list)  # gpuc pods with no record
    blind: dict[str, str] = field(default_factory=dict)  # provider -> why it could not be read
    read: list[str] = field(default_factory=list)  # providers listed without error this pass


@dataclass
class Run:
    deps: Deps
    now: float
    dry_run: bool
    report: ReapReport
    blind: bool = False
    fleet_suspect: bool = False
    destroys: int = 0
    capped: int = 0

    def act(self, pod_id: str, provider: str, action: ActionKind, reason: str) -> None:
        self.report.actions.append(ReapAction(pod_id=pod_id, provider=provider, action=action, reason=reason))

    def act_on(self, rec: StoredPod, action: ActionKind, reason: str) -> None:
        self.act(rec.pod_id, rec.provider, action, reason)

    def go_blind(self) -> None:
        self.blind = True
        self.report.blind = True


def reap_once(deps: Deps, now: float, dry_run: bool = False) -> ReapReport:
    """One pass. Dry run: providers are read, nothing is written, notified or destroyed."""
    run = Run(deps, now, dry_run, ReapReport(ran_at=now, dry_run=dry_run))
    sight = Sight()
    try:
        records = deps.store.list_pods(LIVE_STATES)
        sight = look(deps, records)
        if sight.blind:
            run.go_blind()
        alert_blind(run, sight)
        records = [track_status(run, r, sight) for r in records] + adopt_strays(run, sight)
        run.fleet_suspect = fleet_silent(run, records, sight)
        for rec in records:
            reap_guarded(run, rec, sight)
        alert_cap(run)
        alert_balances(run, sight)
    except Exception as exc:
        if not dry_run:
            record_failed_run(deps, now, exc)
        raise
    finally:
        flush(deps)
    if not dry_run:
        record_run(deps, now, run.report, sight)
    return run.report


def flush(deps: Deps) -> None:
    try:
        deps.notifier.flush()
    except Exception as exc:  # F13: the phone being down is never the reaper's problem
        log.error("notifier flush failed: %s", type(exc).__name__)


def look(deps: Deps, records: list[StoredPod]) -> Sight:
    """Every provider read of the pass, before any decision: a pass that cannot see does not act."""
    sight = Sight()
    names = dict.fromkeys([r.provider for r in records] + list(deps.providers.scan))
    for name in names:
        try:
            look_at(deps, name, [r for r in records if r.provider == name], sight)
        except Exception as exc:
            sight.blind[name] = describe(exc, deps)
        else:
            sight.read.append(name)
    return sight


def look_at(deps: Deps, name: str, records: list[StoredPod], sight: Sight) -> None:
    provider = deps.providers.get(name)
    known = {r.pod_id for r in records}
    for pod in provider.list_pods():
        if pod.status == "terminated":
            continue
        if pod.id in known:
            sight.pods[pod.id] = pod
        elif pod.managed and is_gpuc_name(pod.name):
            sight.strays.append((name, pod))
    for rec in records:
        if rec.pod_id in sight.pods:
            continue
        # Absent from a listing is not proof: a list call that returns too little is how a peer went
        # blind. Only `get` saying "gone" counts.
        current = provider.get(rec.pod_id)
        if current is None or current.status == "terminated":
            sight.gone.add(rec.pod_id)
        else:
            sight.pods[rec.pod_id] = current


def describe(exc: BaseException, deps: Deps) -> str:
    text = exc.message if isinstance(exc, GpucError) else type(exc).__name__
    return redact(text, deps.secrets())[:300]


def track_status(run: Run, rec: StoredPod, sight: Sight) -> StoredPod:
    """Remember since when the provider has shown the current status: "stopped for 24 h" is measured
    from the first pass that saw it stopped (never earlier, so never too soon)."""
    pod = sight.pods.get(rec.pod_id)
    if pod is None or pod.status == rec.provider_status:
        return rec
    changes: dict[str, Any] = {"provider_status": pod.status, "provider_status_since": run.now}
    if rec.provider_status in SILENCE_STATUSES and pod.status in SILENCE_STATUSES:
        # running <-> exited (RunPod restarts an exited container) is one state for the silence clock:
        # a crash-looping container that never pinged must not restart its clock on every flip.
        changes.pop("provider_status_since")
    if not run.dry_run:
        run.deps.store.update_if(rec.pod_id, {"provider_status": rec.provider_status}, changes)
    return rec.model_copy(update=changes)


def adopt_strays(run: Run, sight: Sight) -> list[StoredPod]:
    """gpuc pods at a provider that were never registered (the laptop crashed mid-`up`, F11): keep a
    record from first sight, so their age is known even when the provider gives no creation time."""
    out: list[StoredPod] = []
    for provider, pod in sight.strays:
        if run.deps.store.get_pod(pod.id) is not None:
            continue  # known and finished: not a stray
        rec = StoredPod(
            pod_id=pod.id,
            provider=provider,
            name=pod.name,
            experiment=pod.experiment or "?",
            gpu=pod.gpu,
            price_per_hour=pod.price_per_hour,
            started_at=pod.created_at,
            registered_at=run.now,
            interruptible=pod.interruptible,
            origin="adopted",
            provider_status=pod.status,
            provider_status_since=run.now,
        )
        if run.dry_run or run.deps.store.adopt(rec):
            sight.pods[pod.id] = pod
            out.append(rec)
    return out


def limit(run: Run, rec: StoredPod, name: str) -> float:
    override: float | None = getattr(rec.policy, name)
    return override if override is not None else float(getattr(run.deps.settings, name))


def silent_since(rec: StoredPod) -> float:
    if rec.last_seen is not None:
        return rec.last_seen
    # Never pinged yet: the clock starts when it was first seen running, so a slow image pull or
    # upload before the agent starts is not silence.
    if rec.provider_status in SILENCE_STATUSES and rec.provider_status_since is not None:
        return max(rec.registered_at, rec.provider_status_since)
    return rec.registered_at


def is_silent(run: Run, rec: StoredPod) -> bool:
    return run.now - silent_since(rec) >= limit(run, rec, "silence_limit_s")


def fleet_silent(run: Run, records: list[StoredPod], sight: Sight) -> bool:
    """Many pods silent at once points at the watchdog or its network, not at the pods."""
    settings = run.deps.settings
    fleet = [
        r
        for r in records
        if r.origin == "registered"
        and r.state in MARKABLE_STATES
        and (pod := sight.pods.get(r.pod_id)) is not None
        and pod.status in SILENCE_STATUSES
    ]
    silent = sum(1 for r in fleet if is_silent(run, r))
    suspect = silent >= settings.fleet_silence_min_pods and silent >= settings.fleet_silence_fraction * len(
        fleet
    )
    run_problem(
        run,
        "fleet",
        suspect,
        title=f"gpuc: {silent} of {len(fleet)} pods silent at once",
        message="Suspecting the watchdog or its network, not the pods: alerting only, destroying nothing "
        "for silence until they ping again.",
        clear_title="gpuc: the fleet is pinging again",
    )
    return suspect


def reap_guarded(run: Run, rec: StoredPod, sight: Sight) -> None:
    try:
        reap_pod(run, rec, sight)
    except Exception as exc:  # one odd pod must not stop the pass for the others
        log.error("reaper: pod %s: %s", rec.pod_id, describe(exc, run.deps))
        run.act_on(rec, "skip", f"error while checking it ({type(exc).__name__}); the next pass tries again")


def reap_pod(run: Run, rec: StoredPod, sight: Sight) -> None:
    if rec.pod_id in sight.gone:
        settle_gone(run, rec)
        return
    pod = sight.pods.get(rec.pod_id)
    if pod is None:  # its provider could not be read
        if rec.state == "down" and rec.destroy_at is not None and run.now >= rec.destroy_at:
            run.act_on(rec, "skip", "due for destroy, but the reaper is blind: deferred")
        return
    if not pod.managed:
        alert_only(run, rec, "foreign", "the provider does not mark it as gpuc's: never touched")
        return
    if rec.state == "destroying":
        retry_destroy(run, rec)
        return
    verdict = judge(run, rec, pod)
    if verdict.kind == "wait":
        return
    if verdict.kind == "fine":
        all_clear(run, rec)
        return
    if verdict.kind == "alert":
        alert_only(run, rec, verdict.rule, verdict.reason)
        return
    why_not = veto(run, rec, pod, verdict)
    if why_not is not None:
        alert_only(
            run, rec, f"{verdict.rule}:{why_not[0]}", f"{verdict.reason}; not destroying: {why_not[1]}"
        )
        return
    if rec.state in ("ok", "late"):
        marked = mark(run, rec, verdict)
        if marked is None:
            return
        rec = marked
    if rec.destroy_at is not None and run.now >= rec.destroy_at:
        destroy(run, rec, verdict.reason)


def judge(run: Run, rec: StoredPod, pod: Pod) -> Verdict:
    """Pure: what this pod's situation calls for, before any veto."""
    now, settings = run.now, run.deps.settings
    if rec.state == "ended":
        if rec.destroy_at is not None and now >= rec.destroy_at:
            return Verdict(
                "kill", "ended", f"ended by {rec.ended_by or '?'} but still {pod.status} at the provider"
            )
        return WAIT
    grace = settings.destroy_grace_s
    if rec.origin == "adopted":
        # Warned one grace ahead so the destroy lands at the grace (SPEC F11: grace + one period); a
        # registration before then still rescues it (register turns it into a normal, pinging pod).
        born = pod.created_at if pod.created_at is not None else rec.registered_at
        if now - born >= settings.unregistered_grace_s - settings.destroy_grace_s:
            return Verdict(
                "kill",
                "unregistered",
                f"a gpuc pod never registered, {minutes(now - born)} old (did `up` crash?)",
                due_at=born + settings.unregistered_grace_s,
            )
        return FINE
    quiet = minutes(now - silent_since(rec))
    if pod.status in SILENCE_STATUSES:
        return Verdict("kill", "silence", f"no heartbeat for {quiet}") if is_silent(run, rec) else FINE
    status_since = rec.provider_status_since if rec.provider_status_since is not None else now
    since = now - status_since
    for status, name, text in (
        ("stopped", "stopped_limit_s", "stopped for {} (a stopped pod bills its disk)"),
        ("paused", "paused_limit_s", "paused (outbid) for {}"),
    ):
        if pod.status == status and since >= limit(run, rec, name) - grace:
            return Verdict("kill", status, text.format(minutes(since)), due_at=status_since + limit(run, rec, name))
    if pod.status in ("provisioning", "unknown") and is_silent(run, rec):
        return Verdict(
            "alert",
            pod.status,
            f"provider status {pod.status} ({pod.raw_status or '-'}), no heartbeat for {quiet}",
        )
    return FINE


def veto(run: Run, rec: StoredPod, pod: Pod, verdict: Verdict) -> tuple[str, str] | None:
    """A second witness that says "do not kill": (key, why)."""
    settings = run.deps.settings
    if pod.status == "unknown":
        return "unknown", f"the provider reports its state as unknown ({pod.raw_status or '-'})"
    if rec.state != "ended" and rec.lease_until is not None and run.now < rec.lease_until:
        return "lease", f"kept until {iso(rec.lease_until)} (gpuc keep)"
    busy = pod.gpu_util_pct
    if verdict.rule in BUSY_RULES and busy is not None and busy >= settings.idle_gpu_pct:
        return (
            "busy",
            f"the provider reports its GPU {busy:.0f}% busy: working, but cut off from the watchdog?",
        )
    if verdict.rule == "silence" and run.fleet_suspect:
        return "fleet", "many pods went silent at once: suspecting the watchdog, not the pods"
    return None


def mark(run: Run, rec: StoredPod, verdict: Verdict) -> StoredPod | None:
    """Phase one: "will destroy at T", notified. A ping before T cancels it."""
    if run.blind:
        run.act_on(rec, "skip", f"{verdict.reason}; not marking: the reaper is blind this pass")
        return None
    at = run.now + run.deps.settings.destroy_grace_s if verdict.due_at is None else max(run.now, verdict.due_at)
    changes: dict[str, Any] = {
        "state": "down",
        "destroy_at": at,
        "reason": verdict.reason,
        "alerted": "down",
        "alerted_at": run.now,
    }
    if not run.dry_run:
        # last_seq in the condition: a ping that lands between our read and this write wins.
        if not run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
            return None
        message = f"{verdict.reason}. It will be destroyed at {iso(at)} unless it pings again."
        tell(run, rec, f"gpuc: will destroy {rec.name} at {iso(at)}", message, "mark", "warning")
    run.act_on(rec, "mark", f"{verdict.reason}; will destroy at {iso(at)}")
    return rec.model_copy(update=changes)


def destroy(run: Run, rec: StoredPod, reason: str) -> None:
    """Phase two: record the end, notify, destroy, list again."""
    if not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "destroy", f"{reason} (dry run: nothing done)")
        return
    changes: dict[str, Any] = {"state": "destroying", "destroy_started_at": run.now, "reason": reason}
    if rec.end_at is None:
        changes.update(end_at=run.now, ended_by="reaper")
    if not run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
        run.destroys -= 1  # another pass, or a ping, got there first
        return
    end_at = changes.get("end_at", rec.end_at)
    message = f"{reason}. Ledger end recorded at {iso(end_at)}."
    tell(run, rec, f"gpuc: destroying {rec.name}", message, "destroying", "warning")
    call_destroy(run, rec.model_copy(update=changes), reason)


def retry_destroy(run: Run, rec: StoredPod) -> None:
    """A destroy that did not finish (provider error, still listed). Claimed by CAS on its start time,
    and only once it is old enough that no other pass can still be inside it."""
    started = rec.destroy_started_at if rec.destroy_started_at is not None else 0.0
    if run.now - started < run.deps.settings.reaper_period_s / 2:
        return
    reason = rec.reason or "retrying an unfinished destroy"
    if not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "destroy", f"{reason}, retried (dry run: nothing done)")
        return
    expect = {"state": "destroying", "destroy_started_at": rec.destroy_started_at}
    if not run.deps.store.update_if(rec.pod_id, expect, {"destroy_started_at": run.now}):
        run.destroys -= 1
        return
    call_destroy(run, rec, reason)


def may_destroy(run: Run, rec: StoredPod, reason: str) -> bool:
    if run.blind:
        run.act_on(rec, "skip", f"{reason}; destroy deferred: the reaper is blind this pass")
        return False
    if run.destroys >= run.deps.settings.max_destroys_per_run:
        run.capped += 1
        run.act_on(
            rec,
            "skip",
            f"{reason}; destroy deferred: at most {run.deps.settings.max_destroys_per_run} per pass",
        )
        return False
    run.destroys += 1
    return True


def call_destroy(run: Run, rec: StoredPod, reason: str) -> None:
    deps = run.deps
    try:
        provider = deps.providers.get(rec.provider)
        provider.destroy(rec.pod_id)  # idempotent: "already_gone" is success
        gone = provider.confirm_gone(
            rec.pod_id, clock=deps.clock, attempts=CONFIRM_ATTEMPTS, delay_s=CONFIRM_DELAY_S
        )
    except Exception as exc:
        run.go_blind()  # a provider error anywhere: no more destroys this pass
        detail = describe(exc, deps)
        run.act_on(rec, "skip", f"destroy failed ({detail}); the next pass retries")
        message = f"{detail}. The reaper retries on its next pass."
        tell(run, rec, f"gpuc: could not destroy {rec.name}", message, "destroy_failed", "error")
        return
    if not gone:
        run.act_on(rec, "destroy", f"{reason}; destroy called, still listed: re-checked next pass")
        return
    finish(run, rec, reason)


def finish(run: Run, rec: StoredPod, reason: str) -> None:
    if not run.deps.store.update_if(
        rec.pod_id, {"state": "destroying"}, {"state": "destroyed", "destroy_at": None}
    ):
        return
    run.act_on(rec, "destroy", reason)
    tell_destroyed(run, rec, reason)


def settle_gone(run: Run, rec: StoredPod) -> None:
    """Already gone at the provider: success, no destroy call."""
    run.act_on(rec, "confirm", "gone at the provider")
    if run.dry_run:
        return
    if not run.deps.store.update_if(
        rec.pod_id, {"state": rec.state}, {"state": "destroyed", "destroy_at": None}
    ):
        return
    if rec.state == "destroying":
        tell_destroyed(run, rec, rec.reason or "destroyed")
    elif rec.state in MARKABLE_STATES and rec.origin == "registered":
        message = "the provider no longer lists it (deleted outside gpuc, or preempted); its ledger row stays open."
        tell(run, rec, f"gpuc: {rec.name} is gone", message, "gone", "warning")


def alert_only(run: Run, rec: StoredPod, key: str, reason: str) -> None:
    run.act_on(rec, "alert", reason)
    if run.dry_run:
        return
    if rec.state in ("ok", "down"):
        # From "down" this cancels the mark: the second witness said no.
        changes = {"state": "late", "destroy_at": None, "reason": reason}
        if run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
            rec = rec.model_copy(update=changes)
    pod_problem(run, rec, key, f"gpuc: {rec.name} needs a look", f"{who(rec)}: {reason}.")


def pod_problem(run: Run, rec: StoredPod, key: str, title: str, message: str) -> None:
    """Notify on a new problem, then nag every nag_interval_s while it lasts (CAS: once per pass)."""
    nagging = rec.alerted == key
    if nagging and rec.alerted_at is not None and run.now - rec.alerted_at < run.deps.settings.nag_interval_s:
        return
    expect = {"alerted": rec.alerted, "alerted_at": rec.alerted_at}
    if not run.deps.store.update_if(rec.pod_id, expect, {"alerted": key, "alerted_at": run.now}):
        return
    if nagging:
        run.act_on(rec, "warn", f"still: {message}")
        title = f"{title} (still)"
    announce(run.deps, run.now, title, message, pod_id=rec.pod_id, kind="alert", level="warning")


def all_clear(run: Run, rec: StoredPod) -> None:
    """Nothing wrong now. If something was wrong (or notified) before: cancel it and say so."""
    store = run.deps.store
    if rec.state in ("late", "down"):
        expect: dict[str, Any] = {"state": rec.state, "last_seq": rec.last_seq}
    elif rec.alerted is not None:  # a ping already reset the state; the phone has not heard yet
        expect = {"alerted": rec.alerted, "alerted_at": rec.alerted_at}
    else:
        return
    run.act_on(rec, "cancel", "back to normal")
    if run.dry_run:
        return
    changes = {"state": "ok", "destroy_at": None, "reason": None, "alerted": None, "alerted_at": None}
    if rec.state not in ("late", "down"):
        changes.pop("state")
    if not store.update_if(rec.pod_id, expect, changes):
        return
    planned = (
        "; the destroy it was marked for is cancelled" if rec.state == "down" or rec.alerted == "down" else ""
    )
    tell(run, rec, f"gpuc: {rec.name} is back", f"back to normal{planned}.", "back")


def run_problem(
    run: Run,
    key: str,
    active: bool,
    *,
    title: str,
    message: str,
    clear_title: str,
    detail: str = "",
    level: Level = "warning",
) -> None:
    """A problem of the whole pass (blind, fleet, cap): one alert, nagged, and one all-clear."""
    if run.dry_run:
        if active:
            run.act("*", detail or "*", "alert", title)
        return
    store = run.deps.store
    meta = store.get_meta(key)
    value: Mapping[str, Any] = meta.value if meta else {}
    was = bool(value.get("active"))
    if active:
        due = not was or value.get("detail") != detail
        due = due or run.now - float(value.get("alerted_at", 0.0)) >= run.deps.settings.nag_interval_s
        if not due:
            return
        new: dict[str, Any] = {"active": True, "alerted_at": run.now, "detail": detail}
    elif was:
        new = {"active": False}
    else:
        return
    if not store.put_meta(key, new, meta.version if meta else None):
        return  # another pass said it
    run.act("*", detail or "*", "alert", title if active else clear_title)
    text = message if active else "Back to normal."
    announce(
        run.deps, run.now, title if active else clear_title, text, kind=key, level=level if active else "info"
    )


def alert_blind(run: Run, sight: Sight) -> None:
    names = ", ".join(sorted(sight.blind))
    reasons = "; ".join(f"{name}: {why}" for name, why in sorted(sight.blind.items()))
    run_problem(
        run,
        "blind",
        bool(sight.blind),
        title=f"gpuc: reaper blind ({names})",
        message=f"Cannot read {reasons}. Nothing is marked or destroyed until it can see again.",
        clear_title="gpuc: the reaper can see again",
        detail=names,
        level="error",
    )


def alert_cap(run: Run) -> None:
    cap = run.deps.settings.max_destroys_per_run
    run_problem(
        run,
        "cap",
        run.capped > 0,
        title=f"gpuc: destroy cap reached ({cap} per pass)",
        message=f"{run.capped} more destroys were deferred to the next pass. Many pods due at once is "
        "unusual: check `gpuc ls`.",
        clear_title="gpuc: destroys are under the cap again",
    )


def alert_balances(run: Run, sight: Sight) -> None:
    """Per provider account, alert only: too low (pods stop when it hits zero, mid-run, data unsynced)
    or above the user's cap (what a leaked key or a runaway loop could spend). Transitions + nag, as
    run_problem does. Read after every destroy of the pass: a balance read can never delay a kill."""
    settings = run.deps.settings
    for name in sight.read:
        try:
            usd = run.deps.providers.get(name).balance().balance_usd
        except Exception as exc:  # a missing balance is not a problem of the fleet: log, no alert
            log.warning("reaper: balance of %s unreadable: %s", name, describe(exc, run.deps))
            continue
        run_problem(
            run,
            f"balance_low:{name}",
            usd < settings.balance_low_usd,
            title=f"gpuc: {name} balance low (${usd:.2f})",
            message=f"The {name} balance is ${usd:.2f}, below ${settings.balance_low_usd:.2f}: pods stop "
            "when it reaches zero. Top up, or sync and end your runs.",
            clear_title=f"gpuc: {name} balance is above ${settings.balance_low_usd:.2f} again",
            detail=name,
        )
        run_problem(
            run,
            f"balance_cap:{name}",
            usd > settings.balance_cap_usd,
            title=f"gpuc: {name} balance above your cap (${usd:.2f})",
            message=f"The {name} balance is ${usd:.2f}, above your cap of ${settings.balance_cap_usd:.2f}: "
            "that is what a leaked key could spend. Keep less on the account.",
            clear_title=f"gpuc: {name} balance is under your cap again",
            detail=name,
        )


def record_run(deps: Deps, now: float, report: ReapReport, sight: Sight) -> None:
    """The reaper's own heartbeat (F14): `gpuc ls` and `gpuc doctor` read it through /v1/status."""
    _put_meta(deps, {"last_run": now, "blind": sorted(sight.blind), "actions": len(report.actions)})


def record_failed_run(deps: Deps, now: float, exc: BaseException) -> None:
    """A pass that crashed is not a run: last_run stays where it was, so a crashing reaper goes stale."""
    try:
        meta = deps.store.get_meta(META_REAPER)
        value = dict(meta.value) if meta else {}
        _put_meta(deps, {**value, "last_error": describe(exc, deps), "last_attempt": now})
    except Exception as inner:
        log.error("reaper: could not record a failed pass: %s", type(inner).__name__)


def _put_meta(deps: Deps, value: Mapping[str, Any]) -> None:
    for _ in range(3):  # last writer wins; the CAS only keeps two writers from tearing it
        meta = deps.store.get_meta(META_REAPER)
        if deps.store.put_meta(META_REAPER, value, meta.version if meta else None):
            return


def reap_safely(deps: Deps, dry_run: bool = False) -> ReapReport | None:
    """One pass that never raises: the loop must survive anything one pass does."""
    try:
        return reap_once(deps, deps.clock.now(), dry_run=dry_run)
    except Exception as exc:
        log.error("reaper pass failed: %s", describe(exc, deps))
        return None


def run_loop(deps: Deps, interval_s: float, stop: threading.Event) -> None:
    while not stop.is_set():
        reap_safely(deps)
        stop.wait(interval_s)


def tell(run: Run, rec: StoredPod, title: str, message: str, kind: str, level: Level = "info") -> None:
    """A notification about one pod, sent at this pass's time; the message opens with which pod it is."""
    announce(run.deps, run.now, title, f"{who(rec)}: {message}", pod_id=rec.pod_id, kind=kind, level=level)


def tell_destroyed(run: Run, rec: StoredPod, reason: str) -> None:
    message = f"{reason}. Confirmed gone at the provider.{cost_text(rec)}"
    tell(run, rec, f"gpuc: destroyed {rec.name}", message, "destroyed")


def who(rec: StoredPod) -> str:
    return f"{rec.pod_id} ({rec.provider}, {rec.experiment})"


def minutes(seconds: float) -> str:
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def cost_text(rec: StoredPod) -> str:
    if rec.price_per_hour is None or rec.started_at is None or rec.end_at is None:
        return ""
    hours = max(0.0, rec.end_at - rec.started_at) / 3600
    return f" Ran {hours:.2f} h, about ${hours * rec.price_per_hour:.2f}."
