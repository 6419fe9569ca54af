"""Signing, seq, retries, a pod clock that is off, and the real HTTP transport (against a loopback server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar, get_args

import pytest
from fakes.pod import POD_ID, TOKEN, Pod, SkewedClock, reply_json, serving, wire

from gpuc.core import api, signing
from gpuc.core.clock import FakeClock
from gpuc.core.signing import derive_key, verify
from gpuc.instance_side.ending import Ending
from gpuc.instance_side.heartbeat import event_body, heartbeat_body
from gpuc.instance_side.podhttp import HttpResult, TransportError, UrllibTransport
from gpuc.instance_side.signer import SeqCounter, Signer


@pytest.fixture
def pod(tmp_path: Path, clock: FakeClock) -> Pod:
    return wire(tmp_path / "pod", clock)


def test_the_pod_speaks_the_shared_contract_itself() -> None:
    """One declaration: the headers are core.signing's (api re-exports them), the event kinds and limits the
    model's own, read through its schema (core/wire.py)."""
    assert (signing.H_POD, signing.H_TIMESTAMP, signing.H_SEQ, signing.H_SIGNATURE, signing.H_CLAIM) == (
        api.H_POD,
        api.H_TIMESTAMP,
        api.H_SEQ,
        api.H_SIGNATURE,
        api.H_CLAIM,
    )
    for kind in get_args(api.EventKind):
        api.PodEvent.model_validate(event_body("p", kind, "x" * 5000, note="n" * 900))  # trimmed to its limits
    with pytest.raises(ValueError, match="unknown event kind"):
        event_body("p", "not-a-kind", "m")


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
        POD_ID, "job_exit", "m" * 5000, exit_code=1, duration_s=-1.0, end_at=1_790_000_000.0, note="n" * 900
    )
    parsed = api.PodEvent.model_validate(event)
    assert len(parsed.message) == 2000 and parsed.duration_s == 0 and parsed.note is not None
    with pytest.raises(ValueError):
        event_body(POD_ID, "bogus", "m")


# -- a pod clock that is off ---------------------------------------------------------------------------
SKEW = 6 * 60.0


def skewed(tmp_path: Path, clock: FakeClock, skew_s: float = SKEW, role: str = "agent") -> Pod:
    """A pod whose clock is `skew_s` ahead of the functions' (which keep `clock`)."""
    return wire(tmp_path / "pod", clock, role=role, pod_clock=SkewedClock(clock, skew_s))


def beat(pod: Pod, minutes: int) -> None:
    agent = pod.agent()
    for _ in range(minutes):
        agent.tick(pod.ctx.clock.now())
        pod.clock.advance(60)


@pytest.mark.parametrize("skew_s", [SKEW, -SKEW], ids=["ahead", "behind"])
@pytest.mark.parametrize("server_time_in", ["body", "date-header"])
def test_a_pod_clock_six_minutes_off_keeps_pinging(
    tmp_path: Path, clock: FakeClock, skew_s: float, server_time_in: str
) -> None:
    """The incident: every ping got 401 for the time window, the agent dropped them, the reaper killed
    the pod. Now the first refusal teaches the pod the functions' time, and the ping goes again at once."""
    pod = skewed(tmp_path, clock, skew_s)
    pod.functions.time_in_refusal = server_time_in == "body"
    beat(pod, 10)
    assert len(pod.functions.heartbeats) == 10  # not one minute lost: the refused ping was re-sent
    assert pod.functions.refused_for_time == 1  # and only the first one was refused
    for ping in pod.functions.heartbeats:
        assert abs(ping.sent_at - clock.now()) <= 10 * 60  # in the functions' time
    last = pod.functions.heartbeats[-1]
    assert abs(last.sent_at - (clock.now() - 60)) <= 2
    alerts = [e.message for e in pod.functions.events if "pod clock off by" in e.message]
    way = "ahead" if skew_s > 0 else "behind"
    assert len(alerts) == 1 and alerts[0].startswith(f"pod clock off by 360 s ({way})")
    assert "pod clock is 360 s" in pod.log_text()


def test_without_any_server_time_a_refused_ping_waits_and_is_never_dropped(tmp_path: Path, clock: FakeClock) -> None:
    pod = skewed(tmp_path, clock)
    pod.functions.time_in_refusal = pod.functions.date_header = False
    client = pod.ctx.client
    client.queue_heartbeat(heartbeat_body(POD_ID))
    client.flush(pod.ctx.clock.now())
    assert client.pending == 1 and client.failures == 1  # retried with backoff: the clock may get fixed
    pod.functions.time_in_refusal = True
    client.flush(client.next_attempt)
    assert client.pending == 0 and len(pod.functions.heartbeats) == 1


@pytest.mark.parametrize("server_time", ["NaN", "1e300", "0", '"soon"'])
def test_a_garbled_server_time_is_not_taken_as_the_clock(pod: Pod, server_time: str) -> None:
    def garbled(url: str, body: bytes, headers: Any, timeout_s: float) -> HttpResult:
        return HttpResult(200, b'{"ok": true, "server_time": ' + server_time.encode() + b"}")

    pod.ctx.client.transport = type("T", (), {"post": staticmethod(garbled)})()
    pod.ctx.client.queue_heartbeat(heartbeat_body(POD_ID))
    pod.ctx.client.flush(pod.clock.now())
    assert pod.ctx.client.signer.offset_s == 0.0
    pod.ctx.client.signer.sign(heartbeat_body(POD_ID), stamp_body=True)  # still signs


