"""Which buttons a notification or the status page carries, each a capability link minted fresh.

Buttons go only where a decision is asked, about a pod gpuc started and that has not ended: a pending
destroy (keep 1 h, destroy now), a kept pod (retry sync, stop keep disk, destroy anyway), a coming deadline
(extend 2 h), a budget alert (pause new pods). What a tap then does is functions/actions/verbs.py's.

Below the announcer on purpose: every notification passes through here, and this module needs only the
store, the settings and the link key (functions/links.py), never the actions that answer a tap nor the
transitions that notify: the announcer (functions/app.py) imports it, and the actions import the announcer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from gpuc.core.notify.message import Action, Level
from gpuc.core.settings import Settings
from gpuc.functions.deadline import DEADLINE_ALERT
from gpuc.functions.links import ALL_PODS, Verb, link_key, mint, new_claim
from gpuc.functions.store import MARKABLE_STATES, Store, StoredPod

log = logging.getLogger("gpuc.functions")

OfferKind = Literal["pending_destroy", "kept", "kept_stopped", "running", "deadline", "budget", "recovering"]
# May act straight from a channel's button (ntfy `http`, a Telegram callback): each is undone by waiting or
# by another tap. destroy and anyway act only from their confirmation page.
# Stopping a recovery loses nothing pushed: at worst a paused instance (billing its disk only) is destroyed.
SAFE_VERBS: frozenset[Verb] = frozenset({"keep", "extend", "retry", "stop", "pause", "norecover"})
KEEP_S = 3600
EXTEND_S = 2 * 3600
LABELS: dict[Verb, str] = {
    "keep": "keep 1 h",
    "extend": "extend 2 h",
    "destroy": "destroy now",
    "retry": "retry sync",
    "stop": "stop, keep disk",
    "anyway": "destroy anyway",
    "pause": "pause new pods",
    "page": "status page",
    "norecover": "stop recovery",
}
_OFFERS: dict[OfferKind, tuple[tuple[Verb, int], ...]] = {
    "pending_destroy": (("keep", KEEP_S), ("destroy", 0)),
    "kept": (("retry", 0), ("stop", 0), ("anyway", 0)),
    "kept_stopped": (("anyway", 0),),  # its agent cannot run: retry and stop no longer apply
    # The status page's running pod: what a notification offers, all at hand.
    "running": (("keep", KEEP_S), ("extend", EXTEND_S), ("destroy", 0)),
    "deadline": (("extend", EXTEND_S),),
    "budget": (("pause", 0),),
    "recovering": (("norecover", 0),),  # a re-rent after an outbid: one tap stops recovering the run
}
BUDGET_KIND = "budget"  # functions/reaper/budget.py KEY: the budget alert's notification kind
# The pod's own kept nags (an end whose sync failed, the stop coming) and the reaper's word on a kept pod.
KEPT_KINDS = frozenset({"sync_failed", "kept_stopping", "mark", "alert"})
PENDING_KINDS = frozenset({"idle_warning", "mark"})  # "will destroy at T": the pod's agent, or the reaper
DEADLINE_KINDS = frozenset({"deadline_warning"})
RECOVERING_KINDS = frozenset({"recovering"})  # functions/recovery/rerent.py RECOVERING_KIND
POD_KINDS = KEPT_KINDS | PENDING_KINDS | DEADLINE_KINDS | RECOVERING_KINDS


@dataclass(frozen=True)
class Offer:
    label: str  # "keep 1 h"
    verb: Verb
    url: str  # <public base>/a/<token>: a GET shows its confirmation page, a POST acts
    token: str  # also a Telegram callback_data
    safe: bool  # may act from a channel's own button; else the button opens the page


def public_base(settings: Settings, asked_at: str | None = None) -> str:
    """The watchdog as a phone reaches it: GPUC_PUBLIC_URL, else the address a request came in on (a
    Function URL's own host), else the watchdog URL of the settings."""
    return (settings.public_url or asked_at or settings.watchdog_url).rstrip("/")


def offer(store: Store, settings: Settings, pod: StoredPod | None, kind: OfferKind, now: float) -> tuple[Offer, ...]:
    """The actions that fit `kind`, each link minted fresh (pod None: budget). A pod id that cannot be put
    in a link gets no buttons: its notification still goes out."""
    key = link_key(store)
    offers = []
    for verb, param in _OFFERS[kind]:
        pod_id = ALL_PODS if verb == "pause" else (pod.pod_id if pod is not None else "")
        try:
            token = mint(key, new_claim(verb, pod_id, now, param=param))
        except ValueError:
            return ()
        offers.append(Offer(LABELS[verb], verb, f"{public_base(settings)}/a/{token}", token, verb in SAFE_VERBS))
    return tuple(offers)


def offer_kind(pod: StoredPod | None, kind: str, level: Level) -> OfferKind | None:
    """The offers that fit a notification, or None: no buttons."""
    if pod is None:
        return "budget" if kind == BUDGET_KIND and level != "info" else None  # info: the all-clear
    if pod.state not in MARKABLE_STATES or pod.origin == "adopted":
        return None  # ended, or a stray gpuc did not start: nothing a tap could rightly do
    if kind in RECOVERING_KINDS:
        return "recovering" if pod.run_id is not None else None
    if pod.kept_at is not None and kind in KEPT_KINDS:
        return "kept"
    if kind in DEADLINE_KINDS or (kind == "mark" and (pod.alerted or "").startswith(DEADLINE_ALERT)):
        return "deadline"
    if kind in PENDING_KINDS:
        return "pending_destroy"
    return None


def buttons(
    store: Store, settings: Settings, now: float, pod_id: str | None, kind: str, level: Level
) -> tuple[Action, ...]:
    """The buttons for a notification, minted fresh. Never raises: a notification without its buttons
    still goes out (F13), and its text says what `gpuc` command does the same."""
    if (pod_id is None and kind != BUDGET_KIND) or (pod_id is not None and kind not in POD_KINDS):
        return ()
    try:
        pod = store.get_pod(pod_id) if pod_id is not None else None
        if pod_id is not None and pod is None:
            return ()
        which = offer_kind(pod, kind, level)
        if which is None:
            return ()
        return tuple(Action(o.label, o.url, o.token, o.safe) for o in offer(store, settings, pod, which, now))
    except Exception as exc:
        log.error("could not make a notification's buttons: %s", type(exc).__name__)
        return ()
