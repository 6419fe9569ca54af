"""The pod's HTTP client for the watchdog (heartbeats, events, grants): the standard library's, one POST with
a timeout, an unreachable watchdog a TransportError.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class HttpResult:
    status: int
    body: bytes
    date: str | None = None  # the HTTP Date header: the server's clock, when the body does not say


class TransportError(Exception):
    """The functions could not be reached (DNS, refused, timeout, TLS)."""


class Transport(Protocol):
    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult: ...


class UrllibTransport:
    """The standard library's HTTP client: ~5 MB less resident than httpx on a pod that runs for hours.
    `answer_max`: what is read of an answer (a grant's presigned URLs run longer than a heartbeat's)."""

    def __init__(self, answer_max: int = 64 * 1024) -> None:
        self.answer_max = answer_max

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        # Lazy: the job wrapper holds this module for the whole job but posts only at its end (~3 MB).
        import urllib.error
        import urllib.request

        request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return HttpResult(int(response.status), response.read(self.answer_max), response.headers.get("Date"))
        except urllib.error.HTTPError as exc:
            with exc:
                return HttpResult(int(exc.code), exc.read(self.answer_max), exc.headers.get("Date"))
        except (OSError, ValueError) as exc:  # URLError, timeouts and resets are OSErrors
            raise TransportError(_reason(exc)) from None


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return f"{type(exc).__name__}: {reason if reason is not None else exc}"[:200]
