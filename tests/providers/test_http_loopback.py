"""The providers over the process's one httpx client (core/transport.py: what production sends with) on REAL
HTTP: the emulators served on loopback, a local proxy, a TLS server with its own certificate, servers that
reset, trickle or flood. What matters for money: a create is sent again only when it cannot have reached
the server, an answer lost mid-way is looked up by name (one pod, never two), a list that cannot be read
never reads as "no pods", the bearer token never goes to a host it was not meant for, and no answer holds
a call past its deadline or fills the memory."""

from __future__ import annotations

import base64
import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes.httpstubs import Proxy, Stub, self_signed, server_context
from fakes.providers import RUNPOD_KEY, VAST_KEY, VAST_OFFER, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.models import PodSpec
from gpuc.core.providers.base import Provider
from gpuc.core.providers.http import AmbiguousOutcome, HttpClient, zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.core.transport import MAX_ANSWER_BYTES, reset_shared_client, shared_client
from gpuc.testkit.emulators.common import Emulator
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
TOKEN = "tok-" + "SECRETbearer" * 2
STATUS_OK = (200, {"Content-Type": "application/json"}, b'{"ok": true}')


@pytest.fixture(autouse=True)
def no_proxy_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def over_http(name: str, url: str, clock: FakeClock, timeout_s: float = 2.0) -> Provider:
    if name == "runpod":
        return RunPodProvider(
            RUNPOD_KEY, graphql_url=f"{url}/graphql", rest_url=f"{url}/v2", clock=clock,
            backoff=zero_backoff, timeout_s=timeout_s,
        )  # fmt: skip
    return VastProvider(VAST_KEY, url=url, clock=clock, backoff=zero_backoff, timeout_s=timeout_s)


def emulator(name: str, clock: FakeClock) -> Emulator:
    return (
        RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)
        if name == "runpod"
        else VastEmulator(api_key=VAST_KEY, clock=clock)
    )


def pod_spec(name: str, run_id: str = "run0001") -> PodSpec:
    return spec(name, run_id, **({"offer_id": VAST_OFFER} if name == "vast" else {}))


@pytest.fixture(params=["runpod", "vast"])
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def served(name: str, clock: FakeClock) -> Iterator[tuple[Emulator, EmulatorServer, Provider]]:
    emu = emulator(name, clock)
    with EmulatorServer(emu, hang_s=5.0) as server:
        provider = over_http(name, server.url, clock)
        yield emu, server, provider
        provider.close()


def creates(emu: Emulator) -> int:
    return len(emu.ops("create"))


def test_list_create_get_destroy_over_the_shared_client(served: tuple[Emulator, EmulatorServer, Provider]) -> None:
    emu, _, provider = served
    assert provider.http._http() is shared_client()  # type: ignore[attr-defined]
    assert provider.list_pods() == []
    pod = provider.create(pod_spec(provider.name))
    found = provider.get(pod.id)
    assert found is not None and found.name == "gpuc-run0001"
    assert [p.id for p in provider.list_pods()] == [pod.id]
    provider.destroy(pod.id)
    assert provider.list_pods() == [] and creates(emu) == 1


class ReopeningClock(FakeClock):
    """Starts the (stopped) server at the first backoff: the first connect is refused, the next one lands."""

    def __init__(self, server: EmulatorServer) -> None:
        super().__init__()
        self.server, self.sleeps = server, 0

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.server.start()
        super().sleep(seconds)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_on_create_is_sent_again_and_makes_one_pod(name: str, clock: FakeClock) -> None:
    emu = emulator(name, clock)
    server = EmulatorServer(emu, port=free_port(), hang_s=5.0)
    if name == "runpod":  # its create first reads the GPU types: the port closes after that read
        server.start()
        emu.after_request = lambda request: close_once(emu, server)
    reopening = ReopeningClock(server)
    provider = over_http(name, f"http://127.0.0.1:{server.port}", reopening)
    try:
        pod = provider.create(pod_spec(name))
    finally:
        provider.close()
        server.stop()
    assert reopening.sleeps == 1 and creates(emu) == 1 and emu_pods(emu) == [pod.id]
    # sent again at once: no lookup by name was needed, since nothing had arrived
    assert [r.op for r in emu.requests if r.op != "offers"] == ["create"]


def close_once(emu: Emulator, server: EmulatorServer) -> None:
    emu.after_request = None
    server.stop()  # the answer in flight still goes out on its own connection; the next connect is refused


