"""The watchdog's status on real HTTP (loopback), over the process's one httpx client: `status()`, the one
reader of the one declaration (core/api.py's StatusResponse) for every command. Each failure says what to
do; proxies from the environment are honoured and a redirect is never followed."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fakes.httpstubs import Answer, Stub
from fakes.watchdog import ADMIN, World
from pydantic import SecretStr

from gpuc.core import api
from gpuc.core.errors import WatchdogError
from gpuc.core.signing import derive_key, new_token
from gpuc.core.transport import reset_shared_client
from gpuc.core.watchdog_client import CONNECT_TRIES, WatchdogClient
from gpuc.functions.server import ServerHandle, start_in_thread

READS = ("status",)
STATUS = api.StatusResponse(server_time=1_767_225_600.0, reaper_period_s=300.0).model_dump_json().encode()


@pytest.fixture
def stubs() -> Iterator[Callable[[Callable[[str], Answer]], Stub]]:
    started: list[Stub] = []

    def start(answer: Callable[[str], Answer]) -> Stub:
        started.append(Stub(answer))
        return started[-1]

    yield start
    for stub in started:
        stub.stop()


@pytest.fixture(autouse=True)
def no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def server(world: World) -> Iterator[ServerHandle]:
    handle = start_in_thread(world.settings, deps=world.deps)
    yield handle
    handle.stop()


def read(world: World, how: str, url: str, sleeps: list[float] | None = None, **overrides: Any) -> Any:
    settings = world.settings.with_overrides(watchdog_url=url, **overrides)
    with WatchdogClient(settings, sleep=(sleeps if sleeps is not None else []).append) as client:
        return getattr(client, how)()


def failure(world: World, how: str, url: str, sleeps: list[float] | None = None, **overrides: Any) -> WatchdogError:
    with pytest.raises(WatchdogError) as info:
        read(world, how, url, sleeps, **overrides)
    assert ADMIN not in str(info.value) and ADMIN not in (info.value.hint or "")
    return info.value


def test_the_status_reads_the_pods_from_the_real_server(world: World, server: ServerHandle) -> None:
    world.provider.add("p1")
    settings = world.settings.with_overrides(watchdog_url=server.url)
    with WatchdogClient(settings) as client:
        request = {"pod_id": "p1", "provider": "fake", "name": "gpuc-p1", "experiment": "exp"}
        client.register(api.RegisterRequest.model_validate({**request, "key": derive_key(new_token())}))
        full = client.status()
    assert [(p.pod_id, p.state) for p in full.pods] == [("p1", "ok")] and full.reaper_period_s > 0


def test_a_refusal_is_the_same_error(world: World, server: ServerHandle) -> None:
    errors = [failure(world, how, server.url, admin_token=SecretStr("wrong-token-value")) for how in READS]
    assert {(e.message, e.hint, e.status) for e in errors} == {(errors[0].message, errors[0].hint, 401)}
    assert "missing or wrong admin token" in errors[0].message and "wrong-token-value" not in str(errors[0])


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_no_server_is_retried_then_said_the_same(world: World) -> None:
    url = closed_port()
    said = set()
    for how in READS:
        sleeps: list[float] = []
        error = failure(world, how, url, sleeps)
        assert len(sleeps) == CONNECT_TRIES - 1, how  # a refused connection never reached the server
        said.add((error.message, error.hint))
    assert len(said) == 1 and "cannot reach the watchdog" in said.pop()[0]


def test_a_server_that_never_answers_is_a_timeout_not_retried(world: World) -> None:
    with socket.socket() as silent:  # listens (the kernel completes the connection) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        said = set()
        for how in READS:
            sleeps: list[float] = []
            # 1 s of wall clock, not 0.2: the timeout covers the connect too, which a loaded machine can delay
            error = failure(world, how, url, sleeps, watchdog_timeout_s=1.0)
            assert sleeps == [], how
            said.add(error.message)
    assert len(said) == 1 and "did not answer within 1 s" in said.pop()


@pytest.mark.parametrize(
    "answer",
    [
        (200, {"Content-Type": "text/html"}, b"<html>a captive portal</html>"),
        (200, {"Content-Type": "application/json"}, b'{"unexpected": 1}'),
        (200, {"Content-Type": "application/json"}, b'{"server_time": 1, "reaper_period_s": 300, "pods": [{}]}'),
    ],
    ids=["html", "another-json", "a-pod-without-fields"],
)
def test_an_answer_that_is_not_the_watchdogs_is_the_same_error(
    world: World, stubs: Callable[[Callable[[str], Answer]], Stub], answer: Answer
) -> None:
    stub = stubs(lambda path: answer)
    said = {failure(world, how, stub.url).message for how in READS}
    assert len(said) == 1 and "answered something unexpected" in said.pop()


def test_a_redirect_is_not_followed_and_the_token_stays(
    world: World, stubs: Callable[[Callable[[str], Answer]], Stub]
) -> None:
    elsewhere = stubs(lambda path: (200, {}, STATUS))
    mover = stubs(lambda path: (302, {"Location": elsewhere.url + path}, b""))
    for how in READS:
        assert "answered something unexpected" in failure(world, how, mover.url).message
    assert elsewhere.seen == [] and len(mover.seen) == len(READS)


def test_the_environments_proxy_is_used_and_no_proxy_bypasses_it(
    world: World, stubs: Callable[[Callable[[str], Answer]], Stub], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = stubs(lambda path: (200, {"Content-Type": "application/json"}, STATUS))
    target = stubs(lambda path: (200, {"Content-Type": "application/json"}, STATUS))
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    for how in READS:
        assert read(world, how, target.url).reaper_period_s == 300.0
    # through the proxy: the request line names the whole URL, and the token goes with it (plain http)
    assert [line.split()[1] for line, _ in proxy.seen] == [target.url + "/v1/status"] * len(READS)
    assert target.seen == []
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    reset_shared_client()  # the environment is read when the process's client is built
    for how in READS:
        read(world, how, target.url)
    assert len(proxy.seen) == len(READS) and len(target.seen) == len(READS)


def test_a_given_transport_answers_the_status_and_its_document_is_checked(world: World) -> None:
    """A test's in-process server (httpx.MockTransport) answers the same reader; a document not the
    watchdog's is refused, never read as an empty status."""
    answers = iter([httpx.Response(200, content=STATUS), httpx.Response(200, json={"unexpected": 1})])
    client = WatchdogClient(world.settings, httpx.MockTransport(lambda request: next(answers)))
    with client:
        assert client.status().reaper_period_s == 300.0
        with pytest.raises(WatchdogError) as info:
            client.status()
    assert "answered something unexpected" in info.value.message
