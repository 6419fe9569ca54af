"""The pod record's state changes that both edges make: the HTTP handlers (a ping, an event, `gpuc down`)
and the reaper (a pod listed again), and the user's acts on a pod's life (`gpuc keep`/`extend`, a tap on the
phone: functions/actions/verbs.py). Each is a compare-and-set on the store, so a request and a pass that
race act once. A refusal is an HttpError (the admin routes answer it; a phone's page says its sentence)."""

from __future__ import annotations

from typing import Any

from gpuc.core import api
from gpuc.core.clock import iso
from gpuc.core.titles import clock, title
from gpuc.functions.app import Deps, announce
from gpuc.functions.deadline import DEADLINE_ALERT, deadline_of, limit_of
from gpuc.functions.edge import HttpError
from gpuc.functions.recovery import runs
from gpuc.functions.store import MARKABLE_STATES, StoredPod


def revive(deps: Deps, pod_id: str, now: float, evidence: str) -> bool:
    """A pod taken for gone (or destroyed) shows it is alive: watch it again. One whose end was
    recorded goes back to "ended" (it must still be destroyed, after a fresh grace); one that vanished
    on its own goes back to "ok" (the silence and state rules apply again). CAS: said once."""
    pod = deps.store.get_pod(pod_id)
    if pod is None or pod.state != "destroyed":
        return False
    changes: dict[str, Any] = {"gone_seen_at": None, "provider_status_since": now, "alerted": None}
    if pod.end_at is not None:
        changes.update(state="ended", destroy_at=now + deps.settings.destroy_grace_s)
        plan = f"its end is recorded: it will be destroyed at {iso(now + deps.settings.destroy_grace_s)}"
    else:
        changes.update(state="ok", destroy_at=None, reason=None)
        plan = "watched again"
    if not deps.store.update_if(pod_id, {"state": "destroyed"}, changes):
        return False
    announce(
        deps,
        now,
        title("still alive: watched again", experiment=pod.experiment),
        f"Check it: gpuc ls. It was taken for gone, but {evidence}; {plan}. "
        f"Pod {pod.pod_id} ({pod.provider}, {pod.experiment}).",
        pod_id=pod_id,
        kind="revived",
        level="warning",
    )
    return True


def record_end(deps: Deps, pod_id: str, now: float, *, end_at: float, by: str, note: str | None) -> None:
    """The ledger end, recorded once: the first end wins (a retried call, or `down` after the reaper,
    does not move it); a note, the user's conclusion, is always kept. The pod (or `down`) destroys it
    next; if that fails, the reaper takes over at destroy_at (F9)."""
    store = deps.store
    ended = store.update_if(
        pod_id,
        {"state": MARKABLE_STATES},
        {
            "state": "ended",
            "end_at": end_at,
            "ended_by": by,
            "destroy_at": now + deps.settings.destroy_grace_s,
            "reason": None,
            "intent": None,  # whatever the phone asked of it is moot now
        },
    )
    if not ended:
        store.update_if(pod_id, {"end_at": None}, {"end_at": end_at, "ended_by": by})
    if note:
        store.update_if(pod_id, {}, {"note": note})
    # An end comes after a verified sync (the pod's), or is the user's word (`down`, which refuses a kept
    # pod unless --force or `gpuc results` copied them): nothing is kept for its results any more.
    clear_kept(deps, pod_id)


def clear_kept(deps: Deps, pod_id: str) -> None:
    deps.store.update_if(pod_id, {}, {"kept_at": None, "kept_until": None})


def record_kept(deps: Deps, pod_id: str, now: float, left_s: float) -> None:
    """The pod says it is kept for its results (its sync failed) and stops itself in `left_s`: the first
    such word is recorded, on the watchdog's clock (CAS, once). From then on the reaper never destroys
    it, and stops it if it still runs a period after `kept_until` (kept window + one period: F16)."""
    deps.store.update_if(
        pod_id,
        {"kept_at": None, "state": MARKABLE_STATES},
        # The pod acted on a phone's "end" (its sync failed): its kept window decides from here, not the reaper.
        {"kept_at": now, "kept_until": now + min(left_s, deps.settings.kept_window_s), "intent": None},
    )


