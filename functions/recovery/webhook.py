"""Vast's `client:outbid` webhook, checked: a HINT that a pass should look soon, never proof, never an act.

As Vast sends it (vast-ai/docs notification-webhooks.mdx and its OpenAPI notifications.yaml): the headers
`X-Vast-Event-Id`, `X-Vast-Delivery-Attempt`, `X-Vast-Timestamp` (integer Unix time) and
`X-Vast-Signature-256: sha256=<hex HMAC-SHA256 over "<X-Vast-Timestamp>.<raw body>">`; the body's
`notif_type` is the SHORT slug (`outbid`, `webhook_test`), the `client:` prefix belonging to subscription keys
only. Deliveries older than 300 s are to be refused; delivery is at least once (the same event id may come
again, with a new attempt number), each within a 10 s timeout, and a 4xx other than 408/429 is a permanent
failure that Vast never retries. The payload names no instance (whether `message` does is UNCONFIRMED), and
"resumed" fires on any leave of Scheduling: so a good delivery proves nothing about any pod.

The route, `POST /v1/hooks/vast` (no admin token: the signature is the proof; GPUC_VAST_WEBHOOK_SECRET, unset
= 404): a bad signature or stamp is 401 and a signed but malformed body 400, with nothing stored or read; a
replay is 200 "ignored" (a 4xx would be a permanent failure at Vast). A fresh delivery is recorded (its id for
the signature's window only: claim_once; its type and time as the last one seen, which `gpuc doctor` reads
after asking Vast for a signed test delivery) and answered at once: NO provider call runs inside the answer.
An outbid wakes the reaper (Deps.wake: the local server's loop starts a pass at once, outside this answer;
on AWS the scheduled pass acts), and the pass reads the pods twice and decides by its own rules.
Neither the body nor the headers are logged (the message may name things): the event id and the outcome only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuc.functions.app import Deps
from gpuc.functions.edge import HttpError, Request, Response

log = logging.getLogger("gpuc.functions")

WINDOW_S = 300.0
OUTBID = "outbid"  # the body's short slug; `client:outbid` is the subscription key
TEST = "webhook_test"  # what Vast's POST /api/v0/webhooks/{id}/test/ sends, signed as a real delivery
SIGNATURE_HEADER = "X-Vast-Signature-256"
SIGNATURE_PREFIX = "sha256="
MAX_BODY_BYTES = 4096  # Vast's payload is six short fields; anything near the edge's own cap is not Vast's
MAX_EVENT_ID = 128
SEEN_KIND = "vasthook"  # claim_once's kind: Vast's event ids, kept for the signature's window
LAST_KEY = "vasthook_last"  # meta: the last verified delivery's type and time (never its body)
UNSIGNED = f"unsigned: {SIGNATURE_HEADER}, X-Vast-Timestamp and X-Vast-Event-Id are required"
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


def signature(secret: str, stamp: str, body: bytes) -> str:
    """The header's value Vast sends: `sha256=` and the hex HMAC-SHA256 over `<timestamp>.<raw body>`."""
    return SIGNATURE_PREFIX + hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def check_delivery(
    headers: Mapping[str, str],
    body: bytes,
    *,
    secret: str,
    now: float,
    first_time: Callable[[str], bool],
) -> Hint | str:
    """The hint in a delivery, or why it is refused (said, never acted on). `first_time(event_id)` records
    the id and answers whether it is new (the store's claim_once: a replay answers False)."""
    low = {k.lower(): v for k, v in headers.items()}
    stamp, sig, event_id = (low.get(h.lower()) for h in ("X-Vast-Timestamp", SIGNATURE_HEADER, "X-Vast-Event-Id"))
    if not (stamp and sig and event_id):
        return UNSIGNED
    try:
        sent = float(stamp)
    except ValueError:
        return NOT_A_NUMBER
    if not hmac.compare_digest(signature(secret, stamp, body), sig.strip().lower()):
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
    """Whether a pass should look at the recovering runs soon (an early look, not a decision). The slug is
    Vast's documented one; the subscription key's spelling is taken too (it is signed, and only wakes a pass)."""
    return isinstance(hint, Hint) and hint.notif_type in (OUTBID, f"client:{OUTBID}")


def vast_hook(req: Request, deps: Deps, now: float) -> Response:
    """`POST /v1/hooks/vast`: Vast's signed webhook, recorded; an outbid wakes the reaper. No provider call."""
    secret = deps.settings.vast_webhook_secret
    if secret is None or not secret.get_secret_value():
        raise HttpError(404, NOT_SET_UP)
    if len(req.body) > MAX_BODY_BYTES:
        raise HttpError(413, f"body larger than {MAX_BODY_BYTES} bytes: not a Vast webhook")

    def first_time(event_id: str) -> bool:
        return deps.store.claim_once(SEEN_KIND, event_id, now, WINDOW_S)

    hint = check_delivery(req.headers, req.body, secret=secret.get_secret_value(), now=now, first_time=first_time)
    if isinstance(hint, str):
        # Our own words only: a refused delivery's id is not Vast's word, so it is not logged either.
        log.info("vast webhook refused: %s", hint)
        if hint == SEEN:
            return Response(200, {"ok": True, "ignored": hint})
        raise HttpError(401 if hint in UNTRUSTED else 400, hint)
    note_last(deps, hint, now)
    if not wants_look(hint):
        what = "a test delivery" if hint.notif_type == TEST else "not an outbid"
        log.info("vast webhook %s: %s, nothing to look at", hint.event_id, what)
        return Response(200, {"ok": True, "ignored": "not an outbid: nothing to look at"})
    if deps.wake is not None:
        deps.wake()  # the local server's reaper loop: a pass now, in its own thread, never inside this answer
    log.info("vast webhook %s: outbid, the reaper looks at the recovering runs", hint.event_id)
    return Response(200, {"ok": True})


def note_last(deps: Deps, hint: Hint, now: float) -> None:
    """The last verified delivery (its slug and time; never the body): `gpuc doctor` asks Vast for a signed
    test delivery and reads here that it arrived and verified. Best effort: a lost race keeps the other's."""
    meta = deps.store.get_meta(LAST_KEY)
    value: dict[str, Any] = {"notif_type": hint.notif_type[:40], "at": now}
    deps.store.put_meta(LAST_KEY, value, meta.version if meta is not None else None)


def last_delivery(deps: Deps) -> tuple[str, float] | None:
    meta = deps.store.get_meta(LAST_KEY)
    if meta is None:
        return None
    kind, at = meta.value.get("notif_type"), meta.value.get("at")
    return (kind, float(at)) if isinstance(kind, str) and isinstance(at, int | float) else None
