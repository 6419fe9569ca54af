"""A stand-in for functions/actions/verbs.py (w20a, issue20.md's interface) until it is on main: `offer`
and `act`, and the `/a/<token>` routes that serve them. `install` uses it only where the real one is
missing, so the same tests run against the real verbs once they land.

It does the two safe verbs the page's tests tap (keep: a lease; extend: the deadline, through
handlers.move_deadline) and refuses the rest: the stand-in never destroys anything.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import types
from dataclasses import dataclass
from urllib.parse import parse_qs

import pytest

from gpuc.functions import handlers, transitions
from gpuc.functions.actions import links
from gpuc.functions.actions.html import button_form, esc, html_response
from gpuc.functions.app import Deps
from gpuc.functions.deadline import deadline_of
from gpuc.functions.edge import Request, Response
from gpuc.functions.store import StoredPod

OFFERS: dict[str, tuple[tuple[str, links.Verb, int], ...]] = {
    "pending_destroy": (("keep 1 h", "keep", 3600), ("destroy now", "destroy", 0)),
    "kept": (("retry sync", "retry", 0), ("stop, keep disk", "stop", 0), ("destroy anyway", "anyway", 0)),
    "deadline": (("extend 2 h", "extend", 7200),),
    "budget": (("pause new pods", "pause", 0),),
}
SAFE = ("keep", "extend", "retry", "stop", "pause")


@dataclass(frozen=True)
class Offer:
    label: str
    verb: str
    url: str
    token: str
    safe: bool


@dataclass(frozen=True)
class Acted:
    sentence: str


def offer(deps: Deps, pod: StoredPod | None, kind: str, now: float) -> tuple[Offer, ...]:
    key = links.link_key(deps.store)
    out = []
    for label, verb, param in OFFERS.get(kind, ()):
        pod_id = links.ALL_PODS if pod is None else pod.pod_id
        token = links.mint(key, links.new_claim(verb, pod_id, now, param=param))
        out.append(Offer(label, verb, f"/a/{token}", token, verb in SAFE))
    return tuple(out)


def act(deps: Deps, token: str, now: float, via: str) -> Acted:
    claim = links.read(links.link_key(deps.store), token, now)
    pod = deps.store.get_pod(claim.pod_id)
    if pod is None or claim.verb not in ("keep", "extend"):
        return Acted("the stand-in does not do this one: nothing changed")
    links.claim_once(deps.store, claim, now)
    if claim.verb == "keep":
        until = now + claim.param
        deps.store.update_if(pod.pod_id, {}, {"lease_until": until})
        return Acted(f"{pod.pod_id} is kept for {claim.param // 60} min more")
    transitions.move_deadline(deps, pod, now, max(deadline_of(pod, deps.settings), now) + claim.param)
    return Acted(f"{pod.pod_id}'s deadline moved {claim.param // 3600} h later")


def confirm_route(req: Request, deps: Deps, now: float) -> Response:
    token = req.params["token"]
    try:
        claim = links.read(links.link_key(deps.store), token, now)
    except links.LinkRefused as refused:
        return html_response(410, "Link refused", f"<p>{esc(refused)}</p>")
    return html_response(200, f"{claim.verb} {claim.pod_id}?", button_form(f"/a/{token}", f"yes, {claim.verb}"))


def act_route(req: Request, deps: Deps, now: float) -> Response:
    parse_qs(req.body.decode())  # a form's body; the token is in the path
    try:
        acted = act(deps, req.params["token"], now, "page")
    except links.LinkRefused as refused:
        return html_response(410, "Link refused", f"<p>{esc(refused)}</p>")
    return html_response(200, "Done", f"<p>{esc(acted.sentence)}</p>")


def install(monkeypatch: pytest.MonkeyPatch) -> bool:
    """Use the stand-in where functions/actions/verbs.py is missing; True when it did."""
    if importlib.util.find_spec("gpuc.functions.actions.verbs") is not None:
        return False
    module = types.ModuleType("gpuc.functions.actions.verbs")
    module.__dict__.update(offer=offer, act=act, Offer=Offer, Acted=Acted)
    monkeypatch.setitem(sys.modules, "gpuc.functions.actions.verbs", module)
    token = re.compile(r"/a/(?P<token>[^/]{1,64})")
    routes = (("GET", token, confirm_route), ("POST", token, act_route))
    monkeypatch.setattr(handlers, "ROUTES", handlers.ROUTES + routes)
    return True