def emu_pods(emu: Emulator) -> list[str]:
    """The ids of the pods the emulator holds (billed or not)."""
    held = emu.pods if isinstance(emu, RunPodEmulator) else emu.instances  # type: ignore[attr-defined]
    return [str(key) for key in held]


@pytest.mark.parametrize("kind", ["cut_after_commit", "drop_after_commit"])
def test_an_answer_lost_on_create_is_looked_up_by_name_never_sent_twice(
    served: tuple[Emulator, EmulatorServer, Provider], kind: str
) -> None:
    emu, _, provider = served
    emu.faults.add(op="create", kind=kind, times=1)
    pod = provider.create(pod_spec(provider.name))
    assert creates(emu) == 1 and len(emu_pods(emu)) == 1 and pod.name == "gpuc-run0001"
    ops = [r.op for r in emu.requests]
    assert ops.index("create") < len(ops) - 1  # after the lost answer, a read found the pod by name


@pytest.mark.parametrize("kind", ["drop", "cut_after_commit", "500", "empty_object"])
def test_a_list_that_cannot_be_read_raises_never_reads_as_no_pods(
    served: tuple[Emulator, EmulatorServer, Provider], kind: str
) -> None:
    emu, _, provider = served
    provider.create(pod_spec(provider.name))
    emu.faults.add(op="list", kind=kind, times=None)  # RunPod: the GraphQL list itself
    with pytest.raises((ProviderUnavailable, ProviderSchemaError)):
        provider.list_pods()


def client(clock: FakeClock, timeout_s: float = 2.0) -> HttpClient:
    return HttpClient(provider="runpod", api_key=TOKEN, key_env="RUNPOD_API_KEY", clock=clock,
                      backoff=zero_backoff, timeout_s=timeout_s)  # fmt: skip


@pytest.fixture
def stubs() -> Iterator[list[Stub]]:
    started: list[Stub] = []
    yield started
    for stub in started:
        stub.stop()


def test_a_redirect_is_not_followed_and_the_token_stays(clock: FakeClock, stubs: list[Stub]) -> None:
    elsewhere = Stub(lambda path: STATUS_OK)
    mover = Stub(lambda path: (302, {"Location": elsewhere.url + path}, b""))
    stubs += [elsewhere, mover]
    with pytest.raises(ProviderError) as info:
        client(clock).request("GET", mover.url + "/pods")
    assert info.value.status == 302 and TOKEN not in str(info.value)
    assert elsewhere.seen == [] and mover.seen == [("GET /pods HTTP/1.1", f"Bearer {TOKEN}")]


def test_an_answer_cut_mid_body_is_ambiguous_for_a_create_and_retried_for_a_read(
    clock: FakeClock, stubs: list[Stub]
) -> None:
    cutter = Stub(lambda path: (201, {"Content-Type": "application/json"}, b'{"id": "pod-1", "more": 1}'), cut=True)
    stubs.append(cutter)
    with pytest.raises(AmbiguousOutcome) as info:
        client(clock).request("POST", cutter.url + "/pods", json={"name": "gpuc-x"}, idempotent=False)
    assert "connection dropped" in info.value.message and len(cutter.seen) == 1
    with pytest.raises(ProviderUnavailable) as read:
        client(clock).request("GET", cutter.url + "/pods")
    assert not isinstance(read.value, AmbiguousOutcome) and len(cutter.seen) == 1 + 5


def test_a_create_without_an_answer_in_time_is_ambiguous(clock: FakeClock) -> None:
    with socket.socket() as silent:  # listens (the kernel completes the connection) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/pods"
        # 2 s, not a fraction: the deadline is wall clock and also covers the connect; on a loaded machine a
        # 0.2 s one ran out before the connect and read as "never sent" (retried), not as ambiguous.
        with pytest.raises(AmbiguousOutcome) as info:
            client(clock, timeout_s=2.0).request("POST", url, json={"name": "gpuc-x"}, idempotent=False)
    assert "no whole answer within the deadline" in info.value.message


@pytest.fixture
def proxy() -> Iterator[Proxy]:
    started = Proxy()
    yield started
    started.stop()


