"""Signing, seq, retries and the real HTTP transport (against a loopback server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar, get_args

import pytest
from podfakes import POD_ID, TOKEN, Pod, reply_json, serving, wire

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.signing import derive_key, verify
from gpuc.instance_side import heartbeat as hb
from gpuc.instance_side.heartbeat import (
    HttpResult,
    SeqCounter,
    Signer,
    TransportError,
    UrllibTransport,
    event_body,
    heartbeat_body,
)


@pytest.fixture
def pod(tmp_path: Path, clock: FakeClock) -> Pod:
    return wire(tmp_path / "pod", clock)


def test_the_wire_names_match_the_shared_contract() -> None:
    assert (hb.H_POD, hb.H_TIMESTAMP, hb.H_SEQ, hb.H_SIGNATURE) == (
        api.H_POD,
        api.H_TIMESTAMP,
        api.H_SEQ,
        api.H_SIGNATURE,
    )
    assert get_args(api.EventKind) == hb.EVENT_KINDS


def test_seq_rises_across_two_signer_instances_and_a_restart(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "seq"
    first, second = SeqCounter(path, clock), SeqCounter(path, clock)
    got = [first.next(), second.next(), first.next(), second.next()]
    assert got == sorted(set(got)) and len(got) == 4
    clock.advance(-3600)  # the clock steps back (NTP): seq still rises
    assert SeqCounter(path, clock).next() > got[-1]
    path.unlink()  # state lost: the clock term keeps it above anything sent before
    clock.advance(3600 + 1)
    assert SeqCounter(path, clock).next() > got[-1]


def test_seq_is_unique_under_concurrent_processes(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "seq"
    out: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        counter = SeqCounter(path, clock)  # own fd: flock contends as between processes
        for _ in range(50):
            value = counter.next()
            with lock:
                out.append(value)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 200


def test_a_signed_heartbeat_verifies_and_validates(tmp_path: Path, clock: FakeClock) -> None:
    signer = Signer(POD_ID, TOKEN, SeqCounter(tmp_path / "seq", clock), clock)
    body, headers = signer.sign(heartbeat_body(POD_ID, python_procs=2), stamp_body=True)
    seq, ts = int(headers["X-Gpuc-Seq"]), int(headers["X-Gpuc-Timestamp"])
    assert verify(derive_key(TOKEN), ts, seq, body, headers["X-Gpuc-Signature"])
    parsed = api.HeartbeatBody.model_validate_json(body)
    assert parsed.seq == seq and parsed.sent_at == clock.now() and parsed.python_procs == 2
    assert TOKEN not in json.dumps(headers) and TOKEN.encode() not in body


def test_each_retry_is_signed_afresh(pod: Pod) -> None:
    seen: list[tuple[str, str]] = []
    real = pod.functions.post

    def flaky(url: str, body: bytes, headers: Any, timeout_s: float) -> HttpResult:
        seen.append((headers["X-Gpuc-Seq"], headers["X-Gpuc-Signature"]))
        if len(seen) == 1:
            raise TransportError("timed out")
        return real(url, body, headers, timeout_s)

    pod.ctx.client.transport = type("T", (), {"post": staticmethod(flaky)})()
    pod.ctx.client.queue_heartbeat(heartbeat_body(POD_ID))
    pod.ctx.client.flush(pod.clock.now())
    pod.clock.advance(60)
    pod.ctx.client.flush(pod.clock.now())
    assert len(seen) == 2 and seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]
    assert len(pod.functions.heartbeats) == 1


def test_backoff_is_exponential_and_capped_at_the_heartbeat_interval(pod: Pod) -> None:
    client = pod.ctx.client
    pod.functions.down = True
    client.queue_heartbeat(heartbeat_body(POD_ID))
    delays = []
    for _ in range(8):
        now = client.next_attempt if client.next_attempt else pod.clock.now()
        client.flush(now)
        delays.append(client.next_attempt - now)
    assert delays == [2, 4, 8, 16, 32, 60, 60, 60]


def test_only_the_newest_heartbeat_waits_and_events_keep_their_order(pod: Pod) -> None:
    client = pod.ctx.client
    pod.functions.down = True
    client.queue_event(event_body(POD_ID, "agent_start", "a"))
    for n in range(5):
        client.queue_heartbeat(heartbeat_body(POD_ID, python_procs=n))
        client.flush(pod.clock.now())
        pod.clock.advance(120)
    client.queue_event(event_body(POD_ID, "idle_warning", "b"))
    pod.functions.down = False
    client.flush(pod.clock.now())
    assert [h.python_procs for h in pod.functions.heartbeats] == [4]
    assert pod.functions.kinds() == ["agent_start", "idle_warning"]
    assert client.pending == 0 and client.failures == 0


def test_a_server_error_is_retried_and_a_refusal_is_dropped(pod: Pod) -> None:
    client = pod.ctx.client
    pod.functions.status = 503
    client.queue_event(event_body(POD_ID, "info", "x"))
    client.flush(pod.clock.now())
    assert client.pending == 1
    pod.functions.status = 400
    client.flush(client.next_attempt)
    assert client.pending == 0
    assert "functions refused /v1/events: HTTP 400 try later" in pod.log_text()


def test_deliver_gives_up_within_its_budget(pod: Pod) -> None:
    pod.functions.down = True
    start = pod.clock.now()
    assert not pod.ctx.client.deliver(event_body(POD_ID, "job_exit", "x"), budget_s=8)
    assert pod.clock.now() - start <= 8
    assert pod.functions.attempts >= 3


def test_an_unexpected_transport_exception_is_a_failed_delivery_not_a_crash(pod: Pod) -> None:
    def broken(*_: Any) -> HttpResult:
        raise ValueError("bug in the HTTP stack")

    pod.ctx.client.transport = type("T", (), {"post": staticmethod(broken)})()
    pod.ctx.client.queue_heartbeat(heartbeat_body(POD_ID))
    assert pod.ctx.client.flush(pod.clock.now()) is None
    assert pod.ctx.client.failures == 1


def test_event_bodies_fit_the_shared_model() -> None:
    event = event_body(
        POD_ID, "job_exit", "m" * 5000, exit_code=1, duration_s=-1.0, end_at=5.0, note="n" * 900
    )
    parsed = api.PodEvent.model_validate(event)
    assert len(parsed.message) == 2000 and parsed.duration_s == 0 and parsed.note is not None
    with pytest.raises(ValueError):
        event_body(POD_ID, "bogus", "m")


class _Recorder(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, dict[str, str], bytes]]] = []
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests.append((self.path, dict(self.headers), body))
        payload = b'{"ok": true, "server_time": 5, "lease_until": 7200.5}'
        if self.status != 200:
            payload = b'{"error": "stale timestamp"}'
        reply_json(self, self.status, payload)

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def server() -> Iterator[str]:
    _Recorder.requests = []
    _Recorder.status = 200
    with serving(_Recorder) as url:
        yield url


def test_the_urllib_transport_talks_http(server: str) -> None:
    url = f"{server}/v1/heartbeat"
    result = UrllibTransport().post(
        url, b'{"a": 1}', {"X-Gpuc-Pod": POD_ID, "Content-Type": "application/json"}, 5
    )
    assert result.status == 200 and json.loads(result.body)["lease_until"] == 7200.5
    path, headers, body = _Recorder.requests[0]
    assert path == "/v1/heartbeat" and headers["X-Gpuc-Pod"] == POD_ID and body == b'{"a": 1}'
    _Recorder.status = 401
    assert UrllibTransport().post(url, b"{}", {}, 5) == HttpResult(401, b'{"error": "stale timestamp"}')


def test_the_urllib_transport_reports_an_unreachable_server() -> None:
    probe = HTTPServer(("127.0.0.1", 0), _Recorder)
    port = probe.server_address[1]
    probe.server_close()  # nothing listens there now
    with pytest.raises(TransportError, match=r"Connection refused|Errno"):
        UrllibTransport().post(f"http://127.0.0.1:{port}/v1/heartbeat", b"{}", {}, 2)
