"""The one HTTP choke point of the RunPod and Vast clients.

Every provider request goes through `HttpClient.request`: auth header, default timeout, the retry
table below, and the mapping of failures onto gpuc.core.errors with the provider's own message and
request id. Bodies are never logged: Vast's /users/current answers with the account API key in it,
and a pod's env is echoed in every listing.

Retry table (what happens after each kind of failure):

    failure                  idempotent call        create (not idempotent)
    HTTP 429                 retry with backoff     retry: refused at the edge, nothing was applied
    HTTP 429, quota spent    fail at once           fail at once (Vast search_quota_exceeded: resets at UTC midnight)
    HTTP 502 / 503 / 504     retry with backoff     ambiguous: it may have been applied
    other HTTP 5xx           fail                   ambiguous
    connect error / timeout  retry with backoff     retry: the request never reached the server
    read/write timeout       retry with backoff     ambiguous
    connection dropped       retry with backoff     ambiguous
    not sent, cannot be      fail at once           fail at once (a TLS certificate not trusted, a proxy
      (TLS, proxy, URL)                               gpuc cannot use: nothing went out, nor will it)

"Ambiguous" raises AmbiguousOutcome: the caller looks the pod up by name before sending again,
because retrying a create blindly can leave two billed pods.

The bytes travel through core/transport.py, the process's one httpx client (a test may hand in its own
httpx transport): the transport only says how an exchange failed, and the rules above decide what follows.
"""

from __future__ import annotations

import json as jsonlib
import logging
import random
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import urlencode, urlsplit

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import (
    ProviderAuthError,
    ProviderError,
    ProviderSchemaError,
    ProviderUnavailable,
)
from gpuc.core.providers.answers import message_from_body
from gpuc.core.redact import redact
from gpuc.core.transport import FailureKind, RawReply, TransportFailure, exchange, new_client, shared_client

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("gpuc.providers.http")

Action = Literal["retry", "ambiguous", "fail"]


@dataclass(frozen=True)
class RetryRule:
    """What one kind of failure does to an idempotent call and to a create (see the table above)."""

    reason: str
    idempotent: Action
    not_idempotent: Action
    hint: str = "the provider is not answering reliably; try again in a few minutes"


RETRY_BY_STATUS: dict[int, RetryRule] = {
    429: RetryRule("rate limited", "retry", "retry"),
    502: RetryRule("bad gateway", "retry", "ambiguous"),
    503: RetryRule("service unavailable", "retry", "ambiguous"),
    504: RetryRule("gateway timeout", "retry", "ambiguous"),
}
OTHER_5XX = RetryRule("server error", "fail", "ambiguous")
# By how the exchange failed (core/transport.py): only a request that never reached the server is safe
# to send again when it is not idempotent.
RETRY_BY_FAILURE: dict[FailureKind, RetryRule] = {
    "connect": RetryRule("cannot connect", "retry", "retry"),
    "connect_timeout": RetryRule("connect timeout", "retry", "retry"),
    "pool_timeout": RetryRule("connection pool timeout", "retry", "retry"),
    "timeout": RetryRule("timed out", "retry", "ambiguous"),
    "dropped": RetryRule("connection dropped", "retry", "ambiguous"),
    "network": RetryRule("network error", "retry", "ambiguous"),
    "deadline": RetryRule(
        "no whole answer within the deadline",
        "fail",
        "ambiguous",
        "the provider is slow or stuck; try again later, or raise GPUC_PROVIDER_TIMEOUT_S on a slow link",
    ),
    "too_large": RetryRule("the answer is too large", "fail", "ambiguous", "the provider API may have changed"),
    "other": RetryRule("transport error", "fail", "ambiguous"),
    "not_sent": RetryRule(
        "not sent",
        "fail",
        "fail",
        "a proxy that inspects TLS needs its CA in SSL_CERT_FILE; gpuc speaks to an http:// proxy only "
        "(HTTPS_PROXY, HTTP_PROXY, ALL_PROXY)",
    ),
}

# Which header carries the request id is not documented by either provider (UNCONFIRMED): take the first.
REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-correlation-id", "cf-ray")
MAX_MESSAGE = 300
RETRY_AFTER_CAP_S = 60.0
# A 429 whose body names one of these is a spent quota, not a momentary limit: retrying only burns more of
# it (vast-cli's is_search_quota_exceeded does not retry it either).
QUOTA_ERRORS = ("search_quota_exceeded",)


