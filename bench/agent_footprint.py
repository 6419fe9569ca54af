"""Agent footprint: what the pod agent costs the pod it watches, for hours.

A real `python -m gpuc.instance_side agent` in a sandbox pod (rented-pod code path: /proc scans,
the NVML reader, signed heartbeats over urllib) against a loopback functions stub, twice:
- accelerated (a check and a heartbeat every 0.1 s): resident memory, and CPU per heartbeat;
- at the real cadence (60 s): the CPU the agent burns between pings (its 1-second naps).
At 1 ping/min the share of one core is  (CPU per heartbeat + 60 s of napping) / 60 s.

CPU comes from /proc/<pid>/schedstat (nanoseconds), memory from /proc/<pid>/status (VmHWM: the
peak). Targets: <= 30 MB resident, <= 0.5 % of one core at 1 ping/min. A bare python that only sleeps
in 1-second steps is measured in the same run: what one wake-up a second costs on this machine.

On a machine without an NVIDIA driver the NVML library is not loaded; on a GPU pod it adds its own
mapping (a few MB of libnvidia-ml), which this figure does not include.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

TOKEN = "bench-token-" + "b" * 30
ACCELERATED_S = 0.1
ACCELERATED_RUN_S = 12.0
FLOOR_RUN_S = 8.0


class _Stub(BaseHTTPRequestHandler):
    heartbeats: ClassVar[int] = 0
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/heartbeat":
            with _Stub.lock:
                _Stub.heartbeats += 1
        body = json.dumps({"ok": True, "server_time": time.time(), "lease_until": None}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


@contextmanager
def _functions() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _beats() -> int:
    with _Stub.lock:
        return _Stub.heartbeats


def _pod(root: Path, watchdog_url: str, interval_s: float) -> dict[str, str]:
    from gpuc.core.podconfig import PodConfig, PodPaths, render_env_file
    from gpuc.core.settings import Settings

    paths = PodPaths(root)
    paths.state.mkdir(parents=True)
    settings = Settings(
        home=root / "home",
        watchdog_url=watchdog_url,
        heartbeat_interval_s=interval_s,
        idle_check_interval_s=interval_s,
    )
    config = PodConfig.for_pod(settings, pod_id="bench01", provider="runpod", experiment="bench", run_id="bench01")
    paths.config.write_text(config.model_dump_json())
    fd = os.open(paths.secrets, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, render_env_file({"GPUC_POD_TOKEN": TOKEN}).encode())
    os.close(fd)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GPUC_POD_ROOT": str(root)}


def _cpu_s(pid: int) -> float:
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass(frozen=True)
class Run:
    cpu_s: float
    wall_s: float
    beats: int
    peak_rss_kb: int
    rss_kb: int


def _run_agent(interval_s: float, duration_s: float) -> Run:
    with tempfile.TemporaryDirectory(prefix="gpuc-bench-") as tmp, _functions() as url:
        env = _pod(Path(tmp) / "pod", url, interval_s)
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuc.instance_side", "agent"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while _beats() < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            if _beats() < 1:
                raise RuntimeError("the agent sent no heartbeat within 30 s")
            time.sleep(min(1.0, interval_s * 5))  # past start-up: imports and the first tick
            cpu0, beats0, wall0 = _cpu_s(agent.pid), _beats(), time.monotonic()
            time.sleep(duration_s)
            cpu1, beats1, wall1 = _cpu_s(agent.pid), _beats(), time.monotonic()
            return Run(
                cpu_s=cpu1 - cpu0,
                wall_s=wall1 - wall0,
                beats=beats1 - beats0,
                peak_rss_kb=_status_kb(agent.pid, "VmHWM"),
                rss_kb=_status_kb(agent.pid, "VmRSS"),
            )
        finally:
            agent.send_signal(signal.SIGTERM)
            try:
                agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                agent.kill()
                agent.wait()


def _sleeper_share(duration_s: float) -> float:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time\nwhile True:\n    time.sleep(1)"])
    try:
        time.sleep(1.0)
        cpu0, wall0 = _cpu_s(sleeper.pid), time.monotonic()
        time.sleep(duration_s)
        return (_cpu_s(sleeper.pid) - cpu0) / (time.monotonic() - wall0)
    finally:
        sleeper.kill()
        sleeper.wait()


def measure() -> dict[str, float]:
    fast = _run_agent(ACCELERATED_S, ACCELERATED_RUN_S)
    slow = _run_agent(60.0, FLOOR_RUN_S)
    sleeper = _sleeper_share(FLOOR_RUN_S)
    per_beat_s = fast.cpu_s / max(1, fast.beats)
    floor_share = slow.cpu_s / slow.wall_s  # napping, no ping in the window
    share_at_1_per_min = floor_share + per_beat_s / 60.0
    return {
        "peak_rss_mb": max(fast.peak_rss_kb, slow.peak_rss_kb) / 1024,
        "rss_mb": fast.rss_kb / 1024,
        "beats": float(fast.beats),
        "per_beat_ms": per_beat_s * 1000,
        "floor_pct": floor_share * 100,
        "share_pct": share_at_1_per_min * 100,
        "accelerated_pct": fast.cpu_s / fast.wall_s * 100,
        "sleeper_pct": sleeper * 100,
    }


def main() -> list[tuple[str, str, str]]:
    if not Path("/proc/self/schedstat").exists():
        return [("agent footprint", "n/a", "needs Linux /proc")]
    m = measure()
    return [
        ("agent RSS, peak (VmHWM)", f"{m['peak_rss_mb']:.1f} MB", "target <= 30 MB"),
        (
            f"agent CPU per heartbeat (check + signed ping; {m['beats']:.0f} pings)",
            f"{m['per_beat_ms']:.2f} ms",
            "",
        ),
        ("agent CPU while napping between pings", f"{m['floor_pct']:.4f} %", ""),
        ("  same, a bare python sleeping 1 s at a time (this machine)", f"{m['sleeper_pct']:.4f} %", ""),
        ("agent CPU share at 1 ping/min (extrapolated)", f"{m['share_pct']:.4f} %", "target <= 0.5 %"),
    ]


if __name__ == "__main__":
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
