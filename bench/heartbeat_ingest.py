"""Heartbeat ingest: pods as separate processes sending signed heartbeats over HTTP to the local functions
server in its own process, against a no-op stdlib HTTP server measured in the same run, same clients.

Why it matters: the ingest must never be what makes a live pod look silent. Two phases:
- burst: every pod process opens a fresh connection and pings at the same instant (a fleet started
  together pings together). Each ping has the agent's own per-attempt timeout; one that misses it, or
  is reset or refused, is a failed ping. A ping slower than 1 s had its SYN dropped by a full listen
  backlog (Linux retransmits a SYN after 1 s). Target: all answered, none retransmitted.
- steady: a few pod processes, one keep-alive connection each, sign and send as fast as answers come.
  Targets: >= 2,000 pings/s and >= 0.5x the no-op server.
The no-op server is run twice in the burst: with gpuc's backlog (the fair baseline) and as the stdlib
ships it (backlog 5), which shows what the backlog is for.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from gpuc.core import api
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_token, sign
from gpuc.functions.server import _Server

BURST_PODS = 100
STEADY_PODS = 4  # one keep-alive connection per process; more only adds context switches on 2 cores
STEADY_S = 3.0  # per round; two rounds, servers interleaved, so drift on a shared machine hits both
ROUNDS = 2
PING_TIMEOUT_S = 5.0  # the agent's per-attempt timeout (instance_side.heartbeat.REQUEST_TIMEOUT_S)
SYN_RETRY_S = 1.0  # Linux's first SYN retransmit: an answer slower than this had its SYN dropped
ADMIN = "bench-admin-token-0123456789abcdef"


class _NoopHandler(BaseHTTPRequestHandler):
    """The fairest baseline: keep-alive and TCP_NODELAY like the gpuc server (without NODELAY the
    stdlib's two writes per answer meet the client's delayed ACK: ~90 answers/s)."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve_noop(backlog: int) -> None:
    server_class = type("NoopServer", (ThreadingHTTPServer,), {"request_queue_size": backlog})
    server = server_class(("127.0.0.1", 0), _NoopHandler)
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def _serve_gpuc(home: str) -> None:
    from gpuc.functions.server import start_in_thread

    handle = start_in_thread(Settings(home=Path(home), admin_token=SecretStr(ADMIN)))
    print(handle.url, flush=True)
    threading.Event().wait()


