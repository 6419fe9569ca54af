"""Signed heartbeats and events to the functions (core.api: POST /v1/heartbeat, POST /v1/events).

Every request is signed over `timestamp.seq.body` (core.signing) with a seq that rises across agent
restarts and across processes (the agent and the wrapper share one counter file). A retry is signed
afresh: the functions reject a replayed seq, and a replayed "alive" is exactly the attack they guard.

When the functions are unreachable, messages wait in memory and go out with capped exponential
backoff; each attempt has a short timeout, so the idle watch is never held up for long. Only the
newest heartbeat is kept (an old "alive" says nothing); events queue in order.

The functions accept a signature only within 5 minutes of THEIR clock. A pod clock that is off
(a container without NTP, a host that drifted) would have every ping refused, and a pod that cannot
ping looks dead to the reaper. So what goes over the wire (the signed timestamp, `sent_at`, `end_at`)
is in the functions' time: the offset comes from `server_time` in their answers, or from the HTTP
`Date` header, and a refusal for the time window is retried at once, signed afresh. The agent's own
schedule stays on the local clock, which never jumps.

The parts: signer.py (the seq, the claim, the signature), podhttp.py (the HTTP POST); this module is the
client that sends, queues, retries and reads the answers.
"""

from __future__ import annotations

import contextlib
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuc.core import wire
from gpuc.core.clock import Clock
from gpuc.instance_side.podhttp import HttpResult, Transport, TransportError
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.signer import Signer, valid_claim

HEARTBEAT_PATH = "/v1/heartbeat"
EVENTS_PATH = "/v1/events"
REQUEST_TIMEOUT_S = 5.0
MAX_QUEUED_EVENTS = 100
# A 4xx other than these is permanent for that message (bad signature, bad body): retrying the same
# request cannot fix it. These mean "try again", and a fresh signature may be what fixes them.
_RETRY_STATUSES = frozenset({408, 409, 425, 429})
# Against core.api's 300 s signature window, a correction under 5 s is noise (a round trip, the Date
# header's whole seconds): not worth moving the clock for.
CLOCK_TOLERANCE_S = 5.0
_TIME_WINDOW_REFUSAL = "timestamp outside"
# An event's `end_at` (the ledger's end) is queued on the pod's clock and sent on the functions'.
_POD_TIME_FIELD = "end_at"


@dataclass(frozen=True)
class Answer:
    """What a heartbeat answer tells the pod (core.api.HeartbeatAnswer), `lease_until` already on the
    pod's local clock (the agent compares it with its own `now`)."""

    server_time: float | None
    lease_until: float | None
    # On the functions' clock, as the watchdog keeps it (the agent converts as it compares: the offset may
    # be learnt later); None when the answer carries none or an absurd one.
    deadline_at: float | None = None
    # The user's word from the phone (core.api.HeartbeatAnswer): "end" or "retry_sync", once per intent_at.
    intent: str | None = None
    intent_at: float | None = None
    claim: str | None = None  # the watchdog's latest claim for this pod (kept by PodClient)


@dataclass
class _Pending:
    path: str
    payload: dict[str, Any]
    stamp_body: bool


