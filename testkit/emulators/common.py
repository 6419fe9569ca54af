"""What the RunPod and Vast emulators share: requests and answers free of any HTTP framework, the
per-call fault plan, the request record (keys redacted) and an httpx MockTransport over the handler.

An emulator is a plain object with `handle(EmuRequest) -> EmuResponse`; emulators/server.py serves it
over real HTTP on loopback and `Emulator.transport()` hands it to httpx in-process.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.providers.podhttp import Send, SendFailed, Sent

REDACTED = "<redacted>"
# A fault that hits before the operation runs, or after it was applied (the answer is lost).
PRE_COMMIT = ("timeout", "drop", "429", "success_false", "search_quota")
# Answered with the provider's own body for the kind (fault_answer), before the operation runs.
PROVIDER_ANSWERED = ("success_false", "search_quota")
AFTER_COMMIT = ("timeout_after_commit", "drop_after_commit", "cut_after_commit", "reset_after_commit")
# The answer's status kept, its content emptied: `{}`, `[]`, the provider's envelope with nothing in it
# (empty_data), or the one object asked for empty (empty_item). What a client must never read as "gone".
EMPTIED = ("empty_object", "empty_list", "empty_data", "empty_item")
ON_ANSWER = ("schema_drift", "broken_pagination", *EMPTIED)
STATUS_KIND = re.compile(r"^(4[0-9]{2}|5[0-9]{2})(_after_commit)?$")


@dataclass(frozen=True)
class EmuRequest:
    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]  # lower-case names
    body: bytes = b""

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[-1] if values else None

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not."""
        return json.loads(self.body.decode("utf-8")) if self.body.strip() else None

    def bearer(self) -> str | None:
        auth = self.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip()
        return self.param("api_key")


@dataclass
class EmuResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False  # no answer at all: the client times out
    drop: bool = False  # the connection closes without an answer
    cut: bool = False  # the status and headers go out, then the connection closes halfway through the body
    reset: bool = False  # the connection is reset (TCP RST) instead of an answer

    @classmethod
    def json(cls, status: int, value: Any, headers: Mapping[str, str] | None = None) -> EmuResponse:
        return cls(status, json.dumps(value).encode(), {"content-type": "application/json", **(headers or {})})

    @classmethod
    def text(cls, status: int, value: str, headers: Mapping[str, str] | None = None) -> EmuResponse:
        return cls(status, value.encode(), {"content-type": "text/plain", **(headers or {})})

    def decoded(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass
class Fault:
    op: str
    kind: str
    times: int | None  # None: until cleared


class Faults:
    """Per-call fault injection: `faults.add(op="create", kind="timeout_after_commit", times=1)`.

    Kinds: timeout, drop (before the operation runs); timeout_after_commit, drop_after_commit (the
    operation is applied and the answer lost), cut_after_commit (applied, its answer stops mid-body),
    reset_after_commit (applied, then the connection is reset);
    any 4xx/5xx status, e.g. "429", "500", "503", and
    "500_after_commit"; success_false (an HTTP 200 that refuses); search_quota (Vast: the daily search
    quota is spent, a 429 that retrying cannot cure); schema_drift (a body of a shape the client has never
    seen); broken_pagination (Vast list: the same next_token forever); empty_object / empty_list (the
    body is `{}` / `[]`), empty_data (the envelope with nothing in it: GraphQL `{"data": {}}`, Vast
    `{"instances": []}`), empty_item (the one object asked for, empty: GraphQL `{"data": {"pod": {}}}`,
    Vast `{"instances": {}}`, a REST v2 pod `{}`). op "*" is any.
    """

    def __init__(self) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()

    def add(self, op: str, kind: str, times: int | None = 1) -> None:
        known = kind in PRE_COMMIT + AFTER_COMMIT + ON_ANSWER or STATUS_KIND.match(kind)
        if not known:
            raise ValueError(f"unknown fault kind {kind!r}")
        with self._lock:
            self._faults.append(Fault(op, kind, times))

    def take(self, op: str) -> str | None:
        with self._lock:
            for fault in self._faults:
                if fault.op in (op, "*"):
                    if fault.times is not None:
                        fault.times -= 1
                        if fault.times <= 0:
                            self._faults.remove(fault)
                    return fault.kind
        return None

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def pending(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)


@dataclass(frozen=True)
class Recorded:
    op: str
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: str
    fault: str | None


def redacted_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: (REDACTED if k in ("authorization", "cookie", "x-api-key") else v) for k, v in headers.items()}


def redacted_query(query: Mapping[str, list[str]]) -> dict[str, list[str]]:
    return {k: ([REDACTED] * len(v) if k == "api_key" else list(v)) for k, v in query.items()}


