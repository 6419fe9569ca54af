"""A pod's own end with the key the platform scopes to it, never an account key: RunPod's pod key (GraphQL
`podTerminate`, `podStop`, `pod(...)`) and Vast's instance key (DELETE, PUT state, GET of the one instance).

Standard library only (urllib): this runs on the pod, under whatever python3 >= 3.9 the image has, with
neither httpx nor pydantic. The requests are the ones the laptop's clients send for the same calls (the same
URLs, the same `Authorization: Bearer`, the same JSON bodies, no redirect followed, TLS verified, the
environment's proxies) and the answers are read by the same rules, shared from here where the laptop needs
them too (RunPod's GraphQL errors, Vast's "not found").

Each call has one deadline for the whole of it (SELF_DEADLINE_S: terminate, the read of itself, the stop, and
every retry between them). A 429, a 502/503/504 or a connection that failed is tried again inside it; a 429
(or a GraphQL error that says "rate limit": RunPod limits GraphQL in stages since 2026-09-17) is "later",
never a refusal: it never makes the pod stop itself instead, and past the deadline it raises RateLimited, the
ending reports destroy_failed and the watchdog's reaper, which holds the account key, ends the pod.
"""

from __future__ import annotations

import json
import random
import re
import urllib.error
import urllib.parse
import urllib.request
from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Optional, TypeVar

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import (
    ConfigError,
    ProviderAuthError,
    ProviderError,
    ProviderSchemaError,
    ProviderUnavailable,
)
from gpuc.core.providers.base import SelfDestroyer
from gpuc.core.providers.endpoints import (
    RUNPOD_GRAPHQL_ENV,
    RUNPOD_GRAPHQL_URL,
    VAST_URL,
    VAST_URL_ENV,
    vast_host,
)
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.redact import redact

USER_AGENT = "gpuc"  # as the laptop's requests say (core/transport.py)
SELF_DEADLINE_S = 120.0  # one self-destroy or self-stop, retries included
ATTEMPT_TIMEOUT_S = 20.0  # one exchange
RETRY_STATUSES = (429, 502, 503, 504)
RETRY_AFTER_CAP_S = 60.0
MAX_ANSWER_BYTES = 1 << 20  # an answer about one pod: anything larger is not one
MAX_MESSAGE = 300
MESSAGE_KEYS = ("detail", "msg", "message", "error", "title")
REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-correlation-id", "cf-ray")

# RunPod's GraphQL, for what REST v2 has no route (core/providers/runpod.py's docstring). Values pass as
# variables, never inlined.
SELF_READ_QUERY = "query Pod($podId: String!) { pod(input: {podId: $podId}) { id desiredStatus } }"
STOP_MUTATION = "mutation Stop($podId: String!) { podStop(input: {podId: $podId}) { id desiredStatus } }"
# podTerminate returns a scalar: no selection set.
TERMINATE_MUTATION = "mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }"
NOT_FOUND_TO_TERMINATE = "pod not found to terminate"
# GraphQL errors may come with HTTP 200 or a 4xx (UNCONFIRMED which): read the body for both.
GRAPHQL_ERROR_STATUSES = (400, 404, 409, 410, 422)
# How RunPod will say GraphQL is gone is not published: a 410, a 404 without GraphQL errors, or an error
# that says so in words.
GRAPHQL_GONE_STATUSES = (404, 410)
GRAPHQL_GONE_WORDS = re.compile(r"retired|deprecated|sunset|decommission|no longer (available|supported)", re.I)
GRAPHQL_RETIRED = "RunPod's GraphQL API answered that it is retired: upgrade gpuc"
GRAPHQL_AUTH_WORDS = re.compile(r"unauthori[sz]ed|not authori[sz]ed|forbidden", re.I)
# A limit said in a GraphQL error rather than a 429 (UNCONFIRMED that RunPod does; read as "later" if it does).
GRAPHQL_LIMIT_WORDS = re.compile(r"rate.?limit|too many requests|throttl", re.I)
RUNPOD_KEY_ENV = "RUNPOD_API_KEY"