class BackoffFunction(Protocol):
    def __call__(self, retry: int) -> float: ...


def exponential_backoff(
    base: float = 0.5, multiplier: float = 2.0, cap: float = 30.0, jitter: bool = True
) -> BackoffFunction:
    """Seconds to wait before retry number `retry` (0-based): base·multiplier^retry, capped, with
    "equal jitter" (half fixed, half random) so many clients do not retry in lockstep."""

    def backoff(retry: int) -> float:
        delay = min(cap, base * multiplier**retry)
        return delay / 2 + random.uniform(0, delay / 2) if jitter else delay

    return backoff


def zero_backoff(retry: int) -> float:
    return 0.0


class AmbiguousOutcome(ProviderUnavailable):
    """A non-idempotent request may or may not have been applied: look before sending it again."""


@dataclass(frozen=True)
class Reply:
    """A provider's answer: status, the JSON body, the request id for the error messages."""

    status: int
    body: Any
    request_id: str | None


class HttpClient:
    """A transport with gpuc's auth, timeout, retry table and error mapping."""

    def __init__(
        self,
        *,
        provider: str,
        api_key: str,
        key_env: str,
        timeout_s: float = 20.0,
        max_attempts: int = 5,
        backoff: BackoffFunction | None = None,
        clock: Clock | None = None,
        transport: httpx.BaseTransport | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        """`client`: the httpx client to send with, else the process's shared one (core/transport.py);
        `transport`: a test's in-process server, in a client of this HttpClient's own."""
        self.provider = provider
        self.key_env = key_env
        self.max_attempts = max(1, max_attempts)
        self.backoff: BackoffFunction = backoff or exponential_backoff()
        self.clock: Clock = clock or SystemClock()
        self._secrets = [api_key]
        self._headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}
        self.timeout_s = timeout_s
        self._own = new_client(transport) if transport is not None else None
        self._given = client

    def _http(self) -> httpx.Client:
        return self._own or self._given or shared_client()

    def close(self) -> None:
        """Close this client's own connections; the shared client stays the process's."""
        if self._own is not None:
            self._own.close()

    def _send(self, method: str, url: str, json: Any, params: Mapping[str, str] | None, until: float) -> RawReply:
        headers = dict(self._headers)
        content = None
        if json is not None:
            content = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        if params:
            url += ("&" if urlsplit(url).query else "?") + urlencode(params)
        return exchange(self._http(), method, url, headers, content, until=until)

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        idempotent: bool = True,
        accept: Collection[int] = (),
    ) -> Reply:
        """Send with retries, all within `timeout_s`; return 2xx replies and the statuses in `accept`, raise
        on everything else."""
        until = time.monotonic() + self.timeout_s
        for attempt in range(self.max_attempts):
            last = attempt + 1 == self.max_attempts
            try:
                response = self._send(method, url, json, params, until)
            except TransportFailure as exc:
                said = self.redact(exc.what) if exc.kind == "not_sent" else None  # why, when it is not "try again"
                self._after_failure(
                    RETRY_BY_FAILURE[exc.kind], idempotent, method, url, attempt, last, until,
                    status=None, request_id=None, message=said,
                )  # fmt: skip
                continue
            request_id = request_id_of(response)
            log.debug("%s %s %s -> %s", self.provider, method, path_of(url), response.status)
            if 200 <= response.status < 300 or response.status in accept:
                return Reply(response.status, self._json_body(response, url, request_id), request_id)
            by_status = status_rule(response.status)
            if by_status is None:
                raise self._error_for(response, request_id)
            if quota_spent(response):
                raise self._quota_error(response, request_id, method, url)
            self._after_failure(
                by_status,
                idempotent,
                method,
                url,
                attempt,
                last,
                until,
                status=response.status,
                request_id=request_id,
                retry_after=retry_after_s(response),
                message=self._message(response),
            )
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _after_failure(
        self,
        rule: RetryRule,
        idempotent: bool,
        method: str,
        url: str,
        attempt: int,
        last: bool,
        until: float,
        *,
        status: int | None,
        request_id: str | None,
        retry_after: float | None = None,
        message: str | None = None,
    ) -> None:
        """Sleep before the next attempt, or raise what the retry table says."""
        action = rule.idempotent if idempotent else rule.not_idempotent
        what = f"{method} {path_of(url)}: {rule.reason}" + (f": {message}" if message else "")
        if action == "ambiguous":
            raise AmbiguousOutcome(
                f"{what}; the request may have been applied",
                provider=self.provider,
                status=status,
                request_id=request_id,
                hint="gpuc looks the pod up by name before sending it again",
            )
        if action == "fail" or last:
            raise self._gave_up(what, attempt, rule, status, request_id, "")
        delay = self.backoff(attempt)
        if retry_after is not None:
            delay = max(delay, min(retry_after, RETRY_AFTER_CAP_S))
        if delay >= until - time.monotonic():  # one budget per call: no retry that cannot end in time
            raise self._gave_up(what, attempt, rule, status, request_id, f", within {self.timeout_s:g} s")
        log.warning("%s %s: retry %d/%d in %.1fs", self.provider, what, attempt + 1, self.max_attempts - 1, delay)
        self.clock.sleep(delay)

    def _gave_up(
        self, what: str, attempt: int, rule: RetryRule, status: int | None, request_id: str | None, within: str
    ) -> ProviderUnavailable:
        return ProviderUnavailable(
            f"{what} (after {attempt + 1} attempt{'s' if attempt else ''}{within})",
            provider=self.provider,
            status=status,
            request_id=request_id,
            hint=rule.hint,
        )

    def _json_body(self, response: RawReply, url: str, request_id: str | None) -> Any:
        if not response.content.strip():
            return None
        try:
            return jsonlib.loads(response.content)
        except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError is a ValueError)
            raise ProviderSchemaError(
                f"{path_of(url)} answered HTTP {response.status} with a body "
                "that is not JSON",
                provider=self.provider, status=response.status, request_id=request_id,
                hint="the provider API may have changed; gpuc will not guess what it meant",
            ) from None  # fmt: skip

    def redact(self, text: str) -> str:
        """Provider words about to go into an error or a log: the key out, token-shaped strings too."""
        return redact(text, self._secrets)

    def _message(self, response: RawReply) -> str:
        return self.redact(error_message(response))

    def _quota_error(self, response: RawReply, request_id: str | None, method: str, url: str) -> ProviderUnavailable:
        reset = response.headers.get("x-ratelimit-reset", "")
        when = f" (resets at unix time {reset})" if reset.isdigit() else " (it resets at UTC midnight)"
        return ProviderUnavailable(
            f"{method} {path_of(url)}: quota exhausted: {self._message(response) or 'search quota exceeded'}",
            provider=self.provider,
            status=response.status,
            request_id=request_id,
            hint=f"the provider's daily quota is spent{when}; retrying now would only spend more",
        )

    def _error_for(self, response: RawReply, request_id: str | None) -> ProviderError:
        status = response.status
        message = self._message(response)
        if status in (401, 403):
            return ProviderAuthError(
                message or "the API key was refused",
                provider=self.provider,
                status=status,
                request_id=request_id,
                hint=f"check {self.key_env} (environment or .env): is it current, and allowed to do this?",
            )
        return ProviderError(message or "request failed", provider=self.provider, status=status, request_id=request_id)