def new_key(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


Route = tuple[str, Callable[[EmuRequest], EmuResponse]]


class Emulator(ABC):
    """State behind one lock; every request recorded (keys redacted) and checked against the fault plan."""

    provider = "?"

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.faults = Faults()
        self.requests: list[Recorded] = []
        self._lock = threading.RLock()
        # Called after each request, outside the lock: what a platform does beside its API (the demo
        # starts and kills the containers of emulated pods here).
        self.after_request: Callable[[EmuRequest], None] | None = None

    @abstractmethod
    def route(self, request: EmuRequest) -> Route | None: ...

    @abstractmethod
    def fault_answer(self, op: str, kind: str) -> EmuResponse:
        """The provider's own body for an injected status or success_false."""

    @abstractmethod
    def drift(self, op: str, kind: str, answer: EmuResponse) -> EmuResponse:
        """The answer reshaped for schema_drift / broken_pagination."""

    @abstractmethod
    def client_env(self, base_url: str) -> dict[str, str]:
        """The env a gpuc client needs to talk to this emulator at base_url (its key included)."""

    def emptied(self, op: str, kind: str, answer: EmuResponse) -> EmuResponse:
        """The answer for an EMPTIED kind; `empty_envelope` says what the provider's envelopes look like."""
        if kind == "empty_object":
            return EmuResponse.json(answer.status, {})
        if kind == "empty_list":
            return EmuResponse.json(answer.status, [])
        return EmuResponse.json(answer.status, self.empty_envelope(op, item=kind == "empty_item"))

    def empty_envelope(self, op: str, *, item: bool) -> Any:
        return {}

    def not_found(self, request: EmuRequest) -> EmuResponse:
        return EmuResponse.json(404, {"error": "not found"})

    def handle(self, request: EmuRequest) -> EmuResponse:
        with self._lock:
            try:
                answer = self._handle(request)
            finally:
                self._track()
        if self.after_request is not None:
            self.after_request(request)
        return answer

    @abstractmethod
    def _track(self) -> None:
        """Bring what follows the clock (a pod's billing life) up to date: runs after every request,
        under the lock, whatever the answer was."""

    def _handle(self, request: EmuRequest) -> EmuResponse:
        found = self.route(request)
        op = found[0] if found else "unrouted"
        kind = self.faults.take(op) if found else None
        self.requests.append(
            Recorded(
                op=op,
                method=request.method,
                path=request.path,
                query=redacted_query(request.query),
                headers=redacted_headers(request.headers),
                body=request.body.decode("utf-8", "replace"),
                fault=kind,
            )
        )
        if found is None:
            return self.not_found(request)
        return self._answer(op, kind, found[1], request)

    def _answer(
        self, op: str, kind: str | None, handler: Callable[[EmuRequest], EmuResponse], request: EmuRequest
    ) -> EmuResponse:
        if kind in ("timeout", "drop"):
            return EmuResponse(0, hang=kind == "timeout", drop=kind == "drop")
        if kind is not None and (kind in PROVIDER_ANSWERED or (STATUS_KIND.match(kind) and "after" not in kind)):
            return self.fault_answer(op, kind)
        answer = handler(request)
        if kind == "cut_after_commit":
            return EmuResponse(answer.status, answer.body, answer.headers, cut=True)
        if kind in AFTER_COMMIT:
            return EmuResponse(
                0,
                hang=kind == "timeout_after_commit",
                drop=kind == "drop_after_commit",
                reset=kind == "reset_after_commit",
            )
        if kind is not None and STATUS_KIND.match(kind):
            return self.fault_answer(op, kind.split("_")[0])
        if kind in EMPTIED:
            return self.emptied(op, kind, answer)
        if kind in ON_ANSWER:
            return self.drift(op, kind, answer)
        return answer

    def ops(self, op: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.op == op]

    def transport(self) -> httpx.MockTransport:
        """This emulator as an httpx transport: no socket, same behaviour (a timeout raises ReadTimeout)."""

        def handler(request: httpx.Request) -> httpx.Response:
            answer = self.handle(emu_request(request))
            if answer.hang:
                raise httpx.ReadTimeout("emulated: no answer", request=request)
            if answer.reset:
                raise httpx.ReadError("emulated: connection reset by peer", request=request)
            if answer.drop or answer.cut:
                raise httpx.RemoteProtocolError(
                    "emulated: server disconnected before the whole response", request=request
                )
            return httpx.Response(answer.status, content=answer.body, headers=answer.headers)

        return httpx.MockTransport(handler)

    def pod_send(self) -> Send:
        """This emulator as the pod's urllib sender (core/providers/podhttp.py): no socket, same behaviour (an
        answer that never comes, or a cut one, is a SendFailed as urllib's error becomes one)."""

        def send(method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Sent:
            parts = urlsplit(url)
            request = EmuRequest(
                method=method,
                path=parts.path,
                query=parse_qs(parts.query, keep_blank_values=True),
                headers={k.lower(): v for k, v in headers.items()},
                body=body or b"",
            )
            answer = self.handle(request)
            if answer.hang or answer.reset or answer.drop or answer.cut:
                raise SendFailed("emulated: no whole answer")
            return Sent(answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.body)

        return send


def emu_request(request: httpx.Request) -> EmuRequest:
    url = urlsplit(str(request.url))
    return EmuRequest(
        method=request.method,
        path=url.path,
        query=parse_qs(url.query, keep_blank_values=True),
        headers={k.lower(): v for k, v in request.headers.items()},
        body=request.read(),
    )