# Vast: an instance id, and the error words that mean "no such instance".
VAST_INSTANCE_ID_RE = re.compile(r"^[0-9]{1,12}$")
VAST_NOT_FOUND_ERRORS = ("not_found", "no_such_instance")
VAST_RELEASED = "unloaded"  # cur_state of an instance whose contract is released: destroyed


# -- what the providers say, read the same way on the laptop and on the pod -----------------------------
def message_from_body(body: Any) -> str:
    """The provider's own words: GraphQL errors[0].message, RFC 9457 detail, Vast msg, or plain text."""
    if not isinstance(body, dict):
        return ""
    errors = body.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        return str(errors[0].get("message", ""))
    if isinstance(errors, list) and errors and isinstance(errors[0], str):
        return errors[0]
    for key in MESSAGE_KEYS:
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def vast_not_found(body: Any) -> bool:
    """Vast's "no such instance" body (it also answers some with HTTP 200 and success: false)."""
    if not isinstance(body, dict) or body.get("success") is not False:
        return False
    msg = str(body.get("msg") or body.get("message") or "").lower()
    return body.get("error") in VAST_NOT_FOUND_ERRORS or "not found" in msg or "no longer exists" in msg


class GraphQLError(ProviderError):
    """RunPod answered with `errors`: the request was understood and refused."""

    def __init__(self, messages: list[str], codes: list[str], *, status: int, request_id: str | None) -> None:
        super().__init__(
            messages[0] if messages else "GraphQL error without a message",
            provider="runpod",
            status=status if status != 200 else None,
            request_id=request_id,
        )
        self.messages = messages
        self.codes = codes

    @property
    def pod_not_found(self) -> bool:
        return (
            any(m.strip().lower() == NOT_FOUND_TO_TERMINATE for m in self.messages)
            or "POD_NOT_FOUND" in self.codes
        )


class GraphQLRetired(ProviderError):
    """RunPod's GraphQL is gone: no retry, no guess, one message that says what to do."""

    def __init__(self, said: str, *, status: int | None, request_id: str | None) -> None:
        super().__init__(
            GRAPHQL_RETIRED + (f" ({said})" if said else ""),
            provider="runpod",
            status=status,
            request_id=request_id,
            hint="gpuc uses GraphQL only for the RunPod balance and a pod's own self-destroy; a gpuc release "
            "reads them elsewhere (pip install -U gpuc). Pods, `ls`, `down` and the reaper use REST v2 and "
            "are not affected",
        )


class RateLimited(ProviderUnavailable):
    """The provider said "later" (a 429, or a limit in words) until the deadline: never a refusal."""


class GraphQLRateLimited(RateLimited):
    """RunPod's GraphQL said "too many requests" (rate-limited in stages since 2026-09-17): what was asked is
    not done NOW. Nothing was refused, and the key is fine: read it again later."""

    def __init__(self, said: str, *, request_id: str | None) -> None:
        super().__init__(
            "RunPod's GraphQL is rate limiting this account now: not read now" + (f" ({said})" if said else ""),
            provider="runpod",
            status=429,
            request_id=request_id,
            hint="try again in a minute or two: RunPod has rate-limited GraphQL in stages since 2026-09-17; "
            "your key is fine and nothing was refused",
        )


def graphql_error(
    status: int, body: Mapping[str, Any], request_id: str | None, scrub: Callable[[str], str]
) -> ProviderError:
    """What a GraphQL answer with `errors` means: retired, a refused key, a limit, or a refusal in its words."""
    items = [e for e in body["errors"] if isinstance(e, dict)] if isinstance(body["errors"], list) else []
    messages = [scrub(str(e.get("message", "")))[:MAX_MESSAGE] for e in items]
    codes = [str((e.get("extensions") or {}).get("code", "")) for e in items if isinstance(e.get("extensions"), dict)]
    shown = status if status != 200 else None
    if status == 410 or any(GRAPHQL_GONE_WORDS.search(m) for m in messages):
        return GraphQLRetired(messages[0] if messages else "", status=shown, request_id=request_id)
    if any(GRAPHQL_LIMIT_WORDS.search(m) for m in [*messages, *codes]):
        return GraphQLRateLimited(messages[0] if messages else "", request_id=request_id)
    if any(GRAPHQL_AUTH_WORDS.search(m) for m in messages):
        return ProviderAuthError(
            messages[0],
            provider="runpod",
            status=shown,
            request_id=request_id,
            hint=f"check {RUNPOD_KEY_ENV} (environment or .env): is it current, and allowed to do this?",
        )
    return GraphQLError(messages or [""], codes, status=status, request_id=request_id)


