"""One GET over the standard library, for the watchdog's status (`gpuc ls`, `gpuc ledger`): httpx costs
about three bare interpreter starts to import. Only reads come this way; every request that acts
(register, keep, end, deadline, reap) stays on httpx.

What it keeps of httpx's behaviour, since the user cannot tell which one ran:
- proxies from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY: urllib's ProxyHandler, as httpx's
  trust_env);
- no redirect followed (httpx's default): a 3xx is an answer, never a second request that would carry the
  admin token to another host;
- TLS verified against the same roots as httpx (core/tls.py, the process's one context), loaded only
  for an https URL;
- the failure kinds: "connect" (retried, the request never reached the server), "timeout", anything else
  by name; `fail` turns each into the client's own FunctionsError.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuc.core.tls import tls_context

if TYPE_CHECKING:
    from email.message import Message
    from urllib.request import Request

    from gpuc.core.errors import FunctionsError

Failure = Callable[[str], "FunctionsError"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self, req: Request, fp: Any, code: int, msg: str, headers: Message, newurl: str
    ) -> Request | None:
        return None  # urllib then raises the 3xx as an HTTPError: read as the answer it is


def _opener(url: str) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if url.lower().startswith("https:"):
        handlers.append(urllib.request.HTTPSHandler(context=tls_context()))
    return urllib.request.build_opener(*handlers)  # with ProxyHandler(): the environment's proxies


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
    try:
        opener, request = _opener(url), urllib.request.Request(url, headers=headers, method="GET")
    except ValueError:  # not an http(s) URL
        raise fail("UnsupportedProtocol") from None
    for attempt in range(tries):
        try:
            with opener.open(request, timeout=timeout) as response:
                return response.status, response.reason, _decoded(response.read())
        except urllib.error.HTTPError as exc:  # an answer: 3xx (not followed), 4xx, 5xx
            with exc:
                return exc.code, str(exc.reason), _decoded(exc.read())
        except urllib.error.URLError as exc:  # no connection (refused, no such host, TLS) or its timeout
            if isinstance(exc.reason, TimeoutError):
                raise fail("timeout") from None
            if attempt + 1 == tries:
                raise fail("connect") from None
            sleep(backoff_s * (attempt + 1))
        except TimeoutError:  # connected, then no answer in time
            raise fail("timeout") from None
        except ValueError:  # urllib's word for a URL it cannot open
            raise fail("UnsupportedProtocol") from None
        except OSError as exc:  # a reset mid-answer, say: the server may have read the request
            raise fail(type(exc).__name__) from None
        except http.client.HTTPException as exc:  # a closed or garbled answer
            raise fail(type(exc).__name__) from None
    raise AssertionError("unreachable")
