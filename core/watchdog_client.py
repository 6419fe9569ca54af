"""The laptop's admin client for the watchdog (`gpuc watchdog serve`, or the AWS Function URL).

Every failure is a WatchdogError that says how to fix it; the admin token never appears in one.
Only connection failures are retried (the request never reached the server, so a retry cannot act
twice), and every call, its retries included, ends within GPUC_WATCHDOG_TIMEOUT_S.

It sends with the process's one httpx client (core/transport.py: the overall deadline and the size cap),
or, in a test, over an in-process server (`transport`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from gpuc.core.errors import WatchdogError
from gpuc.core.redact import redact
from gpuc.core.settings import Settings

# core.api (pydantic, ~0.2 s) is imported inside each call, not here: `gpuc ls` on a fresh install builds this
# client, stops at the missing admin token, and must not pay for pydantic (tests/client/test_ls_honest.py).
if TYPE_CHECKING:
    import httpx
    from pydantic import BaseModel

    from gpuc.core import api
    from gpuc.core.transport import RawReply

M = TypeVar("M", bound="BaseModel")
CONNECT_TRIES = 3
CONNECT_BACKOFF_S = 0.5
_HINTS = {
    401: "the admin token does not match the server's: `gpuc watchdog serve` saves it in "
    "$GPUC_HOME/config.json; or set GPUC_ADMIN_TOKEN to the deployed one",
    404: "check the pod id with `gpuc ls`",
    409: "the pod has already ended; start a new one with `gpuc up`",
    413: "the request is too large",
}


class WatchdogClient:
    def __init__(
        self,
        settings: Settings,
        transport: httpx.BaseTransport | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.base_url = settings.watchdog_url.rstrip("/")
        self._sleep = sleep
        self._transport = transport
        self._own: httpx.Client | None = None

    def register(self, request: api.RegisterRequest) -> api.RegisterAnswer:
        from gpuc.core import api

        return self._call("POST", "/v1/pods", api.RegisterAnswer, request)

    def keep(self, pod_id: str, until: float) -> api.Ack:
        from gpuc.core import api

        return self._call("POST", f"/v1/pods/{quote(pod_id, safe='')}/keep", api.Ack, api.KeepRequest(until=until))

    def deadline(self, pod_id: str, request: api.DeadlineRequest) -> api.DeadlineAnswer:
        from gpuc.core import api

        return self._call("POST", f"/v1/pods/{quote(pod_id, safe='')}/deadline", api.DeadlineAnswer, request)

    def end(self, pod_id: str, request: api.EndRequest) -> api.Ack:
        from gpuc.core import api

        return self._call("POST", f"/v1/pods/{quote(pod_id, safe='')}/end", api.Ack, request)

    def notify(self, title: str, message: str) -> api.Ack:
        from gpuc.core import api

        return self._call("POST", "/v1/notify", api.Ack, api.NotifyRequest(title=title, message=message))

    def status(self) -> api.StatusResponse:
        """The watchdog's status document, declared once (core/api.py) and read here alone, by every command
        (`gpuc ls`, `gpuc ledger`, `gpuc watchdog status`)."""
        self._token()  # first: no token, no httpx and no models (`gpuc ls` on a fresh install)
        from gpuc.core import api

        return self._call("GET", "/v1/status", api.StatusResponse)

    def run(self, run_id: str) -> api.RunRecovery | None:
        """A recovering run as the watchdog keeps it (`up --recover`); None when it holds no such run (a run
        rented without --recover, or one whose watchdog forgot it): a 404, never an error."""
        from gpuc.core import api

        try:
            return self._call("GET", f"/v1/runs/{quote(run_id, safe='')}", api.RunRecovery)
        except WatchdogError as exc:
            if exc.status == 404:
                return None
            raise

    def stop_run(self, run_id: str) -> api.Ack:
        """Stop recovering this run: no further attempt is rented (the pod now running is left to the caller)."""
        from gpuc.core import api

        return self._call("POST", f"/v1/runs/{quote(run_id, safe='')}/stop", api.Ack)

    def reap(self, dry_run: bool = False) -> api.ReapReport:
        from gpuc.core import api

        return self._call("POST", "/v1/reap", api.ReapReport, api.ReapRequest(dry_run=dry_run))

    def resume(self) -> api.ResumeAnswer:
        from gpuc.core import api

        return self._call("POST", "/v1/resume", api.ResumeAnswer)

    def close(self) -> None:
        """Close a test's in-process connection; the shared client stays the process's."""
        if self._own is not None:
            self._own.close()
            self._own = None

    def _http(self) -> httpx.Client:
        # Lazy: `gpuc ls` on a fresh install (no admin token) never loads httpx for the watchdog.
        from gpuc.core.transport import new_client, shared_client

        if self._transport is None:
            return shared_client()
        if self._own is None:
            self._own = new_client(self._transport)
        return self._own

    def __enter__(self) -> WatchdogClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _token(self) -> str:
        token = self.settings.admin_token
        if token is None or not token.get_secret_value():
            raise WatchdogError(
                "no admin token for the watchdog",
                hint="start it once with `gpuc watchdog serve` (it saves one in $GPUC_HOME/config.json), "
                "or set GPUC_ADMIN_TOKEN",
            )
        return token.get_secret_value()

    def _call(self, method: str, path: str, answer: type[M], body: BaseModel | None = None) -> M:
        headers = {"Authorization": f"Bearer {self._token()}"}
        content = body.model_dump_json().encode() if body is not None else None
        if content is not None:
            headers["Content-Type"] = "application/json"
        response = self._send(method, self.base_url + path, headers, content)
        return self._read(response, answer)

    def _send(self, method: str, url: str, headers: dict[str, str], content: bytes | None) -> RawReply:
        from gpuc.core.transport import TransportFailure, exchange

        until = time.monotonic() + self.settings.watchdog_timeout_s  # the call's one deadline, retries in
        for attempt in range(CONNECT_TRIES):
            try:
                return exchange(self._http(), method, url, headers, content, until=until)
            except TransportFailure as exc:
                pause = CONNECT_BACKOFF_S * (attempt + 1)
                if exc.kind in ("timeout", "deadline", "connect_timeout", "pool_timeout"):
                    raise self._failure("timeout") from None
                if exc.kind != "connect":  # cut mid-answer, a certificate not trusted, a URL it cannot use
                    raise self._failure(exc.what) from None
                if attempt + 1 == CONNECT_TRIES or pause >= until - time.monotonic():
                    raise self._failure("connect") from None
                self._sleep(pause)
        raise AssertionError("unreachable")

    def _failure(self, kind: str) -> WatchdogError:
        """The request did not get an answer: "connect" (never reached the server, after the retries),
        "timeout", or what else went wrong in a few words."""
        if kind == "connect":
            return WatchdogError(
                f"cannot reach the watchdog at {self.base_url}",
                hint="start it with `gpuc watchdog serve`, or set GPUC_WATCHDOG_URL to the deployed URL",
            )
        if kind == "timeout":
            return WatchdogError(
                f"the watchdog at {self.base_url} did not answer within {self.settings.watchdog_timeout_s:g} s",
                hint="check that it is running (`gpuc watchdog serve`); raise GPUC_WATCHDOG_TIMEOUT_S on a slow link",
            )
        return WatchdogError(
            f"talking to the watchdog at {self.base_url} failed: {kind}", hint="check GPUC_WATCHDOG_URL"
        )

    def _read(self, response: RawReply, answer: type[M]) -> M:
        from pydantic import ValidationError

        data = _json(response)
        self._refused(response.status, response.reason, data)
        try:
            return answer.model_validate(data)
        except ValidationError:
            raise self._unexpected(response.status) from None

    def _refused(self, code: int, reason: str, data: Any) -> None:
        if code < 400:
            return
        error = str(data.get("error", "")) if isinstance(data, dict) else ""
        message = redact(error or reason, self.settings.secret_values())[:300]
        raise WatchdogError(
            f"the watchdog refused: {message} (HTTP {code})",
            hint=_HINTS.get(code, "see the watchdog's log (`gpuc watchdog serve` prints it)"),
            status=code,
        )

    def _unexpected(self, code: int) -> WatchdogError:
        return WatchdogError(
            f"the watchdog at {self.base_url} answered something unexpected",
            hint="is GPUC_WATCHDOG_URL the gpuc watchdog, and the same gpuc version?",
            status=code,
        )


def _json(response: RawReply) -> Any:
    try:
        return json.loads(response.content)
    except ValueError:  # not JSON (or not text): the caller's "answered something unexpected"
        return None