def graphql_data(
    status: int, body: Any, request_id: str | None, scrub: Callable[[str], str], *, not_json: bool = False
) -> dict[str, Any]:
    """A GraphQL answer (HTTP `status`, its JSON `body`) as its `data`, or the error it is."""
    has_errors = isinstance(body, dict) and bool(body.get("errors"))
    if not_json and status in GRAPHQL_GONE_STATUSES:  # a 404/410 page that is not JSON: the endpoint is gone
        raise GraphQLRetired("", status=status, request_id=request_id)
    if status == 410 or (status == 404 and not has_errors):
        said = message_from_body(body) if isinstance(body, dict) else ""
        raise GraphQLRetired(scrub(said)[:200], status=status, request_id=request_id)
    _require(isinstance(body, dict), "runpod", "GraphQL answer is not an object")
    if has_errors:
        raise graphql_error(status, body, request_id, scrub)
    _require(status < 300, "runpod", f"GraphQL HTTP {status} without errors")
    data = body.get("data")
    _require(isinstance(data, dict), "runpod", "GraphQL answer has no data")
    return dict(data)


def _require(condition: bool, provider: str, what: str) -> None:
    if not condition:
        raise ProviderSchemaError(
            f"unexpected answer: {what}",
            provider=provider,
            hint="the provider API may have changed; gpuc will not guess (report it with the request id)",
        )


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
            return ProviderUnavailable(f"HTTP {reply.status}: {message or 'server error'}", provider=self.provider,
                                       status=reply.status, request_id=reply.request_id)
        if reply.status in (401, 403):
            return ProviderAuthError(
                message or "the key was refused",
                provider=self.provider,
                status=reply.status,
                request_id=reply.request_id,
                hint=f"{self.key_env}: the key the platform scopes to this pod was refused",
            )
        return ProviderError(message or "request failed", provider=self.provider, status=reply.status,
                             request_id=reply.request_id)


def _retry_after(sent: Sent) -> float | None:
    raw = sent.headers.get("retry-after")
    try:
        return max(0.0, float(raw)) if raw else None
    except ValueError:
        return None  # an HTTP-date: rare enough that the backoff is good enough


# -- the decision, once for every provider -----------------------------------------------------------
class TerminateRefused(Exception):
    """The provider refused this pod's terminate with the pod's own key; `reason` in its words (redacted)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SelfWords:
    """A provider's words for what the decision says: "podTerminate was refused (...); stopped pod ..."."""

    provider: str  # "runpod"
    noun: str  # "pod"
    call: str  # "podTerminate": what was refused
    short: str  # "terminate": "terminate and stop both found nothing"
    done: str  # "terminated"
    not_found: str  # "answered 'pod not found to terminate'"
    disk: str  # "volume": what a stopped pod still bills for
    kept: str  # "its volume (/workspace) stays": what a stop keeps


@dataclass(frozen=True)
class PodKey:
    """Where the platform puts this pod's id and its pod-scoped key in the container's environment."""

    id_env: str  # "RUNPOD_POD_ID"
    key_env: str  # "RUNPOD_API_KEY"
    role: str  # "the pod-scoped key": what the key is called in an error
    hint: str  # how to get them to the agent when they are missing


D = TypeVar("D", bound="ScopedSelfDestroyer")