def test_a_refusal_that_is_not_about_time_is_still_dropped(pod: Pod) -> None:
    def unknown_pod(url: str, body: bytes, headers: Any, timeout_s: float) -> HttpResult:
        return HttpResult(401, b'{"error": "unknown pod or bad signature"}', "Tue, 01 Dec 2026 00:00:00 GMT")

    pod.ctx.client.transport = type("T", (), {"post": staticmethod(unknown_pod)})()
    pod.ctx.client.queue_heartbeat(heartbeat_body(POD_ID))
    pod.ctx.client.flush(pod.clock.now())
    assert pod.ctx.client.pending == 0 and "HTTP 401 unknown pod or bad signature" in pod.log_text()


def test_seq_keeps_rising_when_the_clock_is_corrected_backwards(tmp_path: Path, clock: FakeClock) -> None:
    """A pod 4 minutes ahead (inside the window) was accepted with seqs from its fast clock; once it signs
    with the functions' time, a lost seq file and a fresh process must not go below them."""
    pod = skewed(tmp_path, clock, 4 * 60.0)
    client = pod.ctx.client
    client.queue_heartbeat(heartbeat_body(POD_ID))
    client.flush(pod.ctx.clock.now())  # accepted; the answer's server_time corrects the clock by -240 s
    assert client.signer.offset_s == pytest.approx(-240)
    first = pod.functions.last_seq
    pod.paths.seq.unlink()  # state lost
    clock.advance(1)
    fresh = Signer(POD_ID, TOKEN, SeqCounter(pod.paths.seq, pod.ctx.clock), pod.ctx.clock)
    fresh.offset_s = client.signer.offset_s
    client.signer = fresh
    client.queue_heartbeat(heartbeat_body(POD_ID))
    client.flush(pod.ctx.clock.now())  # the fake functions fail the test if the seq went down
    assert pod.functions.last_seq > first and len(pod.functions.heartbeats) == 2


def test_seq_keeps_rising_when_the_clock_is_corrected_forwards(tmp_path: Path, clock: FakeClock) -> None:
    pod = skewed(tmp_path, clock, -SKEW)
    beat(pod, 2)
    first = pod.functions.last_seq
    pod.paths.seq.unlink()  # state lost, and a new process starts on its slow clock, uncorrected
    restarted = wire(tmp_path / "pod2", clock, pod_clock=SkewedClock(clock, -SKEW))
    restarted.functions = pod.functions
    restarted.ctx.client.transport = pod.functions
    restarted.ctx.client.queue_heartbeat(heartbeat_body(POD_ID))
    restarted.ctx.client.flush(restarted.ctx.clock.now())
    assert pod.functions.last_seq > first and len(pod.functions.heartbeats) == 3


def test_a_seq_below_what_the_functions_saw_is_raised_and_sent_again_at_once(pod: Pod) -> None:
    sent: list[int] = []

    def replay_guard(url: str, body: bytes, headers: Any, timeout_s: float) -> HttpResult:
        seq = int(headers["X-Gpuc-Seq"])
        sent.append(seq)
        if seq <= 9_000_000_000_000:
            payload = {"error": "replayed or out-of-order seq: send a higher one", "last_seq": 9_000_000_000_000}
            return HttpResult(409, json.dumps(payload).encode())
        return HttpResult(200, json.dumps({"ok": True, "server_time": pod.clock.now()}).encode())

    pod.ctx.client.transport = type("T", (), {"post": staticmethod(replay_guard)})()
    pod.ctx.client.queue_heartbeat(heartbeat_body(POD_ID))
    pod.ctx.client.flush(pod.clock.now())
    assert pod.ctx.client.pending == 0 and len(sent) == 2 and sent[1] == 9_000_000_000_001


def test_a_lease_is_read_on_the_pods_own_clock(tmp_path: Path, clock: FakeClock) -> None:
    pod = skewed(tmp_path, clock)
    pod.functions.lease_until = clock.now() + 3600  # gpuc keep POD --for 1h, in the functions' time
    client = pod.ctx.client
    client.queue_heartbeat(heartbeat_body(POD_ID))
    answer = client.flush(pod.ctx.clock.now())
    assert answer is not None and answer.lease_until == pytest.approx(pod.ctx.clock.now() + 3600)


def test_a_skewed_wrapper_delivers_its_end_with_the_functions_time(tmp_path: Path, clock: FakeClock) -> None:
    """The ledger's end comes from end_at: on a pod 6 minutes ahead it must not bill 6 minutes more."""
    pod = skewed(tmp_path, clock, role="wrapper")
    outcome = pod.ender().end(Ending(kind="job_exit", message="job exited with code 0", exit_code=0))
    assert outcome == "destroyed"
    [end] = [e for e in pod.functions.events if e.kind == "job_exit"]
    assert end.end_at is not None and abs(end.end_at - clock.now()) <= 2


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
    result = UrllibTransport().post(url, b'{"a": 1}', {"X-Gpuc-Pod": POD_ID, "Content-Type": "application/json"}, 5)
    assert result.status == 200 and json.loads(result.body)["lease_until"] == 7200.5
    path, headers, body = _Recorder.requests[0]
    assert path == "/v1/heartbeat" and headers["X-Gpuc-Pod"] == POD_ID and body == b'{"a": 1}'
    assert result.date is not None and result.date.endswith(" GMT")  # the server's clock, when the body has none
    _Recorder.status = 401
    refused = UrllibTransport().post(url, b"{}", {}, 5)
    assert (refused.status, refused.body) == (401, b'{"error": "stale timestamp"}') and refused.date


def test_the_urllib_transport_reports_an_unreachable_server() -> None:
    probe = HTTPServer(("127.0.0.1", 0), _Recorder)
    port = probe.server_address[1]
    probe.server_close()  # nothing listens there now
    with pytest.raises(TransportError, match=r"Connection refused|Errno"):
        UrllibTransport().post(f"http://127.0.0.1:{port}/v1/heartbeat", b"{}", {}, 2)
