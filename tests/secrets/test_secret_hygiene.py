"""Secret hygiene: plant distinct secrets in a mode-600 .env and in the environment, run `gpuc demo`
and `gpuc drill` as real processes, plain and with GPUC_DEBUG=1, and search every byte gpuc wrote or
printed for them (tracebacks forced on purpose: tests/secrets/test_debug_output.py).

Searched: stdout and stderr; every file under the gpuc home (logs, state DBs, ledger, outbox, pod logs,
pod sandboxes); every request the RunPod / Vast emulators and the notification endpoint received
(path, query, body, headers -- except the one auth header each must see, which the emulators already
record redacted); the argv of every gpuc process seen while the demo ran (sampled from /proc).

Treated as legitimate, and why:
- the planted .env itself (the user wrote it);
- a pod's `secrets.env` (mode 600) while that pod lives: it is how the pod gets its own keys (HF token,
  S3, git). The pod is destroyed by the end of the demo, so a secrets.env still holding a planted value
  afterwards IS a finding: the test requires every one to be gone or free of planted values;
- the ntfy token in the Authorization header of the notification request: the endpoint must see it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

# Token-shaped on purpose (the redaction and the upload scanner must see real shapes), built at run time:
# no token-shaped literal sits in the repo (the pre-commit hook and `gpuc up`'s own scan would find it).
PLANTED = {
    "RUNPOD_API_KEY": "rpa_" + "PLANTrunpod9f8e7d6c5b4a39281706",
    "VAST_API_KEY": "PLANTvast0a1b2c3d4e5f60718293a4b5c6",
    "HF_TOKEN": "hf_" + "PLANThuggingface5d4c3b2a1908f7e6",
    "GPUC_GIT_TOKEN": "ghp_" + "PLANTgit7a6b5c4d3e2f1a0b9c8d7e6f",
    "GPUC_S3_ACCESS_KEY_ID": "AKIA" + "PLANTS3KEYID0001",
    "GPUC_S3_SECRET_ACCESS_KEY": "PLANTs3secret/8c7b6a5d4e3f2a1b0c9d8e7f",
    "GPUC_WEBHOOK_SECRET": "PLANTwebhook3e2d1c0b9a8f7e6d5c4b",
    "GPUC_TELEGRAM_SECRET": "PLANTtelegram9a8b7c6d5e4f3a2b1c0d",
    "GPUC_SLACK_SIGNING_SECRET": "PLANTslack1b2c3d4e5f6a7b8c9d0e1f",
}
NTFY_TOKEN = "tk_PLANTntfy6f5e4d3c2b1a0f9e8d7c6b5a"


@dataclass
class Recorder:
    """A notification endpoint on loopback that keeps every request."""

    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


def start_recorder(rec: Recorder) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            rec.requests.append((self.path, dict(self.headers.items()), self.rfile.read(length)))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        do_PUT = do_POST

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class ArgvSampler:
    """Samples /proc/*/cmdline of gpuc processes (the demo and everything it spawns) while it runs."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        me = os.getpid()
        while not self.stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit() or int(entry.name) == me:
                    continue
                try:
                    argv = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"gpuc" in argv:
                    self.seen.add(argv)
            self.stop.wait(0.05)

    def __enter__(self) -> ArgvSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


@pytest.fixture
def providers() -> Iterator[tuple[EmulatorServer, EmulatorServer]]:
    with (
        EmulatorServer(RunPodEmulator(api_key=PLANTED["RUNPOD_API_KEY"]), hang_s=2.0) as runpod,
        EmulatorServer(VastEmulator(api_key=PLANTED["VAST_API_KEY"]), hang_s=2.0) as vast,
    ):
        yield runpod, vast


def secrets() -> dict[str, str]:
    return {**PLANTED, "NTFY_TOKEN": NTFY_TOKEN}


def hits(where: str, data: bytes) -> list[str]:
    return [f"{name} in {where}" for name, value in secrets().items() if value.encode() in data]


def gpuc(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "gpuc"), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=240,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("debug", ["", "1"], ids=["plain", "GPUC_DEBUG=1"])
def test_no_planted_secret_shows_anywhere(
    tmp_path: Path, providers: tuple[EmulatorServer, EmulatorServer], debug: str
) -> None:
    runpod, vast = providers
    recorder = Recorder()
    notify_server = start_recorder(recorder)
    home = tmp_path / "home"
    home.mkdir()
    notify_url = f"ntfy://{NTFY_TOKEN}@127.0.0.1:{notify_server.server_address[1]}/gpuc-drill"
    dotenv = {
        **PLANTED,
        "GPUC_NOTIFY_URLS": notify_url,
        **runpod.client_env(),
        **vast.client_env(),
    }
    env_file = home / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in dotenv.items()))
    env_file.chmod(0o600)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "HF_"))},
        **dotenv,
        "GPUC_HOME": str(home),
        "GPUC_ENV_FILE": str(env_file),
        "GPUC_DEBUG": debug,  # The debug runs print nothing secret either
    }
    try:
        with ArgvSampler() as sampler:
            demo = gpuc(["demo", "--home", str(home)], env, tmp_path)
        drill = gpuc(["drill", "--faults", "--seed", "1"], env, tmp_path)
    finally:
        notify_server.shutdown()
        notify_server.server_close()

    assert demo.returncode == 0, demo.stdout.decode()[-3000:] + demo.stderr.decode()[-3000:]
    assert drill.returncode == 0, drill.stdout.decode()[-3000:]
    found: list[str] = []
    for name, proc in (("demo", demo), ("drill", drill)):
        found += hits(f"{name} stdout", proc.stdout) + hits(f"{name} stderr", proc.stderr)
    files = [p for p in home.rglob("*") if p.is_file() and p != env_file]
    assert files, "the demo kept no state: nothing was searched"
    for path in files:
        found += hits(str(path.relative_to(home)), path.read_bytes())
    for server in (runpod, vast):
        for r in server.emulator.requests:
            found += hits(
                f"{server.emulator.provider} request {r.op}", repr((r.path, r.query, r.headers, r.body)).encode()
            )
    for url_path, headers, body in recorder.requests:
        visible = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        found += hits("notification request", repr((url_path, visible)).encode() + body)
    assert sampler.seen, "no gpuc process was sampled: the argv check proved nothing"
    for argv in sampler.seen:
        found += hits(f"argv {argv[:60]!r}", argv)
    # The search can find: every planted value is in the .env it excluded, by the same matcher.
    assert len(hits(".env", env_file.read_bytes())) == len(secrets())
    print(
        f"\nsecret search: {len(files)} files, {len(sampler.seen)} argv, "
        f"{sum(len(s.emulator.requests) for s in (runpod, vast))} provider requests, "
        f"{len(recorder.requests)} notifications; hits {len(found)}"
    )
    assert found == [], found
