"""A per-pod limit on the phone pushes that signed events cause, by kind.

A pod's token is on a stranger's machine: whoever holds it can sign as many events as they like, each
with the pod's own text. Every accepted event still does what it is for (the ledger end, the record),
only its push is limited: `events_per_hour` pushes per pod per hour of its progress (info, start, sync
ok), and as many of EACH money-critical kind (a job's end, a failed sync, a destroy, a warning), so that
no burst of progress, nor of another kind, can hide the one push that matters. The rest are counted on
the pod's record (a compare-and-set, no list) and told as ONE notification, "N more events from <pod>",
when the hour is over: by the next event after it, or by the reaper's next pass.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuc.core.clock import iso
from gpuc.core.titles import title
from gpuc.functions.app import Deps, announce
from gpuc.functions.store import StoredPod

log = logging.getLogger("gpuc.functions")

WINDOW_S = 3600.0
_CAS_TRIES = 5
# Progress: what a pod says as it goes. They share one budget: a burst of them (or a token's flood) is told
# as one "N more". Every other kind is money-critical (a job's end, a failed sync, a destroy, a warning
# that something will end) and has a budget of its own per kind: no burst of another kind can hold it.
PROGRESS_KINDS = frozenset({"info", "agent_start", "sync_ok"})
_SLOTS = 10_000  # slot numbers per hour in the critical budgets' claims: above any events_per_hour


def admit_event(deps: Deps, pod: StoredPod, kind: str, now: float) -> bool:
    """Count this event against the pod's hour, in its kind's budget; True when it may be pushed."""
    if kind in PROGRESS_KINDS:
        return _admit_progress(deps, pod, kind, now)
    return _admit_critical(deps, pod, kind, now)


def _admit_critical(deps: Deps, pod: StoredPod, kind: str, now: float) -> bool:
    """A money-critical kind: `events_per_hour` pushes per pod, kind and clock hour, each one a slot taken
    with the store's conditional write (no count to race on); a held one is counted with the progress
    ones, for the hour's one "N more". A store that fails lets the push through."""
    release_held(deps, pod, now)  # a new hour first tells what the last one held back
    limit = min(deps.settings.events_per_hour, _SLOTS)
    hour = int(now // WINDOW_S)
    try:
        for slot in range(limit):
            if deps.store.claim_event_seq(f"push:{pod.pod_id}:{kind}", hour * _SLOTS + slot, now, 2 * WINDOW_S):
                return True
    except Exception as exc:
        log.warning("event limit for %s: the store failed (%s), pushing this one", pod.pod_id, type(exc).__name__)
        return True
    _hold(deps, pod, kind, now)
    return False


def _hold(deps: Deps, pod: StoredPod, kind: str, now: float) -> None:
    current: StoredPod | None = pod
    for _ in range(_CAS_TRIES):
        if current is None:
            return
        start, held = current.events_window_at, current.events_held or 0
        new_hour = start is None or not 0 <= now - start < WINDOW_S
        changes: dict[str, Any] = {"events_held": held + 1, "events_held_last": kind}
        if new_hour:
            changes = {"events_window_at": now, "events_sent": 0, "events_held": 1, "events_held_last": kind}
        if deps.store.update_if(pod.pod_id, _window(current), changes):
            if new_hour and held:
                _tell_held(deps, current, now)  # what the hour before held
            return
        current = deps.store.get_pod(pod.pod_id)


def _admit_progress(deps: Deps, pod: StoredPod, kind: str, now: float) -> bool:
    """Count this event against the pod's hour; True when it may be pushed. A new hour first tells what
    the last one held back. A count lost to races (every try) lets the push through: a user who hears one
    event too many loses nothing."""
    limit = deps.settings.events_per_hour
    current: StoredPod | None = pod
    for _ in range(_CAS_TRIES):
        if current is None:
            return True
        start, sent, held = current.events_window_at, current.events_sent or 0, current.events_held or 0
        new_hour = start is None or not 0 <= now - start < WINDOW_S
        changes: dict[str, Any]
        if new_hour:
            changes = {"events_window_at": now, "events_sent": 1, "events_held": None, "events_held_last": None}
        elif sent < limit:
            changes = {"events_sent": sent + 1}
        else:
            changes = {"events_held": held + 1, "events_held_last": kind}
        if deps.store.update_if(pod.pod_id, _window(current), changes):
            if new_hour and held:
                _tell_held(deps, current, now)
            return new_hour or sent < limit
        current = deps.store.get_pod(pod.pod_id)
    log.warning("event limit for %s: too many concurrent events, pushing this one", pod.pod_id)
    return True


def release_held(deps: Deps, pod: StoredPod, now: float) -> bool:
    """The reaper's part: an hour that is over, or a pod that is gone, tells what it held back (once)."""
    if not pod.events_held:
        return False
    current = deps.store.get_pod(pod.pod_id)
    if current is None or not current.events_held:
        return False
    start = current.events_window_at
    over = start is None or not 0 <= now - start < WINDOW_S or current.state == "destroyed"
    if not over:
        return False
    changes = {"events_window_at": None, "events_sent": None, "events_held": None, "events_held_last": None}
    if not deps.store.update_if(pod.pod_id, _window(current), changes):
        return False  # an event or another pass moved it: whoever won tells it
    _tell_held(deps, current, now)
    return True


def _window(pod: StoredPod) -> dict[str, Any]:
    return {
        "events_window_at": pod.events_window_at,
        "events_sent": pod.events_sent,
        "events_held": pod.events_held,
    }


def _tell_held(deps: Deps, pod: StoredPod, now: float) -> None:
    held = pod.events_held or 0
    latest = (pod.events_held_last or "event").replace("_", " ")
    since = f" in the hour from {iso(pod.events_window_at)}" if pod.events_window_at is not None else ""
    announce(
        deps,
        now,
        title(f"sent {held} more events (not pushed)", experiment=pod.experiment),
        f"Look at it: `gpuc ls` and `gpuc logs {pod.pod_id}`; so many is unusual. {held} more events{since} were "
        f"received and recorded but not pushed (at most {deps.settings.events_per_hour} an hour per pod); the "
        f"latest: {latest}. Pod {pod.pod_id} ({pod.provider}, {pod.experiment}).",
        pod_id=pod.pod_id,
        kind="events_held",
        level="warning",
    )