def test_an_http_proxy_from_the_environment_is_used_and_no_proxy_bypasses_it(
    served: tuple[Emulator, EmulatorServer, Provider], proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu, server, provider = served
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    reset_shared_client()  # the environment is read when the process's client is built
    provider.create(pod_spec(provider.name))
    assert len(provider.list_pods()) == 1
    assert proxy.seen and all(line.split()[1].startswith(server.url + "/") for line, _, _ in proxy.seen)
    assert len(emu.requests) == len(proxy.seen)  # every one went through it
    through = len(proxy.seen)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    reset_shared_client()
    assert len(provider.list_pods()) == 1
    assert len(proxy.seen) == through and len(emu.requests) > through


def test_all_proxy_is_the_fallback(
    served: tuple[Emulator, EmulatorServer, Provider], proxy: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, provider = served
    monkeypatch.setenv("all_proxy", proxy.url)
    reset_shared_client()
    provider.list_pods()
    assert proxy.seen


@pytest.fixture
def certificate(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    made = self_signed(tmp_path)
    reset_shared_client()  # the process's client: rebuilt with this test's SSL_CERT_FILE
    yield made
    reset_shared_client()


def test_https_goes_through_the_proxys_connect_tunnel_with_the_certificate_checked(
    clock: FakeClock, certificate: tuple[Path, Path], proxy: Proxy, stubs: list[Stub],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    target = Stub(lambda path: STATUS_OK, tls=server_context(*certificate))
    stubs.append(target)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    monkeypatch.setenv("HTTPS_PROXY", proxy.url.replace("http://", "http://user:p%40ss@"))
    assert client(clock).request("GET", target.url + "/pods").body == {"ok": True}
    basic = "Basic " + base64.b64encode(b"user:p@ss").decode()
    # the proxy saw only where to connect: the bearer token went inside the tunnel
    assert [(line.split()[:2], auth, bearer) for line, auth, bearer in proxy.seen] == [
        (["CONNECT", f"127.0.0.1:{target.port}"], basic, None)
    ]
    assert target.seen == [("GET /pods HTTP/1.1", f"Bearer {TOKEN}")]


def test_an_untrusted_certificate_is_not_sent_and_not_retried(
    clock: FakeClock, certificate: tuple[Path, Path], stubs: list[Stub]
) -> None:
    target = Stub(lambda path: STATUS_OK, tls=server_context(*certificate))
    stubs.append(target)
    for idempotent in (True, False):
        with pytest.raises(ProviderUnavailable) as info:
            client(clock).request("POST", target.url + "/pods", json={}, idempotent=idempotent)
        assert not isinstance(info.value, AmbiguousOutcome)  # nothing went out: no lookup, no guess
        assert "TLS certificate is not trusted" in info.value.message and "1 attempt)" in info.value.message
        assert "SSL_CERT_FILE" in (info.value.hint or "")
    assert target.seen == [] and clock.now() == FakeClock().now()


def test_a_proxy_that_refuses_the_tunnel_never_reached_the_server(
    clock: FakeClock, certificate: tuple[Path, Path], stubs: list[Stub], monkeypatch: pytest.MonkeyPatch
) -> None:
    target = Stub(lambda path: STATUS_OK, tls=server_context(*certificate))
    refusing = Proxy(refuse=403)
    stubs.append(target)
    monkeypatch.setenv("HTTPS_PROXY", refusing.url)
    try:
        with pytest.raises(ProviderUnavailable) as info:
            client(clock).request("POST", target.url + "/pods", json={}, idempotent=False)
    finally:
        refusing.stop()
    # a create sent again each time (the CONNECT failed: it never arrived), then the retries ran out
    assert not isinstance(info.value, AmbiguousOutcome) and "after 5 attempts" in info.value.message
    assert len(refusing.seen) == 5 and target.seen == []


def test_a_create_whose_connection_is_reset_mid_exchange_is_never_sent_again(
    served: tuple[Emulator, EmulatorServer, Provider],
) -> None:
    """A reset (TCP RST) after the request went out may follow the commit: the create is looked up by
    name, never sent a second time (a second billed pod)."""
    emu, _, provider = served
    emu.faults.add(op="create", kind="reset_after_commit", times=1)
    pod = provider.create(pod_spec(provider.name))
    assert creates(emu) == 1 and emu_pods(emu) == [pod.id]


def test_a_reset_mid_exchange_is_ambiguous_for_a_create(clock: FakeClock) -> None:
    seen: list[bytes] = []

    def reset(conn: socket.socket) -> None:
        seen.append(b"")
        while not seen[-1].endswith(b"}"):  # the whole request arrived: then a reset, no answer
            seen[-1] += conn.recv(65536)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    with RawServer(reset) as server, pytest.raises(AmbiguousOutcome) as info:
        client(clock).request("POST", server.url + "/pods", json={"name": "gpuc-x"}, idempotent=False)
    assert "network error" in info.value.message and len(seen) == 1


def reads_in_a_list(name: str) -> int:
    """One read per list on either provider (RunPod's is REST v2 alone)."""
    return 1


class RawServer:
    """A loopback TCP server that hands each connection to `serve` (in a thread), then closes it."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.serve, self.stopped = serve, threading.Event()
        self.connections = 0

    def __enter__(self) -> RawServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.sock.close()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            self.serve(conn)
        except OSError:
            pass
        finally:
            conn.close()


def trickle(headers: bool, stopped: threading.Event, for_s: float = 5.0) -> Callable[[socket.socket], None]:
    """A server that never stops sending, a byte every 0.2 s: in its headers, or in an endless body."""

    def serve(conn: socket.socket) -> None:
        conn.recv(65536)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        if not headers:
            conn.sendall(head + b"Content-Length: 1000000\r\n\r\n[")
        else:
            conn.sendall(head)
        begun = time.monotonic()
        while not stopped.wait(0.2) and time.monotonic() - begun < for_s:  # a client that waits fails, not hangs
            conn.sendall(b"X-Slow: 1\r\n" if headers else b" ")

    return serve


TRICKLE_S = 60.0  # the stopped event ends it with the test: only a client that never gives up waits it out


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickling_server_cannot_hold_a_list_past_its_deadline(name: str, clock: FakeClock, where: str) -> None:
    stopped = threading.Event()
    with RawServer(trickle(where == "headers", stopped, for_s=TRICKLE_S)) as server:
        provider = over_http(name, server.url, clock, timeout_s=1.0)
        start = time.monotonic()
        try:
            with pytest.raises(ProviderUnavailable) as info:
                provider.list_pods()
        finally:
            stopped.set()
            provider.close()
    elapsed = time.monotonic() - start
    # One deadline for the call, its retries included: well before the 60 s the server trickles for (a
    # bound with room for a machine at load 10; the connection count says there was no second try).
    assert elapsed < 1.0 + 20.0, elapsed
    assert "within the deadline" in info.value.message and server.connections == reads_in_a_list(name)


def test_a_create_held_past_its_deadline_is_ambiguous(clock: FakeClock) -> None:
    stopped = threading.Event()
    with RawServer(trickle(False, stopped)) as server:
        try:
            with pytest.raises(AmbiguousOutcome):
                client(clock, timeout_s=2.0).request("POST", server.url + "/pods", json={}, idempotent=False)
        finally:
            stopped.set()
    assert server.connections == 1


def flood(declared: bool, stopped: threading.Event) -> Callable[[socket.socket], None]:
    """A server answering 300 MB, its length declared or not (chunked)."""

    def serve(conn: socket.socket) -> None:
        conn.recv(65536)
        size = 300 * 1024 * 1024
        length = f"Content-Length: {size}" if declared else "Transfer-Encoding: chunked"
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}\r\n\r\n".encode())
        block = b" " * 65536
        piece = block if declared else f"{len(block):x}\r\n".encode() + block + b"\r\n"
        for _ in range(size // len(block)):
            if stopped.is_set():
                return
            conn.sendall(piece)

    return serve


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_huge_answer_is_refused_at_the_cap_not_read_whole(name: str, clock: FakeClock, declared: bool) -> None:
    stopped = threading.Event()
    with RawServer(flood(declared, stopped)) as server:
        provider = over_http(name, server.url, clock, timeout_s=20.0)
        tracemalloc.start()
        try:
            with pytest.raises(ProviderUnavailable) as info:
                provider.list_pods()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            stopped.set()
            provider.close()
    assert "too large" in info.value.message  # not retried: it would be again
    assert server.connections == reads_in_a_list(name)
    assert peak < (reads_in_a_list(name) + 1) * MAX_ANSWER_BYTES, peak  # at most the cap per read at once


def test_a_socks_proxy_in_the_environment_is_refused_by_name_not_a_crash(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    reset_shared_client()
    with pytest.raises(ProviderUnavailable) as info:
        client(clock).request("POST", "http://127.0.0.1:9/pods", json={}, idempotent=False)
    assert not isinstance(info.value, AmbiguousOutcome) and "proxy from the environment" in info.value.message
