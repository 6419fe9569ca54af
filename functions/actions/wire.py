"""Where the phone's channels meet the verbs (issue 20): which notification gets which buttons, and a tap
from a channel turned into the verb's one sentence. The only place that calls functions/actions/verbs.py
(`offer`, `act`): the channels (core/notify.py, telegram.py, slack.py) know nothing else of it.

Buttons go only on the notifications that ask for a decision, about a pod gpuc started and that has
not ended: a pending destroy (keep 1 h, destroy now), a kept pod (retry sync, stop keep disk, destroy
anyway), a coming deadline (extend 2 h), a budget alert (pause new pods).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from gpuc.core.notify import Action, Level
from gpuc.functions.actions.links import LinkRefused
from gpuc.functions.deadline import DEADLINE_ALERT
from gpuc.functions.store import MARKABLE_STATES, StoredPod

if TYPE_CHECKING:
    from gpuc.functions.app import Deps

log = logging.getLogger("gpuc.functions")

BUDGET_KIND = "budget"  # functions/reaper/budget.py KEY: the budget alert's notification kind
# The pod's own kept nags (an end whose sync failed, the stop coming) and the reaper's word on a kept pod.
KEPT_KINDS = frozenset({"sync_failed", "kept_stopping", "mark", "alert"})
PENDING_KINDS = frozenset({"idle_warning", "mark"})  # "will destroy at T": the pod's agent, or the reaper
DEADLINE_KINDS = frozenset({"deadline_warning"})
POD_KINDS = KEPT_KINDS | PENDING_KINDS | DEADLINE_KINDS


class Refused(Exception):
    """A tap that did nothing, with the sentence for the person (why, and what to do instead)."""


def verbs() -> Any:
    """functions/actions/verbs.py (act, offer, ActionRefused), imported when first needed: verbs imports
    the reaper's transitions, which import the announcer that imports this module."""
    from gpuc.functions.actions import verbs as module

    return module


def offer_kind(pod: StoredPod | None, kind: str, level: Level) -> str | None:
    """The verbs' OfferKind that fits a notification, or None: no buttons."""
    if pod is None:
        return "budget" if kind == BUDGET_KIND and level != "info" else None  # info: the all-clear
    if pod.state not in MARKABLE_STATES or pod.origin == "adopted":
        return None  # ended, or a stray gpuc did not start: nothing a tap could rightly do
    if pod.kept_at is not None and kind in KEPT_KINDS:
        return "kept"
    if kind in DEADLINE_KINDS or (kind == "mark" and (pod.alerted or "").startswith(DEADLINE_ALERT)):
        return "deadline"
    if kind in PENDING_KINDS:
        return "pending_destroy"
    return None


def buttons(deps: Deps, now: float, pod_id: str | None, kind: str, level: Level) -> tuple[Action, ...]:
    """The buttons for a notification, minted fresh. Never raises: a notification without its buttons
    still goes out (F13), and its text says what `gpuc` command does the same."""
    if (pod_id is None and kind != BUDGET_KIND) or (pod_id is not None and kind not in POD_KINDS):
        return ()
    try:
        pod = deps.store.get_pod(pod_id) if pod_id is not None else None
        if pod_id is not None and pod is None:
            return ()
        which = offer_kind(pod, kind, level)
        if which is None:
            return ()
        offers = verbs().offer(deps, pod, which, now)
        return tuple(Action(o.label, o.url, o.token, o.safe) for o in offers)
    except Refused:
        return ()
    except Exception as exc:
        log.error("could not make a notification's buttons: %s", type(exc).__name__)
        return ()


def act(deps: Deps, token: str, now: float, via: str) -> str:
    """What a channel's tap did, as one sentence; raises Refused (nothing changed) with why."""
    module = verbs()
    try:
        return str(module.act(deps, token, now, via).sentence)
    except LinkRefused as exc:
        raise Refused(str(exc)) from None
    except module.ActionRefused as exc:
        raise Refused(str(exc.message)) from None
