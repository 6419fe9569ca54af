"""The pod's HTTP for its own end: urllib, no redirect followed, TLS verified, the environment's proxies, one
deadline per call with its retries inside (a 429, a 502/503/504, a connection that failed).

Standard library only: this runs on the pod under any python3 >= 3.9, with neither httpx nor pydantic."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import ProviderAuthError, ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.providers.answers import MAX_MESSAGE, RateLimited, message_from_body
from gpuc.core.redact import redact

USER_AGENT = "gpuc"  # as the laptop's requests say (core/transport.py)
SELF_DEADLINE_S = 120.0  # one self-destroy or self-stop, retries included
ATTEMPT_TIMEOUT_S = 20.0  # one exchange
RETRY_STATUSES = (429, 502, 503, 504)
RETRY_AFTER_CAP_S = 60.0
MAX_ANSWER_BYTES = 1 << 20  # an answer about one pod: anything larger is not one


REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-correlation-id", "cf-ray")


# -- the pod's HTTP: urllib, one deadline per call -------------------------------------------------------
class Sent(NamedTuple):
    status: int
    headers: Mapping[str, str]  # names lower-cased
    body: bytes


class SendFailed(Exception):
    """One exchange got no answer (refused, reset, timed out, TLS): tried again inside the deadline."""


Send = Callable[[str, str, Mapping[str, str], Optional[bytes], float], Sent]  # 3.9: no `|` at run time


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """No redirect is followed: the key would go wherever it points. A 3xx is an answer gpuc does not expect."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def urllib_send(method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Sent:
    """One exchange with the standard library: TLS verified, the environment's proxies, no redirect."""
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
    try:
        with opener.open(request, timeout=timeout_s) as answer:
            return Sent(int(answer.status), _lower(answer.headers), answer.read(MAX_ANSWER_BYTES + 1))
    except urllib.error.HTTPError as exc:
        with exc:
            return Sent(int(exc.code), _lower(exc.headers), exc.read(MAX_ANSWER_BYTES + 1))
    except (OSError, ValueError) as exc:  # URLError, timeouts, resets, a cut answer (http.client's are OSErrors)
        raise SendFailed(type(exc).__name__) from None
    except Exception as exc:  # http.client.HTTPException (a garbled status line) is not an OSError
        raise SendFailed(type(exc).__name__) from None


def _lower(headers: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (headers.items() if headers is not None else [])}


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any
    request_id: str | None
    not_json: bool = False