def lease(deps: Deps, pod: StoredPod, now: float, until: float) -> None:
    """`gpuc keep`'s lease: the idle destroy (the agent's, and the reaper's silence kill) waits until then."""
    longest = now + deps.settings.max_hours * 3600
    if until > longest:
        # An unbounded lease would switch the reaper off for this pod: cap it at the pod's hard limit.
        raise HttpError(400, f"json validation error: until is too large (at most max_hours ahead, {iso(longest)})")
    deps.store.update_if(pod.pod_id, {}, {"lease_until": until})


def capped_deadline(pod: StoredPod, deps: Deps) -> StoredPod:
    """No deadline past the pod's start + max_lifetime_hours. `up` refuses a longer --max-hours before
    renting; a laptop whose cap is higher than this watchdog's gets this watchdog's (the safe direction;
    the pod's agent adopts it from its first heartbeat answer)."""
    if pod.deadline_at is None or pod.deadline_at <= (limit := limit_of(pod, deps.settings)):
        return pod
    return pod.model_copy(update={"deadline_at": limit})


def set_deadline(
    deps: Deps, pod: StoredPod, now: float, body: api.DeadlineRequest, *, via: str | None = None
) -> api.DeadlineAnswer:
    """Move the deadline, within the user's cap. The pod hears it in its next heartbeat answer; the reaper
    reckons with it from its next pass. `via`: the phone (a link), said in the notification."""
    if (body.deadline_at is None) == (body.extend_s is None):
        raise HttpError(400, "json validation error: send exactly one of deadline_at and extend_s")
    if pod.state not in MARKABLE_STATES:
        raise HttpError(409, "pod already ended: its deadline no longer applies")
    settings = deps.settings
    current, limit = deadline_of(pod, settings), limit_of(pod, settings)
    # "2 h more" of a deadline already past (the pod kept for its sync, a reaper blind) counts from now.
    asked = body.deadline_at if body.deadline_at is not None else max(current, now) + (body.extend_s or 0.0)
    wanted = max(current, min(asked, limit)) if body.at_least else asked
    if wanted > limit:
        raise HttpError(
            400,
            f"json validation error: deadline_at is too late (at most max_lifetime_hours "
            f"{settings.max_lifetime_hours:g} h after the pod's start, {iso(limit)})",
        )
    if wanted < now:
        raise HttpError(400, "json validation error: deadline_at is in the past (`gpuc down` ends a pod now)")
    if wanted != current:
        move_deadline(deps, pod, now, wanted, via=via, quiet=body.quiet)
        if pod.run_id is not None:
            runs.move_envelope(deps.store, pod.run_id, wanted)
    return api.DeadlineAnswer(deadline_at=wanted, previous=current, limit_at=limit, capped=wanted < asked)


def move_deadline(
    deps: Deps, pod: StoredPod, now: float, wanted: float, *, via: str | None = None, quiet: bool = False
) -> None:
    changes: dict[str, Any] = {"deadline_at": wanted}
    if (pod.alerted or "").startswith(DEADLINE_ALERT):
        # Warned for the old deadline: that warning (and its mark) is void; a later one warns afresh.
        changes.update(alerted=None, alerted_at=None)
        if pod.state == "down":
            changes.update(state="ok", destroy_at=None, reason=None)
    # CAS on the deadline read: a concurrent move (a second `extend`, a budget pull-in) is not overwritten.
    if not deps.store.update_if(pod.pod_id, {"state": pod.state, "deadline_at": pod.deadline_at}, changes):
        raise HttpError(409, "the pod changed meanwhile: try again")
    if quiet:
        return
    source = f" from the {via}" if via else ""
    announce(
        deps,
        now,
        title(f"deadline moved{source}: destroys at {clock(wanted)}", experiment=pod.experiment),
        f"Nothing to do. Its deadline moved{source} from {iso(deadline_of(pod, deps.settings))} to {iso(wanted)}. "
        f"Pod {pod.pod_id} ({pod.provider}, {pod.experiment}).",
        pod_id=pod.pod_id,
        kind="action" if via else "deadline",
    )
