"""One HTTP exchange behind a tiny interface: the stdlib's (http.client) for everything gpuc sends in
production, httpx's where a test hands in an httpx transport (MockTransport, an emulator in process).

Why: `import httpx` costs about four bare interpreter starts, and `gpuc ls` / `gpuc ledger` read both
providers and the watchdog on every run. A transport sends once and says how it failed; the callers keep
their retry rules (core/providers/http.py, client/watchdog/stdlib_get.py). The failure kinds exist for
the not-idempotent call (a create): only a kind that proves the request never reached the server may be
sent again.

    "connect", "connect_timeout"  the explicit connect failed (TCP, the proxy's CONNECT, the TLS handshake):
                                  nothing was sent
    "pool_timeout"                (httpx only) no connection was free: nothing was sent
    "not_sent"                    refused before a byte went out, and sending again will not change it:
                                  the server's TLS certificate is not trusted, a URL or proxy gpuc cannot use
    "timeout", "dropped",         the request was being sent or answered: it may have arrived
    "network", "other"

What it keeps of httpx's behaviour, since the user cannot tell which one ran:
- TLS verified against httpx's roots (core/tls.py, the process's one context), loaded only for https;
- no redirect followed (httpx's default): a 3xx is an answer, never a second request that would carry the
  bearer token to another host;
- proxies from the environment as httpx's trust_env: HTTP_PROXY / HTTPS_PROXY / ALL_PROXY, NO_PROXY
  (urllib's getproxies / proxy_bypass, which httpx reads too); https through a CONNECT tunnel, http with
  the whole URL to the proxy. An https:// or socks proxy is refused by name (httpx needs extras for socks).
"""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol
from urllib.parse import SplitResult, unquote, urlsplit

if TYPE_CHECKING:
    import http.client

    import httpx

FailureKind = Literal[
    "connect", "connect_timeout", "pool_timeout", "not_sent", "timeout", "dropped", "network", "other"
]
# httpx says who it is; some CDNs refuse a request that says nothing (UNCONFIRMED for both providers).
USER_AGENT = "gpuc"


class TransportFailure(Exception):
    """The exchange failed before an HTTP answer. `kind` says whether the request can have arrived; `what`
    names the failure in words safe to show (never a header, never a body)."""

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


class Transport(Protocol):
    def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, timeout_s: float
    ) -> RawReply: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Route:
    """Where the socket goes: the server itself, or a proxy (tunnelled for https, forwarded for http)."""

    host: str
    port: int | None
    proxy_auth: str | None = None  # the Proxy-Authorization value, from the proxy URL's user:password
    via_proxy: bool = False


def environment_proxy(target: SplitResult) -> SplitResult | None:
    """The proxy the environment names for `target`, as httpx's trust_env picks it, or None."""
    # On Linux urllib reads only *_proxy variables: without one, skip its import (~15 ms on every `gpuc ls`).
    if sys.platform not in ("darwin", "win32") and not any(k.lower().endswith("_proxy") for k in os.environ):
        return None
    import urllib.request

    proxies = urllib.request.getproxies()
    chosen = proxies.get(target.scheme) or proxies.get("all")
    if not chosen or urllib.request.proxy_bypass(target.netloc.rpartition("@")[2]):
        return None
    proxy = urlsplit(chosen if "://" in chosen else f"http://{chosen}")
    if proxy.scheme != "http" or not proxy.hostname:
        raise TransportFailure(
            "not_sent", f"the proxy {proxy.scheme}://{proxy.hostname or ''} from the environment is not "
            "supported: gpuc speaks to an http:// proxy only",
        )  # fmt: skip
    return proxy


def route_for(target: SplitResult) -> Route:
    proxy = environment_proxy(target)
    if proxy is None:
        return Route(target.hostname or "", target.port)
    auth = None
    if proxy.username is not None:
        pair = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
        auth = "Basic " + base64.b64encode(pair.encode()).decode()
    return Route(proxy.hostname or "", proxy.port or 80, auth, via_proxy=True)


