"""The pod record's state changes that both edges make: the HTTP handlers (a ping, an event, `gpuc down`)
and the reaper (a pod listed again). Each is a compare-and-set on the store, so a request and a pass that
race act once."""

from __future__ import annotations

from typing import Any

from gpuc.core.clock import iso
from gpuc.functions.app import Deps, announce
from gpuc.functions.store import MARKABLE_STATES


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
        f"gpuc: {pod.name} is still alive",
        f"{pod.pod_id} ({pod.provider}, {pod.experiment}): taken for gone, but {evidence}; {plan}.",
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
        {"kept_at": now, "kept_until": now + min(left_s, deps.settings.kept_window_s)},
    )
