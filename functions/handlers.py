"""The functions' handlers: plain functions of (request, deps, now), the same on loopback and on Lambda.

Contract (core.api): bad input gets a 4xx with a stable `{"error": ...}` and nothing is stored. Admin
routes check the bearer token first, in constant time. Pod routes verify the HMAC over
`timestamp.seq.body` with the pod's stored derived key before reading the body, then the 5-minute
window against the server clock, then the seq: a heartbeat's seq must rise (a replayed "alive" ping
would keep a dead pod billing), an event's seq must be new (events from the agent and the wrapper may
arrive out of order, never twice).

An unknown pod and a bad signature get the same answer (401 "unknown pod or bad signature") so the
public ingest URL does not tell a prober which pod ids exist, and cost the same: one read, no write. The
one exception writes to a record the reaper made itself: a ping naming a stray it found at a provider
notes the time on that stray (at most once per 30 s), which may delay its destroy once. Admin routes,
which are trusted, say 404 "unknown pod".
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import unquote

from pydantic import BaseModel, ValidationError

from gpuc.core import api
from gpuc.core.clock import iso
from gpuc.core.notify import Level, pod_says
from gpuc.core.redact import redact
from gpuc.core.signing import token_matches, verify
from gpuc.functions.app import Deps, announce
from gpuc.functions.deadline import DEADLINE_ALERT, deadline_of, limit_of
from gpuc.functions.eventlimit import admit_event
from gpuc.functions.reaper import reap_once
from gpuc.functions.store import MARKABLE_STATES, PodAuth, StoredPod, note_unverified_ping, store_born

log = logging.getLogger("gpuc.functions")

M = TypeVar("M", bound=BaseModel)
BAD_POD = "unknown pod or bad signature"
BAD_ADMIN = "missing or wrong admin token"
# How far from the server's clock a reported time may be: an end recorded by a pod that could not reach
# us for a while is still taken; a year-2090 end or a start next week is not.
END_PAST_S = 30 * 24 * 3600.0
FUTURE_SLACK_S = 3600.0
NOTIFICATIONS_IN_STATUS = 50
# Sent only after a verified results sync (instance_side/ending.py): whatever was kept for them is not.
SYNCED_ENDS = ("job_exit", "idle_destroy")
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
    status: int
    body: dict[str, Any]


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
    if scheme.lower() != "bearer" or not presented or not token_matches(presented.strip(), expected):
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
        # The server's time goes back with the refusal: the agent corrects its clock from it.
        raise HttpError(
            401,
            f"timestamp outside the {api.SIGNATURE_WINDOW_S} s window: check the pod's clock",
            server_time=now,
        )
    return Signed(auth, timestamp, seq)


def _note_unverified(deps: Deps, auth: PodAuth, now: float) -> None:
    """A ping naming a stray the reaper found at a provider, signed with a token nobody here knows (the
    store was lost, or the pod was registered with another watchdog). Not proof of anything: it may
    delay that stray's destroy once (reaper.judge_stray), never keep it alive."""
    try:
        note_unverified_ping(deps.store, auth, now)
    except Exception as exc:  # best effort: the answer is a 401 either way
        log.warning("could not note an unverified ping: %s", type(exc).__name__)


def _check_time(name: str, value: float | None, now: float, past_s: float, future_s: float) -> None:
    if value is not None and not now - past_s <= value <= now + future_s:
        raise HttpError(400, f"json validation error: {name} is too far from the server's time ({iso(now)})")


