"""The watchdog's HTTP edge: the transport-neutral Request and Response, body parsing with stable error
wording, and who may call: the admin's bearer token, a pod's signature. The loopback server and the Lambda
adapter build a Request; functions.handlers routes it.

Contract (core.api): bad input gets a 4xx with a stable `{"error": ...}` and nothing is stored. Admin
routes check the bearer token first, in constant time. Pod routes verify the HMAC over
`timestamp.seq.body` with the pod's stored derived key before reading the body, then the 5-minute
window against the server clock; the handlers then check the seq.

An unknown pod and a bad signature get the same answer (401 "unknown pod or bad signature") so the
public ingest URL does not tell a prober which pod ids exist, and cost the same: one read, no write. A pod
the store does not know may prove itself with its claim (functions.claims): checked entirely
without the store (the claim's HMAC, then the ping's with the token derived for it) before its record is
re-created; a forged or foreign claim costs one HMAC more and writes nothing. The
one exception writes to a record the reaper made itself: a ping naming a stray it found at a provider
notes the time on that stray (at most once per 30 s), which may delay its destroy once.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gpuc.core import api
from gpuc.core.clock import iso
from gpuc.core.pod import pod_name
from gpuc.core.signing import derive_key, token_matches, verify
from gpuc.functions.app import Deps
from gpuc.functions.claims import claimed, restore, token_for
from gpuc.functions.store import PodAuth, note_unverified_ping

log = logging.getLogger("gpuc.functions")

M = TypeVar("M", bound=BaseModel)


BAD_POD = "unknown pod or bad signature"


BAD_ADMIN = "missing or wrong admin token"


# pydantic error type -> stable wording (healthchecks' CUSTOM_ERRORS). Input values are never echoed:
# a body may carry a key.
_ERROR_TEXT = {
    "missing": "is required",
    "extra_forbidden": "is not allowed",
    "string_too_long": "is too long",
    "string_too_short": "is too short",
    "string_pattern_mismatch": "has the wrong format",
    "too_long": "has too many items",
    "too_short": "has too few items",
    "literal_error": "is not one of the allowed values",
    "greater_than": "is too small",
    "greater_than_equal": "is too small",
    "less_than": "is too large",
    "less_than_equal": "is too large",
    "finite_number": "must be a finite number",
    "model_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "list_type": "must be a list",
}


@dataclass(frozen=True)
class Request:
    """Transport-neutral: the local server and the Lambda adapter both build one. Header names are
    matched case-insensitively."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    params: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "headers", {k.lower(): v for k, v in self.headers.items()})

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class Response:
    """JSON for programs; `html` (a whole page) for a person's browser (the phone's links and page)."""

    status: int
    body: dict[str, Any]
    html: str | None = None

    @property
    def content_type(self) -> str:
        return "application/json" if self.html is None else "text/html; charset=utf-8"

    @property
    def page_headers(self) -> dict[str, str]:
        # A page's URL carries a capability: no Referer may carry it to anyone, no frame may hold the
        # page (a click-jacked "destroy"), and nothing but the watchdog's own inline style may load.
        if self.html is None:
            return {}
        return {
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY",
            "X-Content-Type-Options": "nosniff",
        }