class PodKeyHttp:
    """The pod key's requests: auth, the retries, the deadline, the provider's words in every error (the key
    itself never: it is masked wherever a message quotes it)."""

    def __init__(
        self,
        provider: str,
        key: str,
        key_env: str,
        *,
        deadline_s: float = SELF_DEADLINE_S,
        clock: Clock | None = None,
        send: Send | None = None,
    ) -> None:
        self.provider = provider
        self.key_env = key_env
        self.deadline_s = deadline_s
        self.clock: Clock = clock or SystemClock()
        self.send: Send = send or urllib_send
        self._key = key
        self._until: float | None = None

    def begin(self) -> None:
        """A new call (a self-destroy, a self-stop): its deadline starts now."""
        self._until = self.clock.now() + self.deadline_s

    def scrub(self, text: str) -> str:
        return redact(text, [self._key])

    def request(
        self,
        method: str,
        url: str,
        *,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
        accept: Collection[int] = (),
        limited: Callable[[Reply], bool] = lambda reply: False,
        not_json_ok: Collection[int] = (),
    ) -> Reply:
        """2xx and the statuses in `accept` are answers (in JSON, but for the statuses in `not_json_ok`); what
        `limited` says of an answer is "later", as a 429."""
        until = self._until if self._until is not None else self.clock.now() + self.deadline_s
        headers = {"Authorization": f"Bearer {self._key}", "Accept": "application/json", "User-Agent": USER_AGENT}
        data = None
        if json_body is not None:
            data = json.dumps(json_body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        if params:
            url += ("&" if urllib.parse.urlsplit(url).query else "?") + urllib.parse.urlencode(params)
        what = f"{method} {urllib.parse.urlsplit(url).path}"
        attempt = 0
        while True:
            left = until - self.clock.now()
            retry_after: float | None = None
            try:
                sent = self.send(method, url, headers, data, max(0.1, min(ATTEMPT_TIMEOUT_S, left)))
            except SendFailed as exc:
                why, status, rate = f"no answer ({exc})", None, False
            else:
                reply = self._reply(sent, url)
                if (200 <= sent.status < 300 or sent.status in accept) and not limited(reply):
                    if reply.not_json and sent.status not in not_json_ok:
                        raise ProviderSchemaError(
                            f"{what} answered HTTP {sent.status} with a body that is not JSON",
                            provider=self.provider, status=sent.status, request_id=reply.request_id,
                            hint="the provider API may have changed; gpuc will not guess what it meant",
                        )  # fmt: skip
                    return reply
                rate = sent.status == 429 or limited(reply)
                if sent.status not in RETRY_STATUSES and not rate:
                    raise self._error_for(reply, self.scrub(message_from_body(reply.body)))
                why, status, retry_after = self._why(sent, reply, rate), sent.status, _retry_after(sent)
            delay = min(8.0, 0.5 * 2**attempt) * random.uniform(0.5, 1.0)
            if retry_after is not None:
                delay = max(delay, min(retry_after, RETRY_AFTER_CAP_S))
            if self.clock.now() + delay >= until:
                raise self._gave_up(what, why, attempt, status, rate)
            self.clock.sleep(delay)
            attempt += 1

    def _reply(self, sent: Sent, url: str) -> Reply:
        request_id = next((sent.headers[h][:80] for h in REQUEST_ID_HEADERS if sent.headers.get(h)), None)
        if len(sent.body) > MAX_ANSWER_BYTES:
            too_large = f"{urllib.parse.urlsplit(url).path}: the answer is larger than {MAX_ANSWER_BYTES} bytes"
            raise ProviderSchemaError(too_large, provider=self.provider)
        if not sent.body.strip():
            return Reply(sent.status, None, request_id)
        try:
            return Reply(sent.status, json.loads(sent.body), request_id)
        except ValueError:  # not JSON, or not UTF-8
            text = " ".join(sent.body.decode("utf-8", "replace").split())[:MAX_MESSAGE]
            return Reply(sent.status, text, request_id, not_json=True)

    def _why(self, sent: Sent, reply: Reply, rate: bool) -> str:
        said = self.scrub(message_from_body(reply.body) if isinstance(reply.body, dict) else str(reply.body or ""))
        return ("rate limited" if rate else f"HTTP {sent.status}") + (f": {said[:MAX_MESSAGE]}" if said else "")

    def _gave_up(self, what: str, why: str, attempt: int, status: int | None, rate: bool) -> ProviderUnavailable:
        kind = RateLimited if rate else ProviderUnavailable
        tail = " (later, not refused: the watchdog's reaper ends the pod with the account key)" if rate else ""
        return kind(
            f"{what}: {why} (after {attempt + 1} attempt{'s' if attempt else ''}, within {self.deadline_s:g} s){tail}",
            provider=self.provider,
            status=status,
            hint="the provider is not answering reliably; the reaper destroys the pod once its heartbeats stop",
        )

    def _error_for(self, reply: Reply, message: str) -> ProviderError:
        if reply.not_json and reply.status >= 300:
            message = self.scrub(str(reply.body))
        if reply.status >= 500:
            return ProviderUnavailable(
                f"HTTP {reply.status}: {message or 'server error'}",
                provider=self.provider,
                status=reply.status,
                request_id=reply.request_id,
            )
        if reply.status in (401, 403):
            return ProviderAuthError(
                message or "the key was refused",
                provider=self.provider,
                status=reply.status,
                request_id=reply.request_id,
                hint=f"{self.key_env}: the key the platform scopes to this pod was refused",
            )
        return ProviderError(
            message or "request failed", provider=self.provider, status=reply.status, request_id=reply.request_id
        )


def _retry_after(sent: Sent) -> float | None:
    raw = sent.headers.get("retry-after")
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None  # an HTTP-date: rare enough that the backoff is good enough
