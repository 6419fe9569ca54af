"""`POST /slack/actions`: a Slack app's Interactivity Request URL, where a tap on a button comes back.

Slack signs every request: `X-Slack-Signature: v0=HMAC_SHA256(signing secret, "v0:" + timestamp + ":" +
raw body)` with `X-Slack-Request-Timestamp`. A bad signature or a timestamp more than 5 minutes from the
watchdog's clock is a 401 and nothing is read further or stored. Within the window a replay is possible;
the link's single-use nonce refuses it. The body is form-encoded, `payload=<JSON>`; a `block_actions`
payload whose button value is a link token acts through the verbs (via "slack": safe verbs only), once.
A URL button (destroy: its confirmation page) also posts its click here, with no value: it acts on nothing.

Slack wants the answer within 3 s: the verbs only write records (the reaper and the pod's agent do the
slow part), and the answer is a short text. What was done also goes out as the verb's own notification.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any
from urllib.parse import parse_qs

from gpuc.functions.actions import wire
from gpuc.functions.app import Deps
from gpuc.functions.edge import HttpError, Request, Response

WINDOW_S = 300
H_TIMESTAMP = "X-Slack-Request-Timestamp"
H_SIGNATURE = "X-Slack-Signature"
NOT_SET_UP = "slack actions are not set up: set GPUC_SLACK_SIGNING_SECRET on the watchdog (README: Actions)"
BAD_SIGNATURE = "missing or wrong Slack signature"
_HEX_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")


def sign(secret: str, timestamp: str, body: bytes) -> str:
    mac = hmac.new(secret.encode(), b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256)
    return "v0=" + mac.hexdigest()


def actions(req: Request, deps: Deps, now: float) -> Response:
    secret = deps.settings.slack_signing_secret
    if secret is None or not secret.get_secret_value():
        raise HttpError(404, NOT_SET_UP)
    verify(req, secret.get_secret_value(), now)
    payload = _payload(req.body)
    token = _token(payload)
    if token is None:
        return Response(200, {})  # a URL button's click, or another interaction: acknowledged, nothing done
    try:
        text = wire.act(deps, token, now, "slack")
    except wire.Refused as exc:
        text = f"Nothing done: {exc}"
    return Response(200, {"response_type": "ephemeral", "replace_original": False, "text": text})


def verify(req: Request, secret: str, now: float) -> None:
    timestamp = (req.header(H_TIMESTAMP) or "").strip()
    signature = (req.header(H_SIGNATURE) or "").strip()
    if not re.fullmatch(r"[0-9]{1,12}", timestamp) or not _HEX_SIGNATURE.fullmatch(signature):
        raise HttpError(401, BAD_SIGNATURE)
    if not hmac.compare_digest(sign(secret, timestamp, req.body).encode(), signature.encode()):
        raise HttpError(401, BAD_SIGNATURE)
    if abs(now - int(timestamp)) > WINDOW_S:
        raise HttpError(401, f"{H_TIMESTAMP} is more than {WINDOW_S} s from the watchdog's clock")


def _payload(body: bytes) -> dict[str, Any]:
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=4)
        payload = json.loads(form["payload"][0])
    except (UnicodeDecodeError, ValueError, KeyError, RecursionError):
        raise HttpError(400, "body is not a Slack interaction: expected the form field payload=<JSON>") from None
    if not isinstance(payload, dict):
        raise HttpError(400, "json validation error: payload must be a JSON object")
    return payload


def _token(payload: dict[str, Any]) -> str | None:
    if payload.get("type") != "block_actions":
        return None
    taps = payload.get("actions")
    tap = taps[0] if isinstance(taps, list) and taps else None
    value = tap.get("value") if isinstance(tap, dict) else None
    return value if isinstance(value, str) and value else None
