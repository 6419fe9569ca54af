"""A stand-in for w20a's functions/actions/verbs.py (offer, act, ActionRefused) on the real capability
links (links.py: signed, expiring, single-use in the store), recording what it did; and the `/a/<token>`
routes where verbs.py's are not merged yet. LEAD: after the merge, `install` may give way to the real
verbs (drop the `verbs` replacement and the route patch)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuc.functions import handlers
from gpuc.functions.actions import wire
from gpuc.functions.actions.html import esc, html_response
from gpuc.functions.actions.links import Verb, claim_once, link_key, mint, new_claim, read
from gpuc.functions.app import Deps
from gpuc.functions.edge import HttpError, Request, Response
from gpuc.functions.store import SqliteStore, StoredPod

SAFE: frozenset[str] = frozenset({"keep", "extend", "retry", "stop", "pause"})
OFFERS: dict[str, tuple[tuple[Verb, str], ...]] = {
    "pending_destroy": (("keep", "keep 1 h"), ("destroy", "destroy now")),
    "kept": (("retry", "retry sync"), ("stop", "stop, keep disk"), ("anyway", "destroy anyway")),
    "deadline": (("extend", "extend 2 h"),),
    "budget": (("pause", "pause new pods"),),
}


class ActionRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Offer:
    label: str
    verb: Verb
    url: str
    token: str
    safe: bool


@dataclass(frozen=True)
class Acted:
    verb: str
    pod_id: str
    sentence: str


@dataclass
class FakeVerbs:
    base_url: str = "https://watchdog.example"
    acted: list[tuple[str, str, str]] = field(default_factory=list)  # (verb, pod_id, via)
    offered: list[str] = field(default_factory=list)  # the offer kinds asked for
    ActionRefused: type[ActionRefused] = ActionRefused

    def offer(self, deps: Deps, pod: StoredPod | None, kind: str, now: float) -> tuple[Offer, ...]:
        self.offered.append(kind)
        key = link_key(deps.store)
        out = []
        for verb, label in OFFERS[kind]:
            pod_id = "all" if pod is None else pod.pod_id
            token = mint(key, new_claim(verb, pod_id, now, param=3600 if verb in ("keep", "extend") else 0))
            out.append(Offer(label, verb, f"{self.base_url}/a/{token}", token, verb in SAFE))
        return tuple(out)

    def act(self, deps: Deps, token: str, now: float, via: str) -> Acted:
        claim = read(link_key(deps.store), token, now)
        if via != "page" and claim.verb not in SAFE:
            raise ActionRefused(403, f"'{claim.verb}' acts only from its confirmation page: open the link")
        claim_once(deps.store, claim, now)
        self.acted.append((claim.verb, claim.pod_id, via))
        return Acted(claim.verb, claim.pod_id, f"{claim.verb} {claim.pod_id}: done")


def install(monkeypatch: pytest.MonkeyPatch, base_url: str = "https://watchdog.example") -> FakeVerbs:
    fake = FakeVerbs(base_url)
    monkeypatch.setattr(wire, "verbs", lambda: fake)
    if not _routed("POST", "/a/x"):
        token = re.compile(r"/a/(?P<token>[^/]{1,200})")
        routes = (("GET", token, _page), ("POST", token, _post))
        monkeypatch.setattr(handlers, "ROUTES", handlers.ROUTES + routes)
    return fake


def _routed(method: str, path: str) -> bool:
    try:
        handlers.route(method, path)
    except HttpError:
        return False
    return True


def _page(req: Request, deps: Deps, now: float) -> Response:
    return html_response(200, "gpuc: confirm", "<p>Opening this link does nothing.</p>")


def _post(req: Request, deps: Deps, now: float) -> Response:
    via = "ntfy" if not req.body else "page"  # verbs' routes.py: a bare POST is a channel's own button
    try:
        sentence = wire.act(deps, req.params["token"], now, via)
    except wire.Refused as exc:
        return html_response(403, "gpuc: link refused", f"<p>{esc(exc)}</p>")
    return html_response(200, "gpuc: done", f"<p>{esc(sentence)}</p>")


def dump(deps: Deps) -> list[Any]:
    """Everything the store holds, for "nothing stored" (SqliteStore)."""
    store = deps.store
    assert isinstance(store, SqliteStore)
    return list(store._db.iterdump())
