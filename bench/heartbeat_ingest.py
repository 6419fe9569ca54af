"""Heartbeat ingest: signed heartbeats/s into the local functions server over HTTP, against a no-op
stdlib HTTP server on the same machine, same client, same run.

Why it matters: the ingest must never be what makes a live pod look silent. Targets: >= 0.5x the
no-op server and >= 2,000 pings/s. The client pre-builds every signed request before the clock
starts (keep-alive connections, one per thread), so both servers see the same bytes and the client's
own cost is as small as it can be.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import SecretStr

from gpuc.core import api
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, new_token, sign

CLIENTS = 4
PODS_PER_CLIENT = 5
PINGS_PER_CLIENT = 1500
ADMIN = "bench-admin-token-0123456789abcdef"

Prepared = list[tuple[bytes, dict[str, str]]]


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


def _register(url: str, pod_id: str, key: str) -> None:
    body = api.RegisterRequest(
        pod_id=pod_id, provider="local", name=f"gpuc-{pod_id}", experiment="bench", key=key
    ).model_dump_json()
    conn = _connect(url)
    conn.request("POST", "/v1/pods", body, {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"})
    answer = conn.getresponse()
    answer.read()
    conn.close()
    if answer.status != 200:
        raise RuntimeError(f"register failed: {answer.status}")


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)


def prepare(client: int) -> tuple[dict[str, str], Prepared]:
    """Signed heartbeats for this client's pods, seqs rising, round-robin over the pods."""
    keys = {f"b{client}-{i}": derive_key(new_token()) for i in range(PODS_PER_CLIENT)}
    pods = list(keys)
    now = int(time.time())
    out: Prepared = []
    for n in range(PINGS_PER_CLIENT):
        pod_id = pods[n % len(pods)]
        seq = n // len(pods) + 1
        body = json.dumps({"pod_id": pod_id, "seq": seq, "sent_at": float(now), "python_procs": 1}).encode()
        headers = {
            api.H_POD: pod_id,
            api.H_TIMESTAMP: str(now),
            api.H_SEQ: str(seq),
            api.H_SIGNATURE: sign(keys[pod_id], now, seq, body),
            "Content-Type": "application/json",
        }
        out.append((body, headers))
    return keys, out


def drive(url: str, work: list[Prepared]) -> float:
    """pings/s with one keep-alive connection per client thread; every answer must be a 200."""
    failures: list[int] = []
    barrier = threading.Barrier(len(work) + 1)

    def client(requests: Prepared) -> None:
        conn = _connect(url)
        barrier.wait()
        for body, headers in requests:
            conn.request("POST", "/v1/heartbeat", body, headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                failures.append(answer.status)
        conn.close()

    threads = [threading.Thread(target=client, args=(w,)) for w in work]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if failures:
        raise RuntimeError(f"{len(failures)} heartbeats refused, e.g. HTTP {failures[0]}")
    return sum(len(w) for w in work) / elapsed


def _serve_noop() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoopHandler)
    server.daemon_threads = True
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


def _serve_gpuc(home: str) -> None:
    from gpuc.functions.server import start_in_thread

    handle = start_in_thread(Settings(home=Path(home), admin_token=SecretStr(ADMIN)))
    print(handle.url, flush=True)
    threading.Event().wait()


@contextmanager
def _server(kind: str, home: str = "", *, own_process: bool = True) -> Iterator[str]:
    """Each server in its own process, as `gpuc watchdog serve` runs: the client threads here must not
    share (and fight over) the server's interpreter lock."""
    if not own_process:
        with _in_thread(kind, home) as url:
            yield url
        return
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, home], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextmanager
def _in_thread(kind: str, home: str) -> Iterator[str]:
    if kind == "noop":
        noop = ThreadingHTTPServer(("127.0.0.1", 0), _NoopHandler)
        noop.daemon_threads = True
        threading.Thread(target=noop.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{noop.server_address[1]}"
        finally:
            noop.shutdown()
            noop.server_close()
        return
    from gpuc.functions.server import start_in_thread

    with start_in_thread(Settings(home=Path(home), admin_token=SecretStr(ADMIN))) as handle:
        yield handle.url


def measure(own_process: bool = True) -> dict[str, float]:
    """own_process=False runs both servers as threads of this process, beside the client threads: the
    interpreter lock then throttles the no-op baseline as much as gpuc, which flatters the ratio."""
    prepared = [prepare(c) for c in range(CLIENTS)]
    work = [p[1] for p in prepared]
    with _server("noop", own_process=own_process) as url:
        noop = drive(url, work)
    with tempfile.TemporaryDirectory() as tmp, _server("gpuc", tmp, own_process=own_process) as url:
        for keys, _ in prepared:
            for pod_id, key in keys.items():
                _register(url, pod_id, key)
        gpuc = drive(url, work)
    return {"noop": noop, "gpuc": gpuc, "ratio": gpuc / noop}


def main() -> list[tuple[str, str, str]]:
    m = measure(own_process=True)
    t = measure(own_process=False)
    return [
        ("heartbeat ingest: no-op stdlib HTTP server (own process)", f"{m['noop']:.0f}/s", ""),
        ("heartbeat ingest: gpuc local functions (own process)", f"{m['gpuc']:.0f}/s", "target >= 2000/s"),
        ("heartbeat ingest ratio (gpuc / no-op), own processes", f"{m['ratio']:.2f}x", "target >= 0.5x"),
        ("heartbeat ingest ratio, servers as threads of the client", f"{t['ratio']:.2f}x", "(shared GIL)"),
    ]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve_noop() if sys.argv[2] == "noop" else _serve_gpuc(sys.argv[3])
        sys.exit(0)
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
