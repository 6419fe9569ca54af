"""The laptop's admin client, against the real local server and against transports that fail."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from fakes.watchdog import ADMIN, World
from pydantic import SecretStr

from gpuc.core import api
from gpuc.core.errors import WatchdogError
from gpuc.core.signing import derive_key, new_token
from gpuc.core.watchdog_client import CONNECT_TRIES, WatchdogClient
from gpuc.functions.server import ServerHandle, start_in_thread


@pytest.fixture
def server(world: World) -> Iterator[ServerHandle]:
    handle = start_in_thread(world.settings, deps=world.deps)
    yield handle
    handle.stop()


@pytest.fixture
def client(world: World, server: ServerHandle) -> Iterator[WatchdogClient]:
    with WatchdogClient(world.settings.with_overrides(watchdog_url=server.url)) as c:
        yield c


def test_the_whole_admin_surface(world: World, client: WatchdogClient) -> None:
    world.provider.add("p1")
    request = api.RegisterRequest.model_validate(
        {
            "pod_id": "p1",
            "provider": "fake",
            "name": "gpuc-p1",
            "experiment": "exp",
            "key": derive_key(new_token()),
        }
    )
    assert client.register(request).ok
    assert client.keep("p1", world.now + 600).ok
    assert client.notify("hello", "from the laptop").ok
    assert client.end("p1", api.EndRequest.model_validate({"end_at": world.now, "note": "done"})).ok
    status = client.status()
    assert [(p.pod_id, p.state, p.lease_until, p.note) for p in status.pods] == [
        ("p1", "ended", world.now + 600, "done")
    ]
    report = client.reap(dry_run=True)
    assert report.dry_run and report.ran_at == world.now


def test_a_pod_id_with_odd_characters_is_quoted(world: World, client: WatchdogClient) -> None:
    with pytest.raises(WatchdogError) as info:
        client.keep("../status", world.now)
    assert info.value.status == 404


def test_a_refusal_is_a_functions_error_with_a_hint(world: World, server: ServerHandle) -> None:
    settings = world.settings.with_overrides(watchdog_url=server.url, admin_token=SecretStr("wrong-token-value"))
    with WatchdogClient(settings) as c, pytest.raises(WatchdogError) as info:
        c.status()
    assert info.value.status == 401
    assert "missing or wrong admin token" in info.value.message
    assert "config.json" in (info.value.hint or "")
    assert "wrong-token-value" not in str(info.value)


def test_no_admin_token_says_where_to_get_one(world: World) -> None:
    settings = world.settings.with_overrides(admin_token=None)
    with WatchdogClient(settings) as c, pytest.raises(WatchdogError) as info:
        c.status()
    assert "gpuc watchdog serve" in (info.value.hint or "")


def test_an_unreachable_server_is_retried_then_says_how_to_start_it(world: World) -> None:
    attempts: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ConnectError("refused", request=request)

    sleeps: list[float] = []
    client = WatchdogClient(world.settings, httpx.MockTransport(refuse), sleep=sleeps.append)
    with client, pytest.raises(WatchdogError) as info:
        client.status()
    assert len(attempts) == CONNECT_TRIES
    assert len(sleeps) == CONNECT_TRIES - 1
    assert "cannot reach the watchdog" in info.value.message
    assert "gpuc watchdog serve" in (info.value.hint or "")
    assert ADMIN not in str(info.value)


def test_a_timeout_is_not_retried(world: World) -> None:
    attempts: list[httpx.Request] = []

    def slow(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        raise httpx.ReadTimeout("slow", request=request)

    with (
        WatchdogClient(world.settings, httpx.MockTransport(slow)) as c,
        pytest.raises(WatchdogError) as info,
    ):
        c.reap()
    assert len(attempts) == 1  # the pass may have run: never run it twice
    assert "did not answer" in info.value.message


@pytest.mark.parametrize(
    "answer",
    [httpx.Response(200, text="<html>proxy</html>"), httpx.Response(200, json={"unexpected": 1})],
)
def test_an_answer_that_is_not_the_watchdogs_is_an_error(world: World, answer: httpx.Response) -> None:
    client = WatchdogClient(world.settings, httpx.MockTransport(lambda r: answer))
    with client, pytest.raises(WatchdogError) as info:
        client.status()
    assert "unexpected" in info.value.message


def test_the_admin_token_travels_as_a_bearer_header(world: World) -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    with WatchdogClient(world.settings, httpx.MockTransport(record)) as c:
        c.notify("t", "m")
    assert seen[0].headers["Authorization"] == f"Bearer {ADMIN}"
    assert ADMIN not in str(seen[0].url)