class PodClient:
    def __init__(
        self,
        base_url: str,
        signer: Signer,
        transport: Transport,
        clock: Clock,
        log: PodLog,
        *,
        timeout_s: float = REQUEST_TIMEOUT_S,
        backoff_cap_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.transport = transport
        self.clock = clock
        self.log = log
        self.timeout_s = timeout_s
        self.backoff_cap_s = max(1.0, backoff_cap_s)
        self._heartbeat: _Pending | None = None
        self._events: deque[_Pending] = deque(maxlen=MAX_QUEUED_EVENTS)
        self.failures = 0
        self.next_attempt = 0.0
        self.last_ok: float | None = None
        self.skew_alerted = False  # "pod clock off by N s" goes out once

    # -- the agent's buffered path ------------------------------------------------------------
    def queue_heartbeat(self, body: Mapping[str, Any]) -> None:
        self._heartbeat = _Pending(HEARTBEAT_PATH, dict(body), stamp_body=True)

    def queue_event(self, event: Mapping[str, Any]) -> None:
        self._events.append(_Pending(EVENTS_PATH, dict(event), stamp_body=False))

    @property
    def pending(self) -> int:
        return len(self._events) + (self._heartbeat is not None)

    def flush(self, now: float) -> Answer | None:
        """Send what is queued, unless backing off. Returns the heartbeat answer if one came back."""
        if now < self.next_attempt or not self.pending:
            return None
        answer: Answer | None = None
        try:
            if self._heartbeat is not None:
                result = self._attempt(self._heartbeat)
                self._heartbeat = None
                answer = _parse_answer(result, self.signer.offset_s)
                if answer is not None and answer.claim is not None and self.signer.claim is not None:
                    self.signer.claim.keep(answer.claim)
            while self._events:
                self._attempt(self._events[0])
                self._events.popleft()
        except TransportError as exc:
            self._back_off(now, str(exc))
            return answer
        self.failures = 0
        self.next_attempt = 0.0
        self.last_ok = now
        return answer

    def _back_off(self, now: float, why: str) -> None:
        self.failures += 1
        delay = min(self.backoff_cap_s, 2.0 ** min(self.failures, 16))
        self.next_attempt = now + delay
        self.log.line(f"functions unreachable ({why}); {self.pending} queued, retry in {delay:.0f}s")

    # -- the ending's synchronous path --------------------------------------------------------
    def deliver(self, event: Mapping[str, Any], budget_s: float) -> bool:
        """Send one event now, retrying within `budget_s`. Never longer: a destroy waits on it (F13)."""
        pending = _Pending(EVENTS_PATH, dict(event), stamp_body=False)
        deadline = self.clock.now() + budget_s
        delay = 0.5
        while True:
            remaining = deadline - self.clock.now()
            try:
                result = self._attempt(pending, timeout_s=max(0.1, min(self.timeout_s, remaining)))
            except TransportError as exc:
                self.log.line(f"notify failed: {exc}")
            else:
                return result is not None
            if deadline - self.clock.now() <= delay:
                return False
            self.clock.sleep(delay)
            delay *= 2

    # -- a request whose answer the caller reads (the results grants) ---------------------------
    def exchange(self, path: str, payload: Mapping[str, Any], budget_s: float) -> HttpResult:
        """Send `payload` to `path` now and hand back the answer: a success, or a refusal that retrying cannot
        fix (the caller says why). What can pass (unreachable, 5xx, 429, a clock or seq refusal) is retried,
        signed afresh, with backoff, inside `budget_s`; TransportError when it never got through."""
        pending = _Pending(path, dict(payload), stamp_body=False)
        deadline = self.clock.now() + budget_s
        delay = 0.5
        while True:
            remaining = deadline - self.clock.now()
            why = ""
            try:
                result = self._post(pending, max(0.1, min(self.timeout_s, remaining)))
                if not 200 <= result.status < 300 and self._fix_refusal(result):
                    result = self._post(pending, max(0.1, min(self.timeout_s, deadline - self.clock.now())))
            except TransportError as exc:
                why = str(exc)
            else:
                if not (result.status >= 500 or result.status in _RETRY_STATUSES or _time_refusal(result)):
                    return result
                why = f"HTTP {result.status} {_error_text(result.body)}".strip()
            if deadline - self.clock.now() <= delay:
                raise TransportError(why)
            self.clock.sleep(delay)
            delay = min(delay * 2, 30.0)

    # -- one request --------------------------------------------------------------------------
    def _attempt(self, pending: _Pending, timeout_s: float | None = None) -> HttpResult | None:
        """None: the functions refused this message for good (logged, dropped). Raises TransportError
        when it is worth retrying later.

        A refusal the pod can fix at once (its clock outside the functions' window, a seq below what
        they last saw) is fixed and the message re-sent, signed afresh with a new seq; once only, so a
        server that keeps refusing costs one extra request, then the normal backoff."""
        result = self._post(pending, timeout_s)
        if not 200 <= result.status < 300 and self._fix_refusal(result):
            result = self._post(pending, timeout_s)
        if 200 <= result.status < 300:
            return result
        detail = _error_text(result.body)
        if result.status >= 500 or result.status in _RETRY_STATUSES or _time_refusal(result):
            # A clock refusal we could not fix is retried too: dropping heartbeats for a pod that is
            # alive is how the reaper comes to kill it.
            raise TransportError(f"HTTP {result.status} {detail}".strip())
        self.log.line(f"functions refused {pending.path}: HTTP {result.status} {detail}".rstrip())
        return None

    def _post(self, pending: _Pending, timeout_s: float | None) -> HttpResult:
        payload = pending.payload
        if payload.get(_POD_TIME_FIELD) is not None:
            # Converted at each attempt: the offset may have been learnt since the message was queued.
            payload = {**payload, _POD_TIME_FIELD: payload[_POD_TIME_FIELD] + self.signer.offset_s}
        body, headers = self.signer.sign(payload, stamp_body=pending.stamp_body)
        try:
            result = self.transport.post(self.base_url + pending.path, body, headers, timeout_s or self.timeout_s)
        except TransportError:
            raise
        except Exception as exc:
            # Whatever the HTTP stack throws is "not delivered, try later": never an error that
            # escapes into the idle watch or holds back a destroy.
            raise TransportError(f"{type(exc).__name__}: {exc}"[:200]) from None
        self._learn_time(result)
        return result

    def _learn_time(self, result: HttpResult) -> None:
        """Take the functions' clock from any answer that carries it, refusals included."""
        server = _server_time(result)
        if server is None:
            return
        offset = server - self.clock.now()
        if abs(offset - self.signer.offset_s) > CLOCK_TOLERANCE_S:
            self.log.line(f"pod clock is {_skew_text(offset)} the functions': signing with their time from now on")
            self.signer.offset_s = offset

    def _fix_refusal(self, result: HttpResult) -> bool:
        """True when re-sending now can succeed."""
        if _time_refusal(result):
            # _learn_time already took the server's clock from this answer, if it carried one.
            if abs(self.signer.offset_s) <= CLOCK_TOLERANCE_S:
                return False  # nothing learnt: no better timestamp to sign with
            if not self.skew_alerted:
                self.skew_alerted = True
                self.queue_event(
                    event_body(
                        self.signer.pod_id,
                        "info",
                        f"pod clock off by {abs(self.signer.offset_s):.0f} s "
                        f"({'ahead' if self.signer.offset_s < 0 else 'behind'}): a ping was refused for the "
                        "signature time window; the pod now signs with the functions' time. Fix the pod's "
                        "clock (NTP) if you can.",
                    )
                )
            return True
        last_seq = _json_field(result.body, "last_seq")
        if result.status == 409 and isinstance(last_seq, int) and not isinstance(last_seq, bool):
            self.signer.seq.at_least(last_seq)
            return True
        return False


def _error_text(body: bytes) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(body).get("error", ""))[:200]
    return ""


