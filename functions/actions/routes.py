"""`/a/<link>`: a capability link as a person opens it.

GET shows what the link would do, to which pod, and what is not synced, with one button: it NEVER acts
and never spends the link (a link scanner or a chat preview opens every link it sees). The button's form
POSTs `confirm=yes` back to the same URL, which acts once. A channel's own button (ntfy's `http` action)
POSTs with no body: it may act only for a safe verb. A refused link gets a page saying why, with a 4xx:
403 altered, 410 expired or used, 400 malformed, 404 unknown pod; nothing changes. A used (spent) link,
opened or posted again, says so: when it acted, what it did, and the pod as it is now.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from gpuc.core.clock import iso
from gpuc.functions.actions.html import button_form, esc, facts, html_response
from gpuc.functions.actions.verbs import (
    VERB_SPECS,
    ActionRefused,
    Via,
    act,
    hm,
    readable,
)
from gpuc.functions.app import Deps
from gpuc.functions.buttons import SAFE_VERBS
from gpuc.functions.deadline import deadline_of
from gpuc.functions.edge import Request, Response
from gpuc.functions.links import Claim, LinkRefused, spent
from gpuc.functions.store import StoredPod

LINK_STATUS = {"altered": 403, "expired": 410, "used": 410, "malformed": 400}
FORM = "application/x-www-form-urlencoded"
CONFIRM = ("confirm", "yes")
DANGER_VERBS = frozenset({"destroy", "anyway"})  # what a destroy loses is said next to their buttons


def action_page(req: Request, deps: Deps, now: float) -> Response:
    token = req.params.get("token", "")
    try:
        claim, pod = readable(deps, token, now)
    except (LinkRefused, ActionRefused) as exc:
        return refused(exc)
    if spent(deps.store, claim) is not None:
        return spent_page(deps, claim, pod, now)
    spec = VERB_SPECS[claim.verb]
    body = facts(pod_facts(deps, pod, now)) if pod is not None else ""
    body += f"<p>{esc(spec.label.capitalize())}: {esc(spec.explain)}.</p>"
    if claim.verb in DANGER_VERBS and pod is not None:
        body += f'<p class="warn">Not synced: {esc(unsynced(deps, pod, now))}</p>'
    body += f'<p class="muted">This link acts once, until {esc(hm(claim.exp))}. Opening it does nothing.</p>'
    # Relative to /a/<token> itself: right behind any path prefix the watchdog is served under.
    body += button_form(token, spec.label, danger=claim.verb not in SAFE_VERBS, fields=(CONFIRM,))
    return html_response(200, f"gpuc: {spec.label}?", body)


def action_post(req: Request, deps: Deps, now: float) -> Response:
    token = req.params.get("token", "")
    try:
        via = form_via(req)
        acted = act(deps, token, now, via)
    except LinkRefused as exc:
        return spent_post(deps, token, now) if exc.why == "used" else refused(exc)
    except ActionRefused as exc:
        return refused(exc)
    return html_response(200, "gpuc: done", f'<p class="ok">{esc(acted.sentence)}.</p>')


def spent_post(deps: Deps, token: str, now: float) -> Response:
    try:
        claim, pod = readable(deps, token, now)  # act read it a moment ago
    except (LinkRefused, ActionRefused) as exc:
        return refused(exc)
    return spent_page(deps, claim, pod, now)


def spent_page(deps: Deps, claim: Claim, pod: StoredPod | None, now: float) -> Response:
    """A link opened again after its one act: it is spent, what it did and when, and the pod as it is now."""
    label = VERB_SPECS[claim.verb].label
    record = spent(deps.store, claim)
    if record is None:
        did = f"This '{label}' link was already used: a link acts once"
    else:
        at, outcome = record
        did = f"This '{label}' link was already used, at {hm(at)}: {outcome}"
    body = f'<p class="warn">{esc(did)}.</p>'
    if pod is not None:
        body += f"<p>The pod now:</p>{facts(pod_facts(deps, pod, now))}"
    again = "Opening it again does nothing. To act again: the status page (`gpuc page`) or the next notification."
    body += f"<p>{esc(again)}</p>"
    return html_response(410, "gpuc: link already used", body)


def form_via(req: Request) -> Via:
    """The confirmation page's form (confirm=yes) or a channel's bare button POST (no body)."""
    if not req.body:
        return "ntfy"
    kind = (req.header("content-type") or "").split(";", 1)[0].strip().lower()
    if kind != FORM:
        raise ActionRefused(415, f"send the form as {FORM} (the confirmation page's button does)")
    try:
        fields = parse_qsl(req.body.decode("ascii"), strict_parsing=True, max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        raise ActionRefused(400, "the form could not be read: use the confirmation page's button") from None
    if fields != [CONFIRM]:
        raise ActionRefused(400, "the form could not be read: use the confirmation page's button")
    return "page"


def refused(exc: LinkRefused | ActionRefused) -> Response:
    if isinstance(exc, LinkRefused):
        status, text = LINK_STATUS[exc.why], str(exc)
    else:
        status, text = exc.status, exc.message
    hint = "Nothing was done. Ask for a fresh link: `gpuc page`, or the next notification."
    return html_response(status, "gpuc: link refused", f'<p class="warn">{esc(text)}.</p><p>{esc(hint)}</p>')


def pod_facts(deps: Deps, pod: StoredPod, now: float) -> list[tuple[str, object]]:
    price = pod.price_per_hour
    start = pod.started_at if pod.started_at is not None else pod.registered_at
    spent = "?" if price is None else f"${price * max(0.0, now - start) / 3600:.2f}"
    return [
        ("pod", f"{pod.name} ({pod.pod_id})"),
        ("provider", f"{pod.provider}{'' if pod.gpu is None else ', ' + pod.gpu}"),
        ("state", state_words(pod)),
        ("$/h", "?" if price is None else f"${price:.2f}"),
        ("spent", spent),
        ("deadline", iso(deadline_of(pod, deps.settings))),
    ]


def state_words(pod: StoredPod) -> str:
    words = pod.state if pod.provider_status is None else f"{pod.state}, {pod.provider_status} at the provider"
    if pod.kept_at is not None:
        words += f", kept for its results since {hm(pod.kept_at)}"
    if pod.state == "down" and pod.destroy_at is not None:
        words += f", will be ended at {hm(pod.destroy_at)}"
    return words


def unsynced(deps: Deps, pod: StoredPod, now: float) -> str:
    """What a destroy would lose, as far as the watchdog knows."""
    if pod.kept_at is not None:
        return (
            f"results/ exists only on the pod: its sync failed at {hm(pod.kept_at)}. Destroying it loses them; "
            f"`gpuc results {pod.pod_id}` copies them first"
        )
    if pod.last_seen is None or now - pod.last_seen >= deps.settings.silence_limit_s:
        return (
            "the pod is not pinging, so it may not be able to sync: if it does not answer, the watchdog destroys "
            "it without a sync, and what results/ gained since its last sync is lost"
        )
    return "nothing known: the pod syncs results/ and checks the copy before it destroys itself; a failed sync keeps it"
