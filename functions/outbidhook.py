"""Vast's `client:outbid` webhook, checked: a HINT to read the provider now, never proof.

Vast signs each delivery: HMAC-SHA256 over `<X-Vast-Timestamp>.<raw body>`; deliveries older than 300 s
are to be refused; delivery is at least once, so the same `X-Vast-Event-Id` may come twice
(vast-ai/docs notification-webhooks.mdx). The payload names no instance (whether `message` does is
UNCONFIRMED), and "resumed" fires on any leave of Scheduling: so a good delivery only makes the watchdog
read its interruptible pods' states at once (twice, as always). A forged, stale or replayed one does
nothing at all. The signature's header name is UNCONFIRMED (this reads `X-Vast-Signature`).

The route, `POST /v1/hooks/vast` (no admin token: the signature is the proof; GPUC_VAST_WEBHOOK_SECRET, unset
= 404): a bad signature or stamp is 401 and a signed but malformed body 400, with nothing stored or read; a
replay is 200 "ignored" (a 4xx would make Vast deliver it again and again); a fresh `client:outbid` runs the
recovery's look for every live run at once (functions/reaper/recovering.py recover_hinted: two reads, the same
rules, each act claimed as a pass claims it), so a forged or replayed hint can never by itself destroy or rent.
Neither the body nor the headers are logged (the message may name things): the event id and the outcome only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuc.functions.app import Deps
from gpuc.functions.edge import HttpError, Request, Response
from gpuc.functions.reaper.recovering import recover_hinted

log = logging.getLogger("gpuc.functions")

WINDOW_S = 300.0
OUTBID = "client:outbid"
MAX_BODY_BYTES = 4096  # Vast's payload is six short fields; anything near the edge's own cap is not Vast's
MAX_EVENT_ID = 128
SEEN_KEY = "vasthook:"  # + event id: the store's meta record that dedupes Vast's at-least-once delivery
UNSIGNED = "unsigned: a timestamp, signature and event id are required"
NOT_A_NUMBER = "the timestamp is not a number"
BAD_SIGNATURE = "the signature does not match"
STALE = f"older than {WINDOW_S:.0f} s (or from the future): refused as a possible replay"
SEEN = "already seen (at-least-once delivery): ignored"
UNTRUSTED = (UNSIGNED, NOT_A_NUMBER, BAD_SIGNATURE, STALE)  # 401: not shown to be Vast's, now
NOT_SET_UP = "Vast webhooks are not set up: set GPUC_VAST_WEBHOOK_SECRET on the watchdog (docs/interruptible.md)"


@dataclass(frozen=True)
class Hint:
    event_id: str
    notif_type: str


def check_delivery(
    headers: Mapping[str, str],
    body: bytes,
    *,
    secret: str,
    now: float,
    first_time: Callable[[str], bool],
) -> Hint | str:
    """The hint in a delivery, or why it is refused (said, never acted on). `first_time(event_id)` records
    the id and answers whether it is new (the store's conditional put: a replay answers False)."""
    low = {k.lower(): v for k, v in headers.items()}
    stamp, sig, event_id = low.get("x-vast-timestamp"), low.get("x-vast-signature"), low.get("x-vast-event-id")
    if not (stamp and sig and event_id):
        return UNSIGNED
    try:
        sent = float(stamp)
    except ValueError:
        return NOT_A_NUMBER
    want = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, sig.strip().lower()):
        return BAD_SIGNATURE
    if not abs(now - sent) <= WINDOW_S:  # written so that a NaN stamp is refused too
        return STALE
    try:
        payload = json.loads(body)
    except ValueError:
        return "the body is not JSON"
    notif = payload.get("notif_type") if isinstance(payload, dict) else None
    if not isinstance(notif, str):
        return "no notif_type"
    # The header is not signed, the body is: a header changed to dodge the dedupe must agree with the body.
    signed_id = payload.get("event_id", event_id)
    if signed_id != event_id or len(event_id) > MAX_EVENT_ID:
        return "the event id does not match the signed body's"
    if not first_time(event_id):
        return SEEN
    return Hint(event_id, notif)


def wants_look(hint: Hint | str) -> bool:
    """Whether the watchdog should read its interruptible pods now (an early look, not a decision)."""
    return isinstance(hint, Hint) and hint.notif_type == OUTBID


def vast_hook(req: Request, deps: Deps, now: float) -> Response:
    """`POST /v1/hooks/vast`: Vast's signed webhook, a hint to look at the recovering runs now."""
    secret = deps.settings.vast_webhook_secret
    if secret is None or not secret.get_secret_value():
        raise HttpError(404, NOT_SET_UP)
    if len(req.body) > MAX_BODY_BYTES:
        raise HttpError(413, f"body larger than {MAX_BODY_BYTES} bytes: not a Vast webhook")

    def first_time(event_id: str) -> bool:
        return deps.store.put_meta(SEEN_KEY + event_id, {"at": now}, None)

    hint = check_delivery(req.headers, req.body, secret=secret.get_secret_value(), now=now, first_time=first_time)
    if isinstance(hint, str):
        # Our own words only: a refused delivery's id is not Vast's word, so it is not logged either.
        log.info("vast webhook refused: %s", hint)
        if hint == SEEN:
            return Response(200, {"ok": True, "ignored": hint})
        raise HttpError(401 if hint in UNTRUSTED else 400, hint)
    if not wants_look(hint):
        log.info("vast webhook %s: not an outbid, ignored", hint.event_id)
        return Response(200, {"ok": True, "ignored": "not an outbid: nothing to look at"})
    report = recover_hinted(deps, now)
    done = [a for a in report.actions if a.action != "skip"]
    log.info("vast webhook %s: outbid, looked at the recovering runs (%d act(s))", hint.event_id, len(done))
    return Response(200, {"ok": True})