class StdlibTransport:
    """http.client, one connection per exchange (the laptop makes a handful per command)."""

    def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, timeout_s: float
    ) -> RawReply:
        target = urlsplit(url)
        if target.scheme not in ("http", "https") or not target.hostname:
            raise TransportFailure("not_sent", f"not an http(s) URL: {target.scheme or '(no scheme)'}")
        try:
            target.port  # noqa: B018 - a port that is not a number raises here, before any socket
        except ValueError:
            raise TransportFailure("not_sent", "the URL's port is not a number") from None
        route = route_for(target)
        conn = _connection(target, route, timeout_s)
        try:
            _connect(conn)
            path = (target.path or "/") + (f"?{target.query}" if target.query else "")
            forwarded = route.via_proxy and target.scheme == "http"
            sent = {"User-Agent": USER_AGENT, **headers}
            if forwarded and route.proxy_auth:
                sent["Proxy-Authorization"] = route.proxy_auth
            return _exchange(conn, method, url if forwarded else path, sent, content)
        finally:
            conn.close()

    def close(self) -> None:
        return None


def _connection(target: SplitResult, route: Route, timeout_s: float) -> http.client.HTTPConnection:
    import http.client  # here, not at import: ~40 ms that `gpuc --help` and a fresh home never need

    if target.scheme == "http":
        return http.client.HTTPConnection(route.host, route.port, timeout=timeout_s)
    from gpuc.core.tls import tls_context

    conn = http.client.HTTPSConnection(route.host, route.port, timeout=timeout_s, context=tls_context())
    if route.via_proxy:
        tunnel_headers = {"Proxy-Authorization": route.proxy_auth} if route.proxy_auth else None
        conn.set_tunnel(target.hostname or "", target.port, headers=tunnel_headers)
    return conn


def _connect(conn: http.client.HTTPConnection) -> None:
    """TCP, the proxy's CONNECT and the TLS handshake: any failure here is before a byte of the request."""
    import ssl

    try:
        conn.connect()
    except ssl.SSLCertVerificationError as exc:
        raise TransportFailure(
            "not_sent", f"the server's TLS certificate is not trusted: {exc.verify_message or exc.reason}"
        ) from None
    except TimeoutError:
        raise TransportFailure("connect_timeout", "ConnectTimeout") from None
    except OSError as exc:  # refused, no route, no such host, the proxy refused the tunnel, a TLS handshake
        raise TransportFailure("connect", _said(exc)) from None


def _exchange(
    conn: http.client.HTTPConnection, method: str, target: str, headers: Mapping[str, str], content: bytes | None
) -> RawReply:
    """Send and read: from the first byte on, the server may have the request (ambiguous for a create)."""
    import http.client

    try:
        conn.request(method, target, body=content, headers=dict(headers))
        response = conn.getresponse()
        body = response.read()
    except TimeoutError:
        raise TransportFailure("timeout", "ReadTimeout") from None
    except http.client.HTTPException as exc:  # RemoteDisconnected, a bad status line, a short body
        raise TransportFailure("dropped", type(exc).__name__) from None
    except OSError as exc:  # reset, broken pipe
        raise TransportFailure("network", type(exc).__name__) from None
    found = {name.lower(): value for name, value in response.getheaders()}
    return RawReply(response.status, response.reason, found, body)


def _said(exc: OSError) -> str:
    """A connect failure in a few words: the proxy's refusal says what it answered, the rest by name."""
    text = str(exc)
    return text[:120] if text.startswith("Tunnel connection failed") else type(exc).__name__


class HttpxTransport:
    """httpx, for a caller that hands in an httpx transport (the tests' MockTransport)."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        import httpx

        self._client = httpx.Client(transport=transport, follow_redirects=False)

    def send(
        self, method: str, url: str, headers: Mapping[str, str], content: bytes | None, timeout_s: float
    ) -> RawReply:
        import httpx

        try:
            response = self._client.request(method, url, headers=headers, content=content, timeout=timeout_s)
        except httpx.TransportError as exc:
            raise TransportFailure(httpx_kind(exc), type(exc).__name__) from None
        return RawReply(response.status_code, response.reason_phrase, dict(response.headers), response.content)

    def close(self) -> None:
        self._client.close()


def httpx_kind(exc: httpx.TransportError) -> FailureKind:
    import httpx

    kinds: tuple[tuple[type[httpx.TransportError], FailureKind], ...] = (  # most specific first
        (httpx.UnsupportedProtocol, "not_sent"),
        (httpx.ConnectError, "connect"),
        (httpx.ConnectTimeout, "connect_timeout"),
        (httpx.PoolTimeout, "pool_timeout"),
        (httpx.TimeoutException, "timeout"),
        (httpx.RemoteProtocolError, "dropped"),
        (httpx.NetworkError, "network"),
    )
    return next((kind for cls, kind in kinds if isinstance(exc, cls)), "other")