@contextmanager
def _server(*args: str) -> Iterator[str]:
    """Each server in its own process, as `gpuc watchdog serve` runs."""
    proc = subprocess.Popen([sys.executable, __file__, "--serve", *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _connect(url: str, timeout_s: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)


def _register(url: str, keys: dict[str, str]) -> None:
    conn = _connect(url, 30)
    for pod_id, key in keys.items():
        body = api.RegisterRequest(
            pod_id=pod_id, provider="local", name=f"gpuc-{pod_id}", experiment="bench", key=key
        ).model_dump_json()
        conn.request("POST", "/v1/pods", body, {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            raise RuntimeError(f"register {pod_id} failed: HTTP {answer.status}")
    conn.close()


class _Pod:
    """One pod's signer, in its own process: seqs rise across phases and servers, as on a real pod."""

    def __init__(self, pod_id: str, key: str) -> None:
        self.pod_id, self.key, self.seq = pod_id, key, 0

    def ping(self, conn: http.client.HTTPConnection) -> int:
        self.seq += 1
        now = int(time.time())
        body = json.dumps({"pod_id": self.pod_id, "seq": self.seq, "sent_at": float(now), "python_procs": 1}).encode()
        headers = {
            api.H_POD: self.pod_id,
            api.H_TIMESTAMP: str(now),
            api.H_SEQ: str(self.seq),
            api.H_SIGNATURE: sign(self.key, now, self.seq, body),
            "Content-Type": "application/json",
        }
        conn.request("POST", "/v1/heartbeat", body, headers)
        answer = conn.getresponse()
        answer.read()
        return answer.status


def _burst_ping(pod: _Pod, url: str, start: Barrier) -> tuple[str, float]:
    """A fresh connection, as the agent makes one per ping: the connect is what meets the backlog."""
    conn = _connect(url, PING_TIMEOUT_S)
    start.wait()
    began = time.monotonic()
    try:
        status = pod.ping(conn)
        outcome = "answered" if status == 200 else f"HTTP {status}"
    except OSError as exc:  # timeouts, resets, refusals
        outcome = type(exc).__name__
    finally:
        conn.close()
    return outcome, time.monotonic() - began


def _steady(pod: _Pod, url: str, seconds: float, start: Barrier) -> tuple[int, int, float]:
    conn = _connect(url, 30)
    conn.connect()
    start.wait()
    end = time.monotonic() + seconds
    answered = refused = 0
    while time.monotonic() < end:
        if pod.ping(conn) == 200:
            answered += 1
        else:
            refused += 1
    conn.close()
    return answered, refused, time.monotonic()


def _pod_process(pod_id: str, key: str, pipe: Connection, burst: Barrier, steady: Barrier) -> None:
    pod = _Pod(pod_id, key)
    while (command := pipe.recv()) is not None:
        phase, url, seconds = command
        if phase == "burst":
            pipe.send(_burst_ping(pod, url, burst))
        else:
            pipe.send(_steady(pod, url, seconds, steady))


@dataclass
class Burst:
    answered: int
    failed: dict[str, int]
    retransmitted: int  # answered, but only after a dropped SYN was sent again
    slowest_s: float


class Fleet:
    """BURST_PODS pod processes, forked once and reused for every phase against every server."""

    def __init__(self) -> None:
        # fork: 100 spawned interpreters would cost the 2 cores more than the whole measurement
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
        self.keys = {f"bench-{i:03d}": derive_key(new_token()) for i in range(BURST_PODS)}
        self.burst_barrier = ctx.Barrier(BURST_PODS + 1)
        self.steady_barrier = ctx.Barrier(STEADY_PODS + 1)
        self.pipes: list[Connection] = []
        self.procs: list[Any] = []
        for pod_id, key in self.keys.items():
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=_pod_process, args=(pod_id, key, theirs, self.burst_barrier, self.steady_barrier), daemon=True
            )
            proc.start()
            theirs.close()  # only the child holds its end: a crashed pod is an EOFError here, not a hang
            self.pipes.append(mine)
            self.procs.append(proc)

    def burst(self, url: str) -> Burst:
        for pipe in self.pipes:
            pipe.send(("burst", url, 0.0))
        self.burst_barrier.wait(timeout=60)
        results: list[tuple[str, float]] = [pipe.recv() for pipe in self.pipes]
        failed: dict[str, int] = {}
        for outcome, _ in results:
            if outcome != "answered":
                failed[outcome] = failed.get(outcome, 0) + 1
        answered = [s for outcome, s in results if outcome == "answered"]
        return Burst(
            answered=len(answered),
            failed=failed,
            retransmitted=sum(1 for s in answered if s >= SYN_RETRY_S),
            slowest_s=max((s for _, s in results), default=0.0),
        )

    def steady(self, url: str, seconds: float) -> tuple[int, float]:
        """(answers, elapsed): the first STEADY_PODS pods, each on one keep-alive connection."""
        pipes = self.pipes[:STEADY_PODS]
        for pipe in pipes:
            pipe.send(("steady", url, seconds))
        self.steady_barrier.wait(timeout=60)
        began = time.monotonic()
        results: list[tuple[int, int, float]] = [pipe.recv() for pipe in pipes]
        refused = sum(r[1] for r in results)
        if refused:
            raise RuntimeError(f"{refused} heartbeats refused in the steady phase")
        return sum(r[0] for r in results), max(r[2] for r in results) - began

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for proc in self.procs:
            proc.join(timeout=10)


def measure() -> dict[str, Any]:
    fleet = Fleet()
    try:
        with (
            tempfile.TemporaryDirectory() as home,
            _server("gpuc", home) as gpuc_url,
            _server("noop", str(_Server.request_queue_size)) as noop_url,
            _server("noop", "5") as stdlib_url,
        ):
            _register(gpuc_url, fleet.keys)
            totals = {"gpuc": [0, 0.0], "noop": [0, 0.0]}
            for _ in range(ROUNDS):
                for name, url in (("noop", noop_url), ("gpuc", gpuc_url)):
                    answers, elapsed = fleet.steady(url, STEADY_S)
                    totals[name][0] += answers
                    totals[name][1] += elapsed
            bursts = {
                "gpuc": fleet.burst(gpuc_url),
                "noop": fleet.burst(noop_url),
                "stdlib": fleet.burst(stdlib_url),
            }
    finally:
        fleet.close()
    rates = {name: count / elapsed for name, (count, elapsed) in totals.items()}
    return {**rates, "ratio": rates["gpuc"] / rates["noop"], "bursts": bursts}


def _burst_row(label: str, burst: Burst, target: str) -> tuple[str, str, str]:
    failed = ", ".join(f"{n} {kind}" for kind, n in sorted(burst.failed.items()))
    detail = f"failed: {failed}; " if failed else ""
    detail += f"SYN retried: {burst.retransmitted}, slowest {burst.slowest_s * 1000:.0f} ms{target}"
    return f"ingest burst of {BURST_PODS} at once: answered ({label})", f"{burst.answered}/{BURST_PODS}", detail


def main() -> list[tuple[str, str, str]]:
    m = measure()
    bursts: dict[str, Burst] = m["bursts"]
    return [
        (f"ingest steady, {STEADY_PODS} pod processes: no-op stdlib server", f"{m['noop']:.0f}/s", ""),
        (f"ingest steady, {STEADY_PODS} pod processes: gpuc functions", f"{m['gpuc']:.0f}/s", "target >= 2000/s"),
        ("ingest steady ratio (gpuc / no-op)", f"{m['ratio']:.2f}x", "target >= 0.5x"),
        _burst_row(
            f"gpuc, backlog {_Server.request_queue_size}",
            bursts["gpuc"],
            f"; target all, 0 retried, < {SYN_RETRY_S:.0f} s",
        ),
        _burst_row(f"no-op, backlog {_Server.request_queue_size}", bursts["noop"], ""),
        _burst_row("no-op, stdlib backlog 5", bursts["stdlib"], ""),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve_noop(int(sys.argv[3])) if sys.argv[2] == "noop" else _serve_gpuc(sys.argv[3])
        sys.exit(0)
    started = time.monotonic()
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
    print(f"(ran in {time.monotonic() - started:.0f} s)")
