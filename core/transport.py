"""gpuc's one HTTP client: httpx, built once per process and shared by the providers, the watchdog client
and the notifications (the pod's agent stays on the standard library). One pool, so several requests to one
host reuse a kept-open connection, and several threads may send at once (`gpuc ls` reads together).

`exchange` sends once under an OVERALL deadline and a size cap, and says how it failed. A per-read timeout
is not a deadline: a server sending a byte every few seconds held one list for 40 s against a 2 s timeout,
and a 300 MB answer was read whole. So every wait (pool, connect, write, each read) is given only what is
left of the deadline, and the body is read in chunks, each checked against the deadline and the cap. Under
httpx, every socket the client opens is wrapped (`_bound`) so each connect, read and write waits at most
what is left of the current exchange's deadline: a server trickling its headers a line at a time cannot
hold a call past it either.

The failure kinds exist for the not-idempotent call (a create): only a kind that proves the request never
reached the server may be sent again.

    "connect", "connect_timeout"  the connection was never made (TCP, the proxy's CONNECT, the TLS
                                  handshake): nothing was sent
    "pool_timeout"                no connection was free: nothing was sent
    "not_sent"                    refused before a byte went out, and sending again will not change it:
                                  the server's TLS certificate is not trusted, a URL or proxy gpuc cannot use
    "timeout", "deadline",        the request was being sent or answered: it may have arrived
    "dropped", "network", "too_large", "other"

httpx's defaults kept on purpose: TLS verified (SSL_CERT_FILE / SSL_CERT_DIR, else certifi); no redirect
followed (a 3xx is an answer, never a second request carrying the bearer token to another host); the
environment's proxies and NO_PROXY (trust_env).
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpcore
import httpx

FailureKind = Literal[
    "connect",
    "connect_timeout",
    "pool_timeout",
    "not_sent",
    "timeout",
    "deadline",
    "dropped",
    "network",
    "too_large",
    "other",
]
# Some CDNs refuse a request that says nothing of who sends it (UNCONFIRMED for both providers).
USER_AGENT = "gpuc"
# The largest answer gpuc reads. Vast's full offer search is the biggest document (a few MB); 300 MB was read
# whole before this cap (+605 MB of memory on a laptop, more than a 512 MB Lambda has).
MAX_ANSWER_BYTES = 32 * 1024 * 1024


class TransportFailure(Exception):
    """The exchange failed before a whole HTTP answer. `kind` says whether the request can have arrived;
    `what` names the failure in words safe to show (never a header, never a body)."""

    def __init__(self, kind: FailureKind, what: str) -> None:
        super().__init__(what)
        self.kind: FailureKind = kind
        self.what = what


@dataclass(frozen=True)
class RawReply:
    """One HTTP answer as it came: status, reason, headers (names lowercased) and body bytes."""

    status: int
    reason: str
    headers: Mapping[str, str]  # names lowercased
    content: bytes


_lock = threading.Lock()
_shared: httpx.Client | None = None


def shared_client() -> httpx.Client:
    """The process's client, built on first use (once per laptop command, once per Lambda container)."""
    global _shared
    with _lock:
        if _shared is None or _shared.is_closed:
            _shared = new_client()
        return _shared


def reset_shared_client() -> None:
    """Close the process's client: the next request builds one that reads the environment again (its
    proxies, SSL_CERT_FILE). For tests that change them, and for a Ctx given new settings."""
    global _shared
    with _lock:
        if _shared is not None:
            _shared.close()
        _shared = None


def new_client(transport: httpx.BaseTransport | None = None) -> httpx.Client:
    """A client with gpuc's rules; `transport`: a test's in-process server (httpx.MockTransport)."""
    # Enough kept-open connections for every reader of `gpuc ls` at once on each host.
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=16)
    try:
        client = httpx.Client(
            transport=transport, follow_redirects=False, limits=limits, headers={"User-Agent": USER_AGENT}
        )
    except (ImportError, ValueError) as exc:  # a proxy in the environment httpx cannot use (socks: an extra)
        raise TransportFailure(
            "not_sent", f"a proxy from the environment cannot be used ({type(exc).__name__}): gpuc speaks to "
            "http:// and https:// proxies",
        ) from None  # fmt: skip
    for sender in [client._transport, *client._mounts.values()]:  # the default, and one per proxy
        _bound(sender)
    return client


_current = threading.local()  # this thread's exchange deadline (time.monotonic()), while it runs