def _json_field(body: bytes, name: str) -> object:
    with contextlib.suppress(ValueError, AttributeError):
        return json.loads(body).get(name)
    return None


def _time_refusal(result: HttpResult) -> bool:
    return result.status == 401 and _TIME_WINDOW_REFUSAL in _error_text(result.body)


def _server_time(result: HttpResult) -> float | None:
    """The functions' clock: `server_time` in the JSON answer (heartbeat answers, time-window
    refusals), else the HTTP Date header (whole seconds: +0.5 s puts it mid-second)."""
    server = _num(_json_field(result.body, "server_time"))
    if server is None and result.date:
        from email.utils import parsedate_to_datetime  # lazy: as in UrllibTransport.post

        try:
            stamp = parsedate_to_datetime(result.date)
        except (TypeError, ValueError, IndexError):
            return None
        server = None if stamp.tzinfo is None else stamp.timestamp() + 0.5
    # A garbled answer (NaN, 1e300, a proxy's epoch 0) must not become the clock every signature uses.
    return server if server is not None and _epoch(server) else None


def _skew_text(offset: float) -> str:
    return f"{abs(offset):.0f} s {'ahead of' if offset < 0 else 'behind'}"


def _parse_answer(result: HttpResult | None, offset_s: float) -> Answer | None:
    if result is None:
        return None
    try:
        data = wire.read("HeartbeatAnswer", json.loads(result.body), lenient=True)  # a bad field is dropped
    except (ValueError, wire.WireError):
        return None
    lease, deadline = data.get("lease_until"), data.get("deadline_at")
    claim = data.get("claim")
    return Answer(
        claim=claim if valid_claim(claim) else None,
        intent=data.get("intent"),
        intent_at=data.get("intent_at"),
        server_time=data.get("server_time"),
        lease_until=None if lease is None else lease - offset_s,
        # A garbled deadline (1e300, epoch 0) must not end the pod now, nor never.
        deadline_at=deadline if deadline is not None and _epoch(deadline) else None,
    )


def _epoch(value: float) -> bool:
    """Within the bounds the watchdog puts on every time it takes (core/api.py Epoch): 2020 to 2100."""
    bounds = wire.field("PodEvent", "end_at")
    return bool(bounds["minimum"] <= value <= bounds["maximum"])


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def heartbeat_body(pod_id: str, **fields: Any) -> dict[str, Any]:
    """A HeartbeatBody without seq/sent_at (the signer stamps them per attempt)."""
    return {"pod_id": pod_id, **fields}


def event_body(
    pod_id: str,
    kind: str,
    message: str,
    *,
    exit_code: int | None = None,
    duration_s: float | None = None,
    end_at: float | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """A PodEvent, trimmed to the functions' limits so a long message never costs the whole event.
    `end_at` is on the pod's clock: PodClient puts it on the functions' clock as it signs."""
    if kind not in wire.field("PodEvent", "kind")["enum"]:
        raise ValueError(f"unknown event kind {kind!r}")
    return {
        "pod_id": pod_id,
        "kind": kind,
        "message": message[: wire.field("PodEvent", "message")["maxLength"]],
        "exit_code": exit_code,
        "duration_s": None if duration_s is None else max(0.0, duration_s),
        "end_at": end_at,
        "note": None if note is None else note[: wire.field("PodEvent", "note")["maxLength"]],
    }
