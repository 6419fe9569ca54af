"""What the network costs `gpuc ls` in a real home, in round trips: both providers, a watchdog and a pod
(testkit/homes.py), every endpoint behind a loopback forwarder that puts it 150 ms away.

The forwarder adds one round trip (RTT) to each new connection (the TCP handshake a real endpoint costs) and
delays every byte the client sends by one RTT (its answer then comes straight back): a request on a
kept-open connection costs 1 RTT, on a new one 2. The same forwarders at zero delay give the command's own
time in the same run; the difference over the RTT is what the network costs, in round trips.

Goal: at most 3 round trips (reads one after the other, each on a new connection, cost 9.6).
Run: `python bench/ls_latency.py` (GPUC_BENCH_RUNS=N for more runs; GPUC_BENCH_RTT_MS for another RTT).
"""

from __future__ import annotations

import os
import queue
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from gpuc.testkit.homes import real_home

RUNS = int(os.environ.get("GPUC_BENCH_RUNS", "7"))
RTT_S = float(os.environ.get("GPUC_BENCH_RTT_MS", "150")) / 1000
GOAL_ROUND_TRIPS = 3.0
GPUC = str(Path(sys.executable).parent / "gpuc")
# The home's endpoints, by the variables that name them (testkit/homes.py writes them to its .env).
URL_VARS = ("GPUC_RUNPOD_GRAPHQL_URL", "GPUC_RUNPOD_REST_URL", "GPUC_VAST_URL", "GPUC_WATCHDOG_URL")


class Forwarder:
    """127.0.0.1:port -> `upstream`, `delay_s` away (settable: one forwarder serves both runs)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay_s = 0.0
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        self.sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(client, time.monotonic()), daemon=True).start()

    def _serve(self, client: socket.socket, accepted: float) -> None:
        delay = self.delay_s
        upstream = socket.create_connection(self.upstream)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The handshake's round trip: nothing reaches the server before accept + 1 RTT, then 1 RTT more.
        handshake_done = accepted + delay
        pending: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def read_client() -> None:
            while True:
                try:
                    data = client.recv(65536)
                except OSError:
                    data = b""
                pending.put((max(time.monotonic(), handshake_done) + delay, data))
                if not data:
                    return

        def send_upstream() -> None:
            while True:
                due, data = pending.get()
                time.sleep(max(0.0, due - time.monotonic()))
                if not data:
                    _shut(upstream)
                    return
                try:
                    upstream.sendall(data)
                except OSError:
                    return

        def answer_client() -> None:
            while True:
                try:
                    data = upstream.recv(65536)
                    if not data:
                        break
                    client.sendall(data)
                except OSError:
                    break
            _shut(client)

        threads = [threading.Thread(target=t, daemon=True) for t in (read_client, send_upstream, answer_client)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        client.close()
        upstream.close()


def _shut(sock: socket.socket) -> None:
    with suppress(OSError):
        sock.shutdown(socket.SHUT_WR)


@contextmanager
def behind_forwarders(env: dict[str, str], home_env_file: Path) -> Iterator[tuple[dict[str, str], list[Forwarder]]]:
    """The home's .env rewritten so every endpoint goes through a Forwarder (one per host:port)."""
    lines = home_env_file.read_text(encoding="utf-8").splitlines()
    forwarders: dict[tuple[str, int], Forwarder] = {}
    out = []
    for line in lines:
        name, _, value = line.partition("=")
        if name in URL_VARS:
            url = urlsplit(value)
            key = (url.hostname or "127.0.0.1", url.port or 80)
            if key not in forwarders:
                forwarders[key] = Forwarder(key)
            value = urlunsplit(url._replace(netloc=f"127.0.0.1:{forwarders[key].port}"))
        out.append(f"{name}={value}")
    home_env_file.write_text("\n".join(out) + "\n", encoding="utf-8")
    try:
        yield env, list(forwarders.values())
    finally:
        for forwarder in forwarders.values():
            forwarder.stop()


def _wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=120)
    return time.perf_counter() - start


def measure(runs: int = RUNS, rtt_s: float = RTT_S) -> dict[str, float]:
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuc-bench-latency-")))
        env = stack.enter_context(real_home(root))
        env, forwarders = stack.enter_context(behind_forwarders(env, Path(env["GPUC_ENV_FILE"])))
        times: dict[float, list[float]] = {0.0: [], rtt_s: []}
        connections: dict[float, list[int]] = {0.0: [], rtt_s: []}
        for delay in (0.0, rtt_s):  # warm: the page cache, `ls`'s own state
            for forwarder in forwarders:
                forwarder.delay_s = delay
            _wall([GPUC, "ls"], env)
        for _ in range(runs):  # interleaved, so machine noise hits both alike
            for delay in (0.0, rtt_s):
                for forwarder in forwarders:
                    forwarder.delay_s = delay
                before = sum(f.connections for f in forwarders)
                times[delay].append(_wall([GPUC, "ls"], env))
                connections[delay].append(sum(f.connections for f in forwarders) - before)
    zero, slow = statistics.median(times[0.0]), statistics.median(times[rtt_s])
    return {
        "zero_s": zero,
        "slow_s": slow,
        "round_trips": (slow - zero) / rtt_s,
        "connections": float(statistics.median(connections[rtt_s])),
    }


def main() -> list[tuple[str, str, str]]:
    m = measure()
    ms = f"{RTT_S * 1000:.0f} ms"
    return [
        ("gpuc ls, real home, endpoints 0 ms away (wall)", f"{m['zero_s'] * 1000:.0f} ms", ""),
        (f"gpuc ls, real home, endpoints {ms} away (wall)", f"{m['slow_s'] * 1000:.0f} ms", ""),
        ("gpuc ls: connections opened", f"{m['connections']:.0f}", ""),
        ("gpuc ls: round trips the network costs", f"{m['round_trips']:.2f}", f"target <= {GOAL_ROUND_TRIPS:g}"),
    ]


if __name__ == "__main__":
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