def _left(timeout: float | None, late: type[httpcore.TimeoutException] = httpcore.ReadTimeout) -> float | None:
    until: float | None = getattr(_current, "until", None)
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:  # `late` says how far it went: a connect that times out sent nothing
        raise late("the exchange's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _BoundStream(httpcore.NetworkStream):
    """A socket whose every wait is cut to what is left of this thread's exchange deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _BoundStream(
            self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        )

    def get_extra_info(self, info: str) -> object:
        return self._inner.get_extra_info(info)


class _BoundBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _BoundStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        return _BoundStream(
            self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout), socket_options)
        )

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _bound(sender: httpx.BaseTransport | None) -> None:
    """httpx builds its connection pools itself (one per proxy from the environment): their sockets are
    wrapped here. A transport of another kind (a test's in-process server) has no socket to wrap."""
    pool = getattr(sender, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is not None and not isinstance(backend, _BoundBackend):
        pool._network_backend = _BoundBackend(backend)  # type: ignore[union-attr]


class Deadline(dict[str, float | None]):
    """httpx's timeout extension whose every wait is what is left of one deadline (time.monotonic()).
    httpcore asks it before each wait (the pool, the connect, each write and read phase)."""

    def __init__(self, until: float) -> None:
        super().__init__(connect=None, read=None, write=None, pool=None)
        self.until = until

    def left(self) -> float:
        return self.until - time.monotonic()

    def get(self, key: str, default: object = None) -> float | None:
        return max(0.001, self.left())


def exchange(
    client: httpx.Client,
    method: str,
    url: str,
    headers: Mapping[str, str],
    content: bytes | None,
    *,
    until: float,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> RawReply:
    """Send once; the whole exchange ends by `until` (time.monotonic()) and reads at most `max_bytes`."""
    deadline = Deadline(until)
    if deadline.left() <= 0:
        raise TransportFailure("pool_timeout", "no time left to send")  # nothing went out
    try:
        request = client.build_request(method, url, headers=headers, content=content, extensions={"timeout": deadline})
    except (httpx.HTTPError, ValueError) as exc:  # a URL or header value gpuc cannot send (never echoed)
        raise TransportFailure("not_sent", type(exc).__name__) from None
    _current.until = until
    try:
        with _failures(deadline):
            response = client.send(request, stream=True)
            try:
                body = _read_capped(response, deadline, max_bytes)
            finally:
                response.close()
    finally:
        _current.until = None
    found = {name.lower(): value for name, value in response.headers.items()}
    return RawReply(response.status_code, response.reason_phrase, found, body)


def _read_capped(response: httpx.Response, deadline: Deadline, max_bytes: int) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise TransportFailure("too_large", f"the answer is larger than {max_bytes // 1_000_000} MB")
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():  # decoded: a small gzip of a huge answer is capped too
        size += len(chunk)
        if size > max_bytes:
            raise TransportFailure("too_large", f"the answer is larger than {max_bytes // 1_000_000} MB")
        if deadline.left() <= 0:
            raise TransportFailure("deadline", "no whole answer within the deadline")
        chunks.append(chunk)
    return b"".join(chunks)


@contextmanager
def _failures(deadline: Deadline) -> Iterator[None]:
    """httpx's errors as failure kinds: whether the request can have reached the server."""
    try:
        yield
    except httpx.TransportError as exc:
        kind = failure_kind(exc)
        if kind in ("timeout", "pool_timeout", "connect_timeout") and deadline.left() <= 0.01:
            kind = "deadline" if kind == "timeout" else kind  # the deadline, not a quiet socket
        raise TransportFailure(kind, _said(exc, kind)) from None


def failure_kind(exc: httpx.TransportError) -> FailureKind:
    if isinstance(exc, httpx.ConnectError) and _untrusted(exc):
        return "not_sent"  # the handshake refused the server: nothing went out, nor will it
    kinds: tuple[tuple[type[httpx.TransportError], FailureKind], ...] = (  # most specific first
        (httpx.UnsupportedProtocol, "not_sent"),
        (httpx.LocalProtocolError, "not_sent"),  # refused by our side before sending (a bad header value)
        (httpx.ProxyError, "connect"),  # the proxy refused the tunnel: the server never saw a byte
        (httpx.ConnectError, "connect"),
        (httpx.ConnectTimeout, "connect_timeout"),
        (httpx.PoolTimeout, "pool_timeout"),
        (httpx.TimeoutException, "timeout"),
        (httpx.RemoteProtocolError, "dropped"),
        (httpx.NetworkError, "network"),
    )
    return next((kind for cls, kind in kinds if isinstance(exc, cls)), "other")


def _untrusted(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(6):  # httpx's error wraps httpcore's, which wraps the ssl module's
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _said(exc: httpx.TransportError, kind: FailureKind) -> str:
    """A failure in a few words, never a URL's query or a header."""
    if kind == "not_sent" and isinstance(exc, httpx.ConnectError):
        return "the server's TLS certificate is not trusted"
    if kind == "deadline":
        return "no whole answer within the deadline"
    if isinstance(exc, httpx.ProxyError):
        return f"the proxy refused: {str(exc)[:120]}"
    return type(exc).__name__
