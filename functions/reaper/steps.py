"""The reaper's compare-and-set steps on one pod. A kill goes in two phases: "will destroy at T" (mark,
notified), then at T the claim ("destroying", the ledger end recorded), the notification, the destroy
call and the provider's word that it is gone. Every write is conditioned on what this pass read, so a
ping, a `gpuc extend` or a second pass that lands meanwhile wins, and two passes act once. A pod kept
for its results is only ever stopped here, never destroyed (F16)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuc.core.clock import iso
from gpuc.core.titles import clock
from gpuc.functions.app import describe
from gpuc.functions.deadline import alert_key
from gpuc.functions.reaper.alerts import last_push_note, pod_problem, pod_title, tell, tell_destroyed, who
from gpuc.functions.reaper.rules import Ruling, rescue
from gpuc.functions.reaper.state import Pass
from gpuc.functions.store import MARKABLE_STATES, StoredPod

CONFIRM_ATTEMPTS = 3
CONFIRM_DELAY_S = 2.0


def gone_twice(run: Pass, rec: StoredPod) -> bool:
    """One "not found" is not enough to stop watching a pod for good (a provider's list and get can
    lag, or answer from a stale replica): the first pass notes it, a later pass must agree."""
    first = rec.gone_seen_at
    pinged = first is not None and rec.last_seen is not None and rec.last_seen > first
    if first is not None and not pinged and run.now - first >= run.deps.settings.reaper_period_s / 2:
        return True
    if pinged:  # a valid ping since the provider first said "not found": it lives; start over
        run.act_on(rec, "skip", "not found at the provider, but it pings: still watched")
    else:
        run.act_on(rec, "skip", "not found at the provider: taken as gone once the next pass agrees")
    if (first is None or pinged) and not run.dry_run:
        run.deps.store.update_if(rec.pod_id, {"state": rec.state, "gone_seen_at": first}, {"gone_seen_at": run.now})
    return False


def settle_gone(run: Pass, rec: StoredPod) -> None:
    """Gone at the provider, two passes agreeing: success, no destroy call."""
    run.act_on(rec, "confirm", "gone at the provider")
    if run.dry_run:
        return
    expect = {"state": rec.state, "gone_seen_at": rec.gone_seen_at}
    if not run.deps.store.update_if(rec.pod_id, expect, {"state": "destroyed", "destroy_at": None}):
        return
    if rec.state == "destroying":
        tell_destroyed(run, rec, rec.reason or "destroyed")
    elif rec.state in MARKABLE_STATES and rec.origin == "registered":
        # No end was heard from it: the pod may have ended itself while its word could not get through (F2 under
        # faults), so that is named first; the user's next step is the same.
        message = (
            "the provider no longer lists it (it ended itself and its last word never reached the watchdog, was "
            "deleted outside gpuc, or preempted); its ledger row stays open."
        )
        tell(run, rec, "gone at the provider", message, "gone", "warning")


def alert_only(run: Pass, rec: StoredPod, key: str, reason: str, *, every: float | None = None) -> None:
    run.act_on(rec, "alert", reason)
    if run.dry_run:
        return
    if rec.state in ("ok", "down"):
        # From "down" this cancels the mark: the second witness said no.
        changes = {"state": "late", "destroy_at": None, "reason": reason}
        if run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
            rec = rec.model_copy(update=changes)
    pod_problem(run, rec, key, pod_title(rec, "needs a look"), f"{reason}. Pod {who(rec)}.", every=every)


def all_clear(run: Pass, rec: StoredPod) -> None:
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
    action = "stop" if rec.kept_at is not None else "destroy"  # a kept pod is only ever marked for a stop
    planned = f"; the {action} it was marked for is cancelled" if rec.state == "down" or rec.alerted == "down" else ""
    tell(run, rec, "back to normal", f"back to normal{planned}.", "back")


def reap_deadline(run: Pass, rec: StoredPod, ruling: Ruling) -> None:
    """The deadline's two phases. Its mark is reckoned afresh from the deadline every pass, so a ping that
    resets the state cannot cancel it; the claim before the destroy is conditioned on the deadline itself
    (a `gpuc extend` meanwhile wins), not on the seq, so a host pinging every second cannot outrun it."""
    at = ruling.due_at if ruling.due_at is not None else run.now
    marked = deadline_mark(run, rec, ruling, at)
    if marked is None or run.now < at:
        return
    states = ("ended",) if rec.state == "ended" else MARKABLE_STATES
    claim = {"state": states, "deadline_at": rec.deadline_at}
    destroy(run, marked, f"past its deadline, {iso(at)} (--max-hours)", claim)


def deadline_mark(run: Pass, rec: StoredPod, ruling: Ruling, at: float) -> StoredPod | None:
    """Warned once per deadline value ("will destroy at <deadline>"); the state shows it until the pod
    ends. None: not marked in this pass (blind, or the record moved: the next pass reckons again)."""
    if rec.provider in run.blind:
        run.act_on(rec, "skip", f"{ruling.reason}; not marking: the reaper cannot read {rec.provider} this pass")
        return None
    key = alert_key(at)
    warned = rec.alerted == key
    changes: dict[str, Any] = {} if warned else {"alerted": key, "alerted_at": run.now}
    if rec.state != "ended" and (rec.state != "down" or rec.destroy_at != at):
        changes.update(state="down", destroy_at=at, reason=ruling.reason)
    if not changes:
        return rec
    if not run.dry_run:
        states = ("ended",) if rec.state == "ended" else MARKABLE_STATES
        expect = {"state": states, "alerted": rec.alerted, "deadline_at": rec.deadline_at}
        if not run.deps.store.update_if(rec.pod_id, expect, changes):
            return None
        if not warned:
            when = iso(max(at, run.now))
            message = f"{ruling.reason}. It will be destroyed at {when}: `gpuc extend {rec.pod_id} 2h` moves it."
            tell(run, rec, f"deadline: destroys at {clock(max(at, run.now))}", message, "mark", "warning")
    if not warned:
        run.act_on(rec, "mark", f"{ruling.reason}; will destroy at {iso(at)}")
    return rec.model_copy(update=changes)


def mark(run: Pass, rec: StoredPod, ruling: Ruling) -> StoredPod | None:
    """Phase one: "will destroy at T" (or, for a kept pod, "will stop at T"), notified. A ping before T
    cancels it."""
    if rec.provider in run.blind:
        run.act_on(rec, "skip", f"{ruling.reason}; not marking: the reaper cannot read {rec.provider} this pass")
        return None
    at = run.now + run.deps.settings.destroy_grace_s if ruling.due_at is None else max(run.now, ruling.due_at)
    changes: dict[str, Any] = {
        "state": "down",
        "destroy_at": at,
        "reason": ruling.reason,
        "alerted": "down",
        "alerted_at": run.now,
    }
    if not run.dry_run:
        # last_seq in the condition: a ping that lands between our read and this write wins.
        if not run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
            return None
        verb = "stop" if ruling.stop else "destroy"
        if ruling.stop:
            message = (
                f"{ruling.reason}. It will be stopped at {iso(at)}: GPU billing ends, the disk with results/ stays. "
                f"`gpuc results {rec.pod_id}` gets them"
            )
        else:
            message = f"{ruling.reason}. It will be destroyed at {iso(at)} {rescue(rec, ruling)}."
            message += last_push_note(rec, run.now)
        tell(run, rec, f"watchdog: {verb}s at {clock(at)}", message, "mark", "warning")
    run.act_on(rec, "mark", f"{ruling.reason}; will {'stop' if ruling.stop else 'destroy'} at {iso(at)}")
    return rec.model_copy(update=changes)


def stop_kept(run: Pass, rec: StoredPod, reason: str) -> None:
    """Phase two for a pod kept for its results: STOP it (GPU billing ends, the disk stays). The same holds
    as a destroy (blind, young store, clock jump, the cap); afterwards it is watched as a stopped pod."""
    if not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "stop", f"{reason} (dry run: nothing done)")
        return
    changes: dict[str, Any] = {"state": "ok", "destroy_at": None, "reason": None, "alerted": None, "alerted_at": None}
    if not run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes):
        run.destroys -= 1  # another pass, or a ping, got there first
        return
    try:
        run.deps.providers.get(rec.provider).stop(rec.pod_id)
    except Exception as exc:
        detail = describe(exc, run.deps)
        run.go_blind(rec.provider, detail)
        run.act_on(rec, "skip", f"stop failed ({detail}); the next pass tries again")
        tell(run, rec, "stop FAILED: still billing", f"{detail}. The reaper retries.", "destroy_failed", "error")
        return
    run.act_on(rec, "stop", reason)
    message = (
        f"{reason}. Stopped, not destroyed: GPU billing ended; the disk with results/ stays. `gpuc results "
        f"{rec.pod_id}` copies them to your laptop and ends it; `gpuc down {rec.pod_id} --force` destroys them."
    )
    tell(run, rec, "stopped: GPU billing ended, disk kept", message, "kept_stopped", "warning")


def never_kept(run: Pass, rec: StoredPod, reason: str) -> bool:
    """The last line before any destroy call: a pod kept for its results is never destroyed here, whatever
    decided it (kept_gate turns every rule's kill into a stop; this holds even for a path that missed it)."""
    if rec.kept_at is None:
        return True
    run.act_on(rec, "alert", f"{reason}; NOT destroyed: kept for its results (only `gpuc results` or --force ends it)")
    if not run.dry_run and rec.state == "destroying":
        run.deps.store.update_if(
            rec.pod_id, {"state": "destroying"}, {"state": "late", "destroy_at": None, "reason": reason}
        )
    return False


def destroy(run: Pass, rec: StoredPod, reason: str, expect: Mapping[str, Any] | None = None) -> None:
    """Phase two: record the end, notify, destroy, list again. `expect`: the claim's condition (by default
    the state and seq read: a ping that lands meanwhile wins)."""
    if not never_kept(run, rec, reason) or not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "destroy", f"{reason} (dry run: nothing done)")
        return
    changes: dict[str, Any] = {"state": "destroying", "destroy_started_at": run.now, "reason": reason}
    if rec.end_at is None:
        changes.update(end_at=run.now, ended_by="reaper")
    claim: dict[str, Any] = dict(expect) if expect is not None else {"state": rec.state, "last_seq": rec.last_seq}
    # kept_at in the condition: a pod that said "kept for my results" since this pass read it is not destroyed.
    claim["kept_at"] = None
    if not run.deps.store.update_if(rec.pod_id, claim, changes):
        run.destroys -= 1  # another pass, or a ping, got there first
        return
    end_at = changes.get("end_at", rec.end_at)
    message = f"{reason}. Ledger end recorded at {iso(end_at)}.{last_push_note(rec, run.now)}"
    tell(run, rec, "watchdog: destroying", message, "destroying", "warning")
    call_destroy(run, rec.model_copy(update=changes), reason)


