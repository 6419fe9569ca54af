"""The pod's own end over urllib (core/providers/podkey.py): the requests the laptop's clients send for the same
calls, one deadline for the whole call, and "later" never taken for "refused".

The money at stake: a 429 read as a refusal makes the pod stop itself instead of being destroyed (its disk bills
until the reaper), and a self-destroy that waits without bound keeps the pod billing past its end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest
from fakes.providers import spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.providers.answers import RateLimited
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.podhttp import SELF_DEADLINE_S, PodKeyHttp, Sent
from gpuc.core.providers.podkey import RunPodSelfDestroyer, VastSelfDestroyer
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

OFFER = "11684738"


def test_a_runpod_429_is_later_and_then_the_terminate_goes_through(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="destroy", kind="429", times=2)
    clock = FakeClock()
    environ = runpod_emu.pod_environ(pod.id)
    destroyer = RunPodSelfDestroyer.from_environ(environ, send=runpod_emu.pod_send(), clock=clock)
    assert destroyer.destroy_self() == f"terminated pod {pod.id}"
    assert runpod_emu.alive() == [] and runpod_emu.ops("stop") == []
    assert 0 < clock.now() - FakeClock().now() < SELF_DEADLINE_S  # it waited, within the deadline


@pytest.mark.parametrize("provider", ["runpod", "vast"])
def test_a_429_until_the_deadline_is_never_a_refusal_to_stop_on(provider: str, request: pytest.FixtureRequest) -> None:
    emulator, pod_id = _own_pod(provider, request)
    emulator.faults.add(op="destroy", kind="429", times=None)
    clock = FakeClock()
    start = clock.now()
    kind = RunPodSelfDestroyer if provider == "runpod" else VastSelfDestroyer
    destroyer = kind.from_environ(emulator.pod_environ(pod_id), send=emulator.pod_send(), clock=clock)
    with pytest.raises(RateLimited, match="later, not refused"):
        destroyer.destroy_self()
    assert emulator.ops("stop") == []  # never stopped instead: its disk would bill on
    assert len(emulator.ops("destroy")) > 2 and clock.now() - start <= SELF_DEADLINE_S


def test_a_graphql_error_that_says_rate_limit_is_later_too() -> None:
    answers = iter(
        [(200, b'{"errors":[{"message":"Rate limit exceeded, try again later"}]}')] * 3
        + [(200, b'{"data":{"podTerminate":null}}')]
    )
    calls: list[str] = []

    def send(method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Sent:
        calls.append(method)
        status, data = next(answers)
        return Sent(status, {}, data)

    http = PodKeyHttp("runpod", "pod-key-0123456789", "RUNPOD_API_KEY", clock=FakeClock(), send=send)
    assert RunPodSelfDestroyer("p1", http).destroy_self() == "terminated pod p1"
    assert calls == ["POST"] * 4  # no podStop in between: a limit is no refusal


def test_the_deadline_covers_the_whole_call_not_each_request() -> None:
    clock = FakeClock()
    sent: list[float] = []

    def send(method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float) -> Sent:
        sent.append(clock.now())
        clock.advance(timeout_s)  # every exchange takes all the time it is given, then fails
        return Sent(503, {}, b"busy")

    http = PodKeyHttp("vast", "instance-key-0123456789", "CONTAINER_API_KEY", deadline_s=60.0, clock=clock, send=send)
    start = clock.now()
    with pytest.raises(ProviderError):
        VastSelfDestroyer("1234", http).destroy_self()
    assert clock.now() - start <= 60.0 + 20.0  # the last exchange is bounded by what was left, at most one attempt


def test_the_pod_key_requests_are_the_laptops(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    environ = runpod_emu.pod_environ(pod.id)
    destroyer = RunPodSelfDestroyer.from_environ(environ, send=runpod_emu.pod_send(), clock=FakeClock())
    destroyer.destroy_self()
    sent = runpod_emu.ops("destroy")[-1]
    assert (sent.method, sent.path) == ("POST", "/graphql")
    assert sent.headers["content-type"] == "application/json" and sent.headers["user-agent"] == "gpuc"
    assert sent.body == (
        '{"query":"mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }",'
        f'"variables":{{"podId":"{pod.id}"}}}}'
    )


@pytest.fixture
def served_vast(vast_emu: VastEmulator) -> Iterator[EmulatorServer]:
    with EmulatorServer(vast_emu, hang_s=2.0) as server:
        yield server


def test_over_real_http_with_urllib(vast: VastProvider, vast_emu: VastEmulator, served_vast: EmulatorServer) -> None:
    """The default sender, urllib, against the emulator on loopback: what runs on a pod."""
    pod = vast.create(spec("vast", offer_id=OFFER))
    environ = {**vast_emu.pod_environ(pod.id), "GPUC_VAST_URL": f"{served_vast.url}/api/v0"}
    vast_emu.faults.add(op="destroy", kind="429")  # Vast's plain-text 429, no Retry-After
    said = VastSelfDestroyer.from_environ(environ, clock=FakeClock()).destroy_self()
    assert said == f"destroyed instance {pod.id}" and not isinstance(said, StoppedInstead)
    assert vast_emu.alive() == []


def test_no_redirect_is_followed_with_the_key(served_vast: EmulatorServer) -> None:
    """A redirect would carry the pod key wherever it points (urllib's own handler follows a POST's 302 as a GET,
    the Authorization header with it): it is an answer gpuc does not expect."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Redirect(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(302)
            self.send_header("Location", f"{served_vast.url}/api/v0/instances/1234/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        environ = {
            "RUNPOD_POD_ID": "p1",
            "RUNPOD_API_KEY": "k" * 24,
            "GPUC_RUNPOD_GRAPHQL_URL": f"http://{host!s}:{port}/graphql",
        }
        with pytest.raises(ProviderError):
            RunPodSelfDestroyer.from_environ(environ, clock=FakeClock()).destroy_self()
    finally:
        server.shutdown()
        server.server_close()
    assert served_vast.emulator.requests == []  # the redirect's target never saw the key


def _own_pod(provider: str, request: pytest.FixtureRequest) -> tuple[RunPodEmulator | VastEmulator, str]:
    if provider == "runpod":
        runpod_emu: RunPodEmulator = request.getfixturevalue("runpod_emu")
        return runpod_emu, request.getfixturevalue("runpod").create(spec("runpod")).id
    vast_emu: VastEmulator = request.getfixturevalue("vast_emu")
    return vast_emu, request.getfixturevalue("vast").create(spec("vast", offer_id=OFFER)).id
