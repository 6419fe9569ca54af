"""The HTTP choke point: the retry table, backoff, Retry-After, and the mapping onto gpuc's errors."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fakes.providers import RUNPOD_KEY

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderAuthError, ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.providers.http import AmbiguousOutcome, HttpClient, exponential_backoff

URL = "https://api.example.test/v2/pods"


class Script:
    """A MockTransport handler that plays a list of answers (or exceptions) and counts calls."""

    def __init__(self, *steps: httpx.Response | type[httpx.TransportError]) -> None:
        self.steps = list(steps)
        self.calls = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if isinstance(step, type):
            raise step("scripted", request=request)
        return step


def client(script: Callable[[httpx.Request], httpx.Response], **options: object) -> tuple[HttpClient, list[int]]:
    retries: list[int] = []

    def backoff(retry: int) -> float:
        retries.append(retry)
        return 0.0

    http = HttpClient(
        provider="runpod",
        api_key=RUNPOD_KEY,
        key_env="RUNPOD_API_KEY",
        backoff=backoff,
        clock=options.pop("clock", FakeClock()),  # type: ignore[arg-type]
        timeout_s=options.pop("timeout_s", 20.0),  # type: ignore[arg-type]
        transport=httpx.MockTransport(script),
    )
    return http, retries


def ok() -> httpx.Response:
    return httpx.Response(200, json={"pods": []})


def test_it_retries_a_429_with_backoff_until_it_succeeds() -> None:
    script = Script(httpx.Response(429), httpx.Response(429), httpx.Response(429), ok())
    http, retries = client(script)
    assert http.request("GET", URL).body == {"pods": []}
    assert script.calls == 4
    assert retries == [0, 1, 2]


def test_a_429_storm_ends_in_a_clear_provider_unavailable() -> None:
    script = Script(httpx.Response(429, text="API requests too frequent endpoint threshold=4.5"))
    http, retries = client(script)
    with pytest.raises(ProviderUnavailable) as caught:
        http.request("GET", URL)
    assert script.calls == 5 and retries == [0, 1, 2, 3]
    assert "rate limited: API requests too frequent" in caught.value.message
    assert "after 5 attempts" in caught.value.message
    assert caught.value.status == 429 and caught.value.hint


def test_it_waits_at_least_what_retry_after_asks_and_at_most_a_minute() -> None:
    clock = FakeClock()
    start = clock.now()
    script = Script(
        httpx.Response(429, headers={"Retry-After": "7"}),
        httpx.Response(429, headers={"Retry-After": "3600"}),
        ok(),
    )
    http, _ = client(script, clock=clock, timeout_s=120.0)
    http.request("GET", URL)
    assert clock.now() - start == 7 + 60


def test_a_wait_that_would_not_fit_the_calls_budget_is_not_taken() -> None:
    """One budget per call: a Retry-After past the call's deadline ends the call now, not after it."""
    clock = FakeClock()
    script = Script(httpx.Response(429, headers={"Retry-After": "30"}), ok())
    http, _ = client(script, clock=clock, timeout_s=20.0)
    with pytest.raises(ProviderUnavailable) as caught:
        http.request("GET", URL)
    assert script.calls == 1 and clock.now() == FakeClock().now() and "within 20 s" in caught.value.message


Step = httpx.Response | type[httpx.TransportError]


@pytest.mark.parametrize(
    ("step", "idempotent", "calls", "error"),
    [
        (httpx.Response(502), True, 5, ProviderUnavailable),
        (httpx.Response(503), True, 5, ProviderUnavailable),
        (httpx.Response(504), True, 5, ProviderUnavailable),
        (httpx.Response(500), True, 1, ProviderUnavailable),
        (httpx.ReadTimeout, True, 5, ProviderUnavailable),
        (httpx.ConnectError, True, 5, ProviderUnavailable),
        (httpx.RemoteProtocolError, True, 5, ProviderUnavailable),
        # a create: whatever may have been applied is never sent again from here
        (httpx.Response(502), False, 1, AmbiguousOutcome),
        (httpx.Response(500), False, 1, AmbiguousOutcome),
        (httpx.ReadTimeout, False, 1, AmbiguousOutcome),
        (httpx.RemoteProtocolError, False, 1, AmbiguousOutcome),
        (httpx.ReadError, False, 1, AmbiguousOutcome),  # a reset mid-exchange: it may follow the commit
        (httpx.WriteError, False, 1, AmbiguousOutcome),
        # refused before anything happened: safe to send again
        (httpx.Response(429), False, 5, ProviderUnavailable),
        (httpx.ConnectError, False, 5, ProviderUnavailable),
        (httpx.ConnectTimeout, False, 5, ProviderUnavailable),
    ],
)
def test_the_retry_table(step: Step, idempotent: bool, calls: int, error: type[ProviderError]) -> None:
    script = Script(step)
    http, _ = client(script)
    with pytest.raises(error) as caught:
        http.request("POST", URL, json={}, idempotent=idempotent)
    assert script.calls == calls
    assert type(caught.value) is error


def test_an_ambiguous_failure_that_clears_is_retried_for_idempotent_calls() -> None:
    script = Script(httpx.ReadTimeout, httpx.Response(503), ok())
    http, retries = client(script)
    assert http.request("GET", URL).status == 200 and retries == [0, 1]


def test_a_refused_key_is_an_auth_error_with_the_providers_words_and_request_id() -> None:
    script = Script(httpx.Response(401, json={"detail": "missing bearer token"}, headers={"x-request-id": "req-123"}))
    http, _ = client(script)
    with pytest.raises(ProviderAuthError) as caught:
        http.request("GET", URL)
    assert script.calls == 1
    assert str(caught.value).startswith("runpod: missing bearer token [HTTP 401, request req-123]")
    assert "RUNPOD_API_KEY" in (caught.value.hint or "")


def test_other_4xx_carry_the_providers_message_without_retry() -> None:
    script = Script(httpx.Response(422, json={"title": "x", "status": 422, "detail": "Request validation failed."}))
    http, _ = client(script)
    with pytest.raises(ProviderError, match="Request validation failed") as caught:
        http.request("GET", URL)
    assert type(caught.value) is ProviderError and script.calls == 1


def test_accepted_statuses_come_back_to_the_caller() -> None:
    http, _ = client(Script(httpx.Response(404, json={"status": 404, "title": "Not Found"})))
    reply = http.request("GET", URL, accept=(404,))
    assert (reply.status, reply.body["title"]) == (404, "Not Found")


def test_a_success_that_is_not_json_is_a_schema_error() -> None:
    http, _ = client(Script(httpx.Response(200, text="<html>maintenance</html>")))
    with pytest.raises(ProviderSchemaError, match="not JSON"):
        http.request("GET", URL)


def test_a_key_echoed_in_an_error_body_is_redacted() -> None:
    http, _ = client(Script(httpx.Response(400, json={"msg": f"key {RUNPOD_KEY} is not valid here"})))
    with pytest.raises(ProviderError) as caught:
        http.request("GET", URL)
    assert RUNPOD_KEY not in str(caught.value) and "***" in str(caught.value)


def test_exponential_backoff_grows_caps_and_jitters_within_half() -> None:
    plain = exponential_backoff(base=0.5, multiplier=2.0, cap=4.0, jitter=False)
    assert [plain(n) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    jittered = exponential_backoff(base=0.5, multiplier=2.0, cap=4.0)
    for retry in range(6):
        assert plain(retry) / 2 <= jittered(retry) <= plain(retry)
