"""Vast's `client:outbid` webhook, checked: a HINT to read the provider now, never proof.

Vast signs each delivery: HMAC-SHA256 over `<X-Vast-Timestamp>.<raw body>`; deliveries older than 300 s
are to be refused; delivery is at least once, so the same `X-Vast-Event-Id` may come twice
(vast-ai/docs notification-webhooks.mdx). The payload names no instance (whether `message` does is
UNCONFIRMED), and "resumed" fires on any leave of Scheduling: so a good delivery only makes the watchdog
read its interruptible pods' states at once (twice, as always). A forged, stale or replayed one does
nothing at all. The signature's header name is UNCONFIRMED (this reads `X-Vast-Signature`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

WINDOW_S = 300.0
OUTBID = "client:outbid"


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
        return "unsigned: a timestamp, signature and event id are required"
    try:
        sent = float(stamp)
    except ValueError:
        return "the timestamp is not a number"
    want = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, sig.strip().lower()):
        return "the signature does not match"
    if abs(now - sent) > WINDOW_S:
        return f"older than {WINDOW_S:.0f} s (or from the future): refused as a possible replay"
    try:
        payload = json.loads(body)
    except ValueError:
        return "the body is not JSON"
    notif = payload.get("notif_type") if isinstance(payload, dict) else None
    if not isinstance(notif, str):
        return "no notif_type"
    if not first_time(event_id):
        return "already seen (at-least-once delivery): ignored"
    return Hint(event_id, notif)


def wants_look(hint: Hint | str) -> bool:
    """Whether the watchdog should read its interruptible pods now (an early look, not a decision)."""
    return isinstance(hint, Hint) and hint.notif_type == OUTBID