class ScopedSelfDestroyer(SelfDestroyer):
    """Destroy this pod with the key the platform scopes to it, never an account key: the decision, once.

    Two answers are not proof the pod is gone:
    - a refusal: stop it instead and say so;
    - "not found": a pod key may hear it because it is refused, not because the pod is gone. The pod reads
      itself: gone, and it is done; still there, or unreadable, and it stops itself and says so. Only a stop
      that also finds nothing, after a read that could not tell, means the pod is gone.
    A stopped pod still bills its disk: the answer is a StoppedInstead, which the ending turns into a
    notification, and the reaper destroys the pod with the account key (F9). Any other failure raises (a
    rate limit included: "later" is no refusal): the ending reports destroy_failed and the reaper's silence
    limit does the rest.

    A provider implements only its calls: terminate, stop, read_self, and which stop error means "not found".
    """

    words: ClassVar[SelfWords]
    key: ClassVar[PodKey]
    http: PodKeyHttp | None = None

    @classmethod
    def from_environ(
        cls: type[D],
        environ: Mapping[str, str],
        *,
        send: Send | None = None,
        clock: Clock | None = None,
        deadline_s: float = SELF_DEADLINE_S,
    ) -> D:
        """This pod's destroyer, from the env the provider injects into the container: never the account key,
        which must not live on a pod."""
        own_id, key = environ.get(cls.key.id_env, ""), environ.get(cls.key.key_env, "")
        if not own_id or not key:
            raise ConfigError(f"{cls.key.id_env} and {cls.key.key_env} are not both set", hint=cls.key.hint)
        http = PodKeyHttp(
            cls.words.provider, key, f"{cls.key.key_env} ({cls.key.role})", deadline_s=deadline_s, clock=clock,
            send=send,
        )
        return cls.with_client(own_id, http, environ)

    @classmethod
    @abstractmethod
    def with_client(cls: type[D], own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> D:
        """This pod's destroyer over `http`, the client that holds its pod key."""

    @property
    @abstractmethod
    def own_id(self) -> str: ...

    @abstractmethod
    def terminate(self) -> bool:
        """Terminate this pod: True when the provider did, False when it answered "not found". Raises
        TerminateRefused for a refusal; anything else raised is not an answer, and propagates."""

    @abstractmethod
    def stop(self) -> None:
        """Stop this pod with its own key (GPU billing ends, the disk stays)."""

    @abstractmethod
    def stop_found_nothing(self, exc: ProviderError) -> bool:
        """Whether the stop's error says the provider has no such pod."""

    @abstractmethod
    def read_self(self) -> bool | None:
        """Whether this pod still exists, read with its own key; None when the read itself fails."""

    def destroy_self(self) -> str:
        if self.http is not None:
            self.http.begin()
        try:
            terminated = self.terminate()
        except TerminateRefused as exc:
            return self._stop_refused(exc.reason)
        return f"{self.words.done} {self._me}" if terminated else self._after_not_found()

    def stop_self(self) -> str:
        """The kept window is over (F16): stop, never destroy; the disk with results/ stays."""
        if self.http is not None:
            self.http.begin()
        self.stop()
        return f"stopped {self._me}: GPU billing ended, {self.words.kept}"

    @property
    def _me(self) -> str:
        return f"{self.words.noun} {self.own_id}"

    @property
    def _http(self) -> PodKeyHttp:
        if self.http is None:
            raise ConfigError(f"{self.words.provider}: no client for the pod key", hint="from_environ makes one")
        return self.http

    def _stop_refused(self, refusal: str) -> str:
        w = self.words
        self.stop()
        return StoppedInstead(
            f"{w.call} was refused ({refusal}); stopped {self._me} instead: its {w.disk} still bills until the"
            " reaper destroys it"
        )

    def _after_not_found(self) -> str:
        w = self.words
        still = self.read_self()
        if still is False:
            return f"{self._me} was already gone"
        try:
            self.stop()
        except ProviderError as exc:
            if still is None and self.stop_found_nothing(exc):
                return f"{self._me} was already gone ({w.short} and stop both found nothing)"
            raise
        # The stop worked, so the pod was there: "not found" was a refusal in disguise.
        return StoppedInstead(
            f"{w.call} {w.not_found} but {self._me} is still there; stopped {self._me} instead: its {w.disk}"
            " still bills until the reaper destroys it"
        )


# -- RunPod: GraphQL with the pod key ---------------------------------------------------------------------
class RunPodSelfDestroyer(ScopedSelfDestroyer):
    """This pod's end with the pod-scoped key RunPod injects (RUNPOD_API_KEY), never the account key: the
    calls only, the decision is ScopedSelfDestroyer's.

    GraphQL: the reference does not say the pod key may use REST v2, and the one field report saw REST answer
    it 403 while GraphQL `pod(...)` and `podTerminate` served it. Whether it may podTerminate is UNCONFIRMED
    (self-stop is documented); it may hear "pod not found to terminate" while the pod lives on. When GraphQL
    is retired the self-destroy fails loudly (GraphQLRetired) and the watchdog's reaper, which holds the
    account key and uses v2, is the one that ends the pod."""

    words = SelfWords(
        "runpod", noun="pod", call="podTerminate", short="terminate", done="terminated",
        not_found=f"answered {NOT_FOUND_TO_TERMINATE!r}", disk="volume", kept="its volume (/workspace) stays",
    )  # fmt: skip
    key = PodKey("RUNPOD_POD_ID", RUNPOD_KEY_ENV, role="the pod-scoped key", hint="RunPod injects them into the"
                 " container's main process; pass them on to the agent's env")  # fmt: skip

    def __init__(self, pod_id: str, http: PodKeyHttp, *, graphql_url: str = RUNPOD_GRAPHQL_URL) -> None:
        self.pod_id = pod_id
        self.http = http
        self.graphql_url = graphql_url

    @classmethod
    def with_client(cls, own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> RunPodSelfDestroyer:
        return cls(own_id, http, graphql_url=environ.get(RUNPOD_GRAPHQL_ENV) or RUNPOD_GRAPHQL_URL)

    @property
    def own_id(self) -> str:
        return self.pod_id

    def graphql(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        http = self._http
        reply = http.request(
            "POST",
            self.graphql_url,
            json_body={"query": query, "variables": dict(variables)},
            accept=GRAPHQL_ERROR_STATUSES,
            limited=_graphql_limited,
            not_json_ok=GRAPHQL_GONE_STATUSES,
        )
        return graphql_data(reply.status, reply.body, reply.request_id, http.scrub, not_json=reply.not_json)

    def terminate(self) -> bool:
        try:
            self.graphql(TERMINATE_MUTATION, {"podId": self.pod_id})
        except GraphQLError as exc:
            if exc.pod_not_found:
                return False
            raise TerminateRefused(exc.message) from None
        except ProviderAuthError as exc:
            raise TerminateRefused(exc.message) from None
        return True

    def stop(self) -> None:
        """podStop with the pod key: the one self-control RunPod documents (R7). The volume (/workspace,
        where results/ is) stays; the container disk is wiped."""
        self.graphql(STOP_MUTATION, {"podId": self.pod_id})

    def stop_found_nothing(self, exc: ProviderError) -> bool:
        return isinstance(exc, GraphQLError) and "not found" in exc.message.lower()

    def read_self(self) -> bool | None:
        """Read this pod with its own key: True/False, or None when the read itself fails."""
        try:
            found = self.graphql(SELF_READ_QUERY, {"podId": self.pod_id}).get("pod")
        except ProviderError:
            return None
        if found is None:
            return False  # null for a deleted id (UNCONFIRMED; the reaper re-checks with the account key)
        if not (isinstance(found, dict) and isinstance(found.get("id"), str)):
            raise ProviderSchemaError("unexpected pod: id: a string is expected", provider="runpod")
        status = found.get("desiredStatus")
        if status is not None and not isinstance(status, str):
            raise ProviderSchemaError("unexpected pod: desiredStatus: a string is expected", provider="runpod")
        return status != "TERMINATED"


def _graphql_limited(reply: Reply) -> bool:
    if not isinstance(reply.body, dict) or not isinstance(reply.body.get("errors"), list):
        return False
    for error in reply.body["errors"]:
        if not isinstance(error, dict):
            continue
        code = str((error.get("extensions") or {}).get("code", "")) if isinstance(error.get("extensions"), dict) else ""
        if GRAPHQL_LIMIT_WORDS.search(str(error.get("message", ""))) or GRAPHQL_LIMIT_WORDS.search(code):
            return True
    return False


# -- Vast: the instance key ---------------------------------------------------------------------------------
class VastSelfDestroyer(ScopedSelfDestroyer):
    """This instance's end with CONTAINER_API_KEY, the key Vast scopes to it (documented to start, stop or
    destroy only this instance): the calls only, the decision is ScopedSelfDestroyer's."""

    words = SelfWords(
        "vast", noun="instance", call="destroy", short="destroy", done="destroyed",
        not_found="answered not found", disk="disk", kept="its disk stays",
    )  # fmt: skip
    key = PodKey("CONTAINER_ID", "CONTAINER_API_KEY", role="the instance key", hint="Vast injects them into the"
                 " container; ssh sessions see them only once exported")  # fmt: skip

    def __init__(self, instance_id: str, http: PodKeyHttp, *, url: str = VAST_URL) -> None:
        if not VAST_INSTANCE_ID_RE.match(instance_id):
            raise ConfigError(f"CONTAINER_ID {instance_id[:20]!r} is not a Vast instance id", hint=self.key.hint)
        self.instance_id = instance_id
        self.http = http
        self.url = f"{vast_host(url)}/api/v0/instances/{instance_id}/"

    @classmethod
    def with_client(cls, own_id: str, http: PodKeyHttp, environ: Mapping[str, str]) -> VastSelfDestroyer:
        return cls(own_id, http, url=environ.get(VAST_URL_ENV) or VAST_URL)

    @property
    def own_id(self) -> str:
        return self.instance_id

    def terminate(self) -> bool:
        try:
            reply = self._http.request("DELETE", self.url, json_body={}, accept=(404,))
        except (ProviderSchemaError, RateLimited):
            raise  # an answer gpuc cannot read, or "later": no refusal to act on
        except ProviderError as exc:
            raise TerminateRefused(exc.message) from None
        if reply.status == 404:
            _require(vast_not_found(reply.body), "vast", "404 without Vast's not-found body")
            return False
        if isinstance(reply.body, dict) and reply.body.get("success") is True:
            return True
        if vast_not_found(reply.body):
            return False
        # success:false with HTTP 200 is a failure, never a destroy (vast-cli's destroy_instance bug)
        raise TerminateRefused(self._said(reply) or "success: false")

    def stop(self) -> None:
        """PUT state stopped with the instance key (documented to start, stop or destroy only this instance,
        V7). The instance disk stays; exactly what a stop keeps of it is UNCONFIRMED (README)."""
        reply = self._http.request("PUT", self.url, json_body={"state": "stopped"})
        if not (isinstance(reply.body, dict) and reply.body.get("success") is True):
            said = self._said(reply) or "success: false"
            raise ProviderError(f"stopped of instance {self.instance_id} refused: {said}", provider="vast",
                                status=reply.status, request_id=reply.request_id)

    def _said(self, reply: Reply) -> str:
        body = reply.body if isinstance(reply.body, dict) else {}
        return self._http.scrub(str(body.get("msg") or body.get("error") or ""))[:MAX_MESSAGE]

    def stop_found_nothing(self, exc: ProviderError) -> bool:
        return exc.status == 404

    def read_self(self) -> bool | None:
        """Read this instance with its own key: True/False, or None when the read itself fails."""
        try:
            reply = self._http.request("GET", self.url, params={"owner": "me"})
        except ProviderError:
            return None
        body = reply.body
        if not (isinstance(body, dict) and "instances" in body):
            return None
        if body["instances"] is None:
            return False  # Vast's positive "not found or no longer exists"
        if not isinstance(body["instances"], dict):
            return None
        return body["instances"].get("cur_state") != VAST_RELEASED