def status_rule(status: int) -> RetryRule | None:
    if status in RETRY_BY_STATUS:
        return RETRY_BY_STATUS[status]
    return OTHER_5XX if status >= 500 else None


def quota_spent(response: RawReply) -> bool:
    if response.status != 429:
        return False
    try:
        body = jsonlib.loads(response.content)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("error") in QUOTA_ERRORS


def request_id_of(response: RawReply) -> str | None:
    for header in REQUEST_ID_HEADERS:
        value = response.headers.get(header)
        if isinstance(value, str) and value:
            return value[:80]
    return None


def retry_after_s(response: RawReply) -> float | None:
    raw = response.headers.get("retry-after")
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None  # an HTTP-date: rare enough that the backoff is good enough


def error_message(response: RawReply) -> str:
    """The provider's own words: GraphQL errors[0].message, RFC 9457 detail, Vast msg, or plain text."""
    try:
        body = jsonlib.loads(response.content)
    except ValueError:
        return " ".join(response.content.decode("utf-8", "replace").split())[:MAX_MESSAGE]
    return message_from_body(body)[:MAX_MESSAGE]


def path_of(url: str) -> str:
    """For logs: the path only. Query strings are not secret today, but they are not needed either."""
    return urlsplit(url).path


def require(condition: bool, provider: str, what: str) -> None:
    """A body without the shape we rely on is an error, never read as "nothing there"."""
    if not condition:
        raise ProviderSchemaError(
            f"unexpected answer: {what}",
            provider=provider,
            hint="the provider API may have changed; gpuc will not guess (report it with the request id)",
        )