def register(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    body = parse(api.RegisterRequest, req.body)
    if body.provider not in deps.providers.known:
        raise HttpError(400, "json validation error: provider is not one of the configured providers")
    _check_time("started_at", body.started_at, now, float("inf"), FUTURE_SLACK_S)
    pod = StoredPod(
        **body.model_dump(exclude={"key", "policy", "interruptible", "carried"}),
        key=body.key,
        policy=body.policy,
        interruptible=body.interruptible,
        origin="carried" if body.carried else "registered",
        registered_at=now,
    )
    pod = capped_deadline(pod, deps)
    store_born(deps.store, now)  # the first registration dates a new store, if no reaper pass did
    if deps.store.register(pod) == "refused":
        raise HttpError(409, "pod already ended: register a new pod")
    return ok(api.Ack())


def heartbeat(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(api.HeartbeatBody, req.body)
    _same_pod(signed, body.pod_id)
    if body.seq != signed.seq:
        raise HttpError(400, f"body seq does not match the {api.H_SEQ} header")
    if not deps.store.record_heartbeat(signed.pod_id, signed.seq, now, body):
        current = deps.store.get_pod(signed.pod_id)
        last = current.last_seq if current else None
        raise HttpError(409, "replayed or out-of-order seq: send a higher one", last_seq=last)
    if signed.auth.state == "destroyed":
        revive(deps, signed.pod_id, now, "it pinged (valid signature)")
    if body.kept_left_s is not None:
        # Said on every ping too: a lost "kept" event must not leave a dying agent's results to a destroy.
        record_kept(deps, signed.pod_id, now, body.kept_left_s)
    deadline = deadline_of(signed.auth, deps.settings)  # the pod adopts it: later (extend) or earlier (budget)
    return ok(api.HeartbeatAnswer(server_time=now, lease_until=signed.auth.lease_until, deadline_at=deadline))


def revive(deps: Deps, pod_id: str, now: float, evidence: str) -> bool:
    """A pod taken for gone (or destroyed) shows it is alive: watch it again. One whose end was
    recorded goes back to "ended" (it must still be destroyed, after a fresh grace); one that vanished
    on its own goes back to "ok" (the silence and state rules apply again). CAS: said once."""
    pod = deps.store.get_pod(pod_id)
    if pod is None or pod.state != "destroyed":
        return False
    changes: dict[str, Any] = {"gone_seen_at": None, "provider_status_since": now, "alerted": None}
    if pod.end_at is not None:
        changes.update(state="ended", destroy_at=now + deps.settings.destroy_grace_s)
        plan = f"its end is recorded: it will be destroyed at {iso(now + deps.settings.destroy_grace_s)}"
    else:
        changes.update(state="ok", destroy_at=None, reason=None)
        plan = "watched again"
    if not deps.store.update_if(pod_id, {"state": "destroyed"}, changes):
        return False
    announce(
        deps,
        now,
        f"gpuc: {pod.name} is still alive",
        f"{pod.pod_id} ({pod.provider}, {pod.experiment}): taken for gone, but {evidence}; {plan}.",
        pod_id=pod_id,
        kind="revived",
        level="warning",
    )
    return True


def event(req: Request, deps: Deps, now: float) -> Response:
    signed = verify_pod(req, deps, now)
    body = parse(api.PodEvent, req.body)
    _same_pod(signed, body.pod_id)
    _check_time("end_at", body.end_at, now, END_PAST_S, FUTURE_SLACK_S)
    if not deps.store.claim_event_seq(signed.pod_id, signed.seq, now, keep_s=2 * api.SIGNATURE_WINDOW_S):
        raise HttpError(409, "replayed event: this seq was already received")
    # The pod waits for this answer before its destroy call: the ledger end is recorded first, the
    # phone hears about it second.
    if body.end_at is not None:
        by = {"idle_destroy": "idle", "deadline_destroy": "deadline"}.get(body.kind, "wrapper")
        record_end(deps, signed.pod_id, now, end_at=body.end_at, by=by, note=body.note)
    elif body.kept_left_s is not None:
        record_kept(deps, signed.pod_id, now, body.kept_left_s)
    elif body.kind in SYNCED_ENDS:  # KEEP_ALIVE=1: synced, not ending: nothing is kept for its results
        clear_kept(deps, signed.pod_id)
    pod = deps.store.get_pod(signed.pod_id)
    if pod is None:
        raise HttpError(401, BAD_POD)
    if not admit_event(deps, pod, body.kind, now):
        return ok(api.Ack())  # recorded and counted; its push is told with the hour's others
    announce(
        deps,
        now,
        f"gpuc: {pod.name} {body.kind.replace('_', ' ')}",
        _event_text(pod, body),
        pod_id=pod.pod_id,
        kind=body.kind,
        level=_event_level(body),
    )
    return ok(api.Ack())


def _event_text(pod: StoredPod, body: api.PodEvent) -> str:
    parts = [f"{pod.pod_id} ({pod.provider}, {pod.experiment}): {pod_says(body.message)}"]
    if body.exit_code is not None:
        parts.append(f"exit code {body.exit_code}")
    if body.duration_s is not None:
        parts.append(f"ran {body.duration_s / 60:.1f} min")
    return "; ".join(parts)


def _event_level(body: api.PodEvent) -> Level:
    if body.kind in ("sync_failed", "destroy_failed", "verify_failed", "stop_failed"):
        return "error"
    if body.kind in ("idle_warning", "deadline_warning", "kept_stopping", "kept_stopped"):
        return "warning"
    if body.kind == "job_exit" and body.exit_code not in (0, None):
        return "warning"
    return "info"


def _same_pod(signed: Signed, body_pod_id: str) -> None:
    if body_pod_id != signed.pod_id:
        raise HttpError(400, f"body pod_id does not match the {api.H_POD} header")


def record_end(deps: Deps, pod_id: str, now: float, *, end_at: float, by: str, note: str | None) -> None:
    """The ledger end, recorded once: the first end wins (a retried call, or `down` after the reaper,
    does not move it); a note, the user's conclusion, is always kept. The pod (or `down`) destroys it
    next; if that fails, the reaper takes over at destroy_at (F9)."""
    store = deps.store
    ended = store.update_if(
        pod_id,
        {"state": MARKABLE_STATES},
        {
            "state": "ended",
            "end_at": end_at,
            "ended_by": by,
            "destroy_at": now + deps.settings.destroy_grace_s,
            "reason": None,
        },
    )
    if not ended:
        store.update_if(pod_id, {"end_at": None}, {"end_at": end_at, "ended_by": by})
    if note:
        store.update_if(pod_id, {}, {"note": note})
    # An end comes after a verified sync (the pod's), or is the user's word (`down`, which refuses a kept
    # pod unless --force or `gpuc results` copied them): nothing is kept for its results any more.
    clear_kept(deps, pod_id)


def clear_kept(deps: Deps, pod_id: str) -> None:
    deps.store.update_if(pod_id, {}, {"kept_at": None, "kept_until": None})


def record_kept(deps: Deps, pod_id: str, now: float, left_s: float) -> None:
    """The pod says it is kept for its results (its sync failed) and stops itself in `left_s`: the first
    such word is recorded, on the watchdog's clock (CAS, once). From then on the reaper never destroys
    it, and stops it if it still runs a period after `kept_until` (kept window + one period: F16)."""
    deps.store.update_if(
        pod_id,
        {"kept_at": None, "state": MARKABLE_STATES},
        {"kept_at": now, "kept_until": now + min(left_s, deps.settings.kept_window_s)},
    )


def _admin_pod(req: Request, deps: Deps) -> StoredPod:
    pod_id = unquote(req.params.get("pod_id", ""))
    pod = deps.store.get_pod(pod_id) if 0 < len(pod_id) <= 128 else None
    if pod is None:
        raise HttpError(404, "unknown pod")
    return pod


def keep(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    pod = _admin_pod(req, deps)
    body = parse(api.KeepRequest, req.body)
    longest = now + deps.settings.max_hours * 3600
    if body.until > longest:
        # An unbounded lease would switch the reaper off for this pod: cap it at the pod's hard limit.
        raise HttpError(
            400, f"json validation error: until is too large (at most max_hours ahead, {iso(longest)})"
        )
    deps.store.update_if(pod.pod_id, {}, {"lease_until": body.until})
    return ok(api.Ack())


def capped_deadline(pod: StoredPod, deps: Deps) -> StoredPod:
    """No deadline past the pod's start + max_lifetime_hours. `up` refuses a longer --max-hours before
    renting; a laptop whose cap is higher than this watchdog's gets this watchdog's (the safe direction;
    the pod's agent adopts it from its first heartbeat answer)."""
    if pod.deadline_at is None or pod.deadline_at <= (limit := limit_of(pod, deps.settings)):
        return pod
    return pod.model_copy(update={"deadline_at": limit})


def deadline(req: Request, deps: Deps, now: float) -> Response:
    """`gpuc extend` / `gpuc keep`: move the deadline, within the user's cap. The pod hears it in its next
    heartbeat answer; the reaper reckons with it from its next pass."""
    require_admin(req, deps)
    pod = _admin_pod(req, deps)
    body = parse(api.DeadlineRequest, req.body)
    if (body.deadline_at is None) == (body.extend_s is None):
        raise HttpError(400, "json validation error: send exactly one of deadline_at and extend_s")
    if pod.state not in MARKABLE_STATES:
        raise HttpError(409, "pod already ended: its deadline no longer applies")
    settings = deps.settings
    current, limit = deadline_of(pod, settings), limit_of(pod, settings)
    # "2 h more" of a deadline already past (the pod kept for its sync, a reaper blind) counts from now.
    asked = body.deadline_at if body.deadline_at is not None else max(current, now) + (body.extend_s or 0.0)
    wanted = max(current, min(asked, limit)) if body.at_least else asked
    if wanted > limit:
        raise HttpError(
            400,
            f"json validation error: deadline_at is too late (at most max_lifetime_hours "
            f"{settings.max_lifetime_hours:g} h after the pod's start, {iso(limit)})",
        )
    if wanted < now:
        raise HttpError(400, "json validation error: deadline_at is in the past (`gpuc down` ends a pod now)")
    if wanted != current:
        move_deadline(deps, pod, now, wanted)
    return ok(api.DeadlineAnswer(deadline_at=wanted, previous=current, limit_at=limit, capped=wanted < asked))


def move_deadline(deps: Deps, pod: StoredPod, now: float, wanted: float) -> None:
    changes: dict[str, Any] = {"deadline_at": wanted}
    if (pod.alerted or "").startswith(DEADLINE_ALERT):
        # Warned for the old deadline: that warning (and its mark) is void; a later one warns afresh.
        changes.update(alerted=None, alerted_at=None)
        if pod.state == "down":
            changes.update(state="ok", destroy_at=None, reason=None)
    # CAS on the deadline read: a concurrent move (a second `extend`, a budget pull-in) is not overwritten.
    if not deps.store.update_if(pod.pod_id, {"state": pod.state, "deadline_at": pod.deadline_at}, changes):
        raise HttpError(409, "the pod changed meanwhile: try again")
    announce(
        deps,
        now,
        f"gpuc: {pod.name} now ends at {iso(wanted)}",
        f"{pod.pod_id} ({pod.provider}, {pod.experiment}): its deadline moved from "
        f"{iso(deadline_of(pod, deps.settings))} to {iso(wanted)}.",
        pod_id=pod.pod_id,
        kind="deadline",
    )


def end(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    pod = _admin_pod(req, deps)
    body = parse(api.EndRequest, req.body)
    _check_time("end_at", body.end_at, now, END_PAST_S, FUTURE_SLACK_S)
    record_end(deps, pod.pod_id, now, end_at=body.end_at, by=body.by, note=body.note)
    return ok(api.Ack())


def notify(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    body = parse(api.NotifyRequest, req.body)
    announce(deps, now, body.title, body.message, kind="client")
    return ok(api.Ack())


def status(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    meta = deps.store.get_meta("reaper")
    last = meta.value if meta else {}
    since = last.get("blind_since")
    since = since if isinstance(since, dict) else {}
    why = last.get("blind_why")
    why = why if isinstance(why, dict) else {}
    return ok(
        api.StatusResponse(
            server_time=now,
            reaper_last_run=last.get("last_run"),
            reaper_period_s=deps.settings.reaper_period_s,
            reaper_blind=list(last.get("blind", [])),
            reaper_blind_since=[
                api.BlindProvider(provider=name, since=float(t), why=str(why.get(name, "")))
                for name, t in sorted(since.items())
            ],
            pods=[p.to_record() for p in deps.store.list_pods()],
            notifications=deps.store.recent_notifications(NOTIFICATIONS_IN_STATUS),
        )
    )


def reap(req: Request, deps: Deps, now: float) -> Response:
    require_admin(req, deps)
    body = parse(api.ReapRequest, req.body) if req.body else api.ReapRequest()
    return ok(reap_once(deps, now, dry_run=body.dry_run))


_POD_ID = r"(?P<pod_id>[^/]{1,384})"
ROUTES: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    ("POST", re.compile(r"/v1/pods"), register),
    ("POST", re.compile(r"/v1/heartbeat"), heartbeat),
    ("POST", re.compile(r"/v1/events"), event),
    ("POST", re.compile(rf"/v1/pods/{_POD_ID}/keep"), keep),
    ("POST", re.compile(rf"/v1/pods/{_POD_ID}/end"), end),
    ("POST", re.compile(rf"/v1/pods/{_POD_ID}/deadline"), deadline),
    ("POST", re.compile(r"/v1/notify"), notify),
    ("GET", re.compile(r"/v1/status"), status),
    ("POST", re.compile(r"/v1/reap"), reap),
)


def route(method: str, path: str) -> tuple[Handler, dict[str, str]]:
    allowed = False
    for verb, pattern, handler in ROUTES:
        match = pattern.fullmatch(path.rstrip("/") or "/")
        if match is None:
            continue
        if verb == method.upper():
            return handler, match.groupdict()
        allowed = True
    if allowed:
        raise HttpError(405, "method not allowed")
    raise HttpError(404, "no such route")


def dispatch(req: Request, deps: Deps, now: float) -> Response:
    try:
        if len(req.body) > api.MAX_BODY_BYTES:
            raise HttpError(413, f"body larger than {api.MAX_BODY_BYTES} bytes")
        handler, params = route(req.method, req.path.split("?", 1)[0])
        return handler(replace(req, params=params), deps, now)
    except HttpError as exc:
        return Response(exc.status, {"error": exc.message, **exc.extra})
    except Exception as exc:
        # A bug or a broken store, never bad input (that is all caught above): say so without details.
        log.error(
            "%s %s failed: %s", req.method, req.path, redact(f"{type(exc).__name__}: {exc}", deps.secrets())
        )
        return Response(500, {"error": "internal error"})


def response_bytes(response: Response) -> bytes:
    return json.dumps(response.body, separators=(",", ":")).encode()