def retry_destroy(run: Pass, rec: StoredPod) -> None:
    """A destroy that did not finish (provider error, still listed). Claimed by CAS on its start time,
    and only once it is old enough that no other pass can still be inside it."""
    started = rec.destroy_started_at if rec.destroy_started_at is not None else 0.0
    if run.now - started < run.deps.settings.reaper_period_s / 2:
        return
    reason = rec.reason or "retrying an unfinished destroy"
    if not never_kept(run, rec, reason) or not may_destroy(run, rec, reason):
        return
    if run.dry_run:
        run.act_on(rec, "destroy", f"{reason}, retried (dry run: nothing done)")
        return
    expect = {"state": "destroying", "destroy_started_at": rec.destroy_started_at, "kept_at": None}
    if not run.deps.store.update_if(rec.pod_id, expect, {"destroy_started_at": run.now}):
        run.destroys -= 1
        return
    call_destroy(run, rec, reason)


def may_destroy(run: Pass, rec: StoredPod, reason: str) -> bool:
    if rec.provider in run.blind:
        run.act_on(rec, "skip", f"{reason}; destroy deferred: the reaper cannot read {rec.provider} this pass")
        return False
    if run.hold is not None and (not run.young or rec.origin == "adopted"):
        # A young store suspects only what it never registered: a pod that registered here, with its own
        # key, and then went silent is exactly what this store exists to catch (F5 holds from minute one).
        run.held += 1
        run.act_on(rec, "skip", f"{reason}; destroy deferred: {run.hold}")
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


def call_destroy(run: Pass, rec: StoredPod, reason: str) -> None:
    deps = run.deps
    try:
        provider = deps.providers.get(rec.provider)
        provider.destroy(rec.pod_id)  # idempotent: "already_gone" is success
        gone = provider.confirm_gone(rec.pod_id, clock=deps.clock, attempts=CONFIRM_ATTEMPTS, delay_s=CONFIRM_DELAY_S)
    except Exception as exc:
        detail = describe(exc, deps)
        run.go_blind(rec.provider, detail)  # no more destroys on this provider in this pass
        run.act_on(rec, "skip", f"destroy failed ({detail}); the next pass retries")
        message = f"{detail}. The reaper retries on its next pass."
        tell(run, rec, "destroy FAILED: still billing", message, "destroy_failed", "error")
        return
    if not gone:
        run.act_on(rec, "destroy", f"{reason}; destroy called, still listed: re-checked next pass")
        return
    finish(run, rec, reason)


def finish(run: Pass, rec: StoredPod, reason: str) -> None:
    if not run.deps.store.update_if(rec.pod_id, {"state": "destroying"}, {"state": "destroyed", "destroy_at": None}):
        return
    run.act_on(rec, "destroy", reason)
    tell_destroyed(run, rec, reason)
