"""One GET for the watchdog's status (`gpuc ls`, `gpuc ledger`) over core/transport.py's stdlib exchange:
httpx costs about four bare interpreter starts to import, pydantic more. Only reads come this way; every
request that acts (register, keep, end, deadline, reap) stays on httpx.

The transport keeps httpx's behaviour (the environment's proxies and NO_PROXY, no redirect followed so the
admin token never reaches another host, TLS against httpx's roots); this module keeps the client's retry
rule: only a connection that was never made is tried again. `fail(kind)` turns each failure into the
client's own FunctionsError: "connect", "timeout", or what went wrong in a few words.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuc.core.transport import StdlibTransport, TransportFailure

if TYPE_CHECKING:
    from gpuc.core.errors import FunctionsError

Failure = Callable[[str], "FunctionsError"]


def _decoded(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # not JSON (or not text): the caller's "answered something unexpected"
        return None


def get_json(
    url: str,
    headers: dict[str, str],
    timeout: float,
    *,
    fail: Failure,
    tries: int,
    backoff_s: float,
    sleep: Callable[[float], None],
) -> tuple[int, str, Any]:
    """(status code, reason, the body's JSON or None). Raises `fail(kind)` when no answer came; a failed
    connection is tried `tries` times, `backoff_s` x the try apart."""
    transport = StdlibTransport()
    for attempt in range(tries):
        try:
            reply = transport.send("GET", url, headers, None, timeout)
        except TransportFailure as exc:
            if exc.kind in ("timeout", "connect_timeout"):
                raise fail("timeout") from None
            if exc.kind != "connect":  # dropped mid-answer, a certificate not trusted, a URL it cannot use
                raise fail(exc.what) from None
            if attempt + 1 == tries:
                raise fail("connect") from None
            sleep(backoff_s * (attempt + 1))
            continue
        return reply.status, reply.reason, _decoded(reply.content)
    raise AssertionError("unreachable")