class HttpError(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


Handler = Callable[[Request, Deps, float], Response]


def ok(model: BaseModel) -> Response:
    return Response(200, model.model_dump(mode="json"))


def format_first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    if err["type"] == "json_invalid":
        return "body is not valid JSON"
    where = ".".join(str(part) for part in err["loc"]) or "body"
    kind = str(err["type"])
    text = _ERROR_TEXT.get(kind) or ("has the wrong type" if kind.endswith("_type") else "is invalid")
    return f"json validation error: {where} {text}"


def parse(model: type[M], body: bytes) -> M:
    if not body:
        raise HttpError(400, "body is empty: send a JSON object")
    if (b"NaN" in body or b"Infinity" in body) and _has_non_finite(body):
        # pydantic's JSON parser takes NaN and Infinity; a NaN lease or end time would poison the ledger.
        raise HttpError(400, "json validation error: numbers must be finite")
    try:
        return model.model_validate_json(body, strict=True)
    except ValidationError as exc:
        raise HttpError(400, format_first_error(exc)) from None


def _has_non_finite(body: bytes) -> bool:
    def found(constant: str) -> float:
        raise ValueError(constant)

    try:
        json.loads(body, parse_constant=found)
    except RecursionError:
        raise HttpError(400, "body is not valid JSON") from None  # nested past any sane depth
    except ValueError as exc:
        return str(exc) in ("NaN", "Infinity", "-Infinity")
    return False


def require_admin(req: Request, deps: Deps) -> None:
    header = req.header("Authorization") or ""
    scheme, _, presented = header.partition(" ")
    expected = deps.admin_token.get_secret_value()
    # Only HTTP's own whitespace (RFC 9110 OWS): str.strip() would also drop \x85 and other Unicode spaces.
    if scheme.lower() != "bearer" or not presented or not token_matches(presented.strip(" \t"), expected):
        raise HttpError(401, BAD_ADMIN)


@dataclass(frozen=True)
class Signed:
    auth: PodAuth
    timestamp: int
    seq: int

    @property
    def pod_id(self) -> str:
        return self.auth.pod_id


def _int_header(req: Request, name: str) -> int:
    raw = req.header(name)
    # [0-9], not \d: \d also matches other scripts' digits, which int() reads and SQLite does not
    if raw is None or not re.fullmatch(r"[0-9]{1,19}", raw.strip()) or int(raw.strip()) > api.SEQ_MAX:
        raise HttpError(400, f"missing or malformed {name} header")
    return int(raw.strip())


def verify_pod(req: Request, deps: Deps, now: float) -> Signed:
    """Who sent this, proven by the signature, before the body is even parsed."""
    pod_id = req.header(api.H_POD)
    signature = req.header(api.H_SIGNATURE)
    if not pod_id or len(pod_id) > 128:
        raise HttpError(400, f"missing or malformed {api.H_POD} header")
    if not signature or not re.fullmatch(r"[0-9a-f]{64}", signature):
        raise HttpError(400, f"missing or malformed {api.H_SIGNATURE} header")
    timestamp, seq = _int_header(req, api.H_TIMESTAMP), _int_header(req, api.H_SEQ)
    auth = deps.store.get_auth(pod_id)  # the one read a request that fails authentication costs
    if auth is None or not auth.key:
        # Unknown here, or only a stray the reaper listed: the pod's own claim may prove it (a lost store).
        proven = by_claim(req, deps, now, pod_id, timestamp, seq, signature)
        if proven is not None:
            return proven
    if auth is None:
        raise HttpError(401, BAD_POD)  # an invented id: nothing is written, whatever it claims
    # An adopted pod has no key: an empty HMAC key would let anyone sign for it.
    if not auth.key:
        if abs(now - timestamp) <= api.SIGNATURE_WINDOW_S:
            _note_unverified(deps, auth, now)
        raise HttpError(401, BAD_POD)
    if not verify(auth.key, timestamp, seq, req.body, signature):
        raise HttpError(401, BAD_POD)
    if abs(now - timestamp) > api.SIGNATURE_WINDOW_S:
        raise _time_refused(now)
    return Signed(auth, timestamp, seq)


def _time_refused(now: float) -> HttpError:
    # The server's time goes back with the refusal: the agent corrects its clock from it.
    window = api.SIGNATURE_WINDOW_S
    return HttpError(401, f"timestamp outside the {window} s window: check the pod's clock", server_time=now)


def by_claim(
    req: Request, deps: Deps, now: float, pod_id: str, timestamp: int, seq: int, signature: str
) -> Signed | None:
    """A pod this store does not know, presenting its claim (functions.claims): the claim's own HMAC, the
    pod and the watchdog it names, then the ping's signature with the token derived for that identity, and
    the time window; only then is the record re-created. Any failure: None, and nothing written."""
    claim = claimed(deps, req.header(api.H_CLAIM), pod_id)
    if claim is None:
        return None
    token = token_for(deps, claim.provider, claim.pod_id, pod_name(claim.run))
    if token is None or not verify(derive_key(token), timestamp, seq, req.body, signature):
        return None
    if abs(now - timestamp) > api.SIGNATURE_WINDOW_S:
        raise _time_refused(now)  # a proven pod with a wrong clock: told the time, nothing written
    auth = restore(deps, claim, now, signed_at=timestamp)
    if auth is None:
        return None
    log.info("pod %s re-created from its claim (this store did not know it)", pod_id)
    return Signed(auth, timestamp, seq)


def _note_unverified(deps: Deps, auth: PodAuth, now: float) -> None:
    """A ping naming a stray the reaper found at a provider, signed with a token nobody here knows (the
    store was lost, or the pod was registered with another watchdog). Not proof of anything: it may
    delay that stray's destroy once (reaper.rules.judge_stray), never keep it alive."""
    try:
        note_unverified_ping(deps.store, auth, now)
    except Exception as exc:  # best effort: the answer is a 401 either way
        log.warning("could not note an unverified ping: %s", type(exc).__name__)


def check_time(name: str, value: float | None, now: float, past_s: float, future_s: float) -> None:
    if value is not None and not now - past_s <= value <= now + future_s:
        raise HttpError(400, f"json validation error: {name} is too far from the server's time ({iso(now)})")


def same_pod(signed: Signed, body_pod_id: str) -> None:
    if body_pod_id != signed.pod_id:
        raise HttpError(400, f"body pod_id does not match the {api.H_POD} header")


def response_bytes(response: Response) -> bytes:
    if response.html is not None:
        return response.html.encode()
    return json.dumps(response.body, separators=(",", ":")).encode()
