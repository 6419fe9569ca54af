"""A real OpenSSH server on loopback: a throwaway host key and user key, a config of its own, and the
pod's root in a sandbox directory (`ssh_sandbox_root`), so nothing touches the real /workspace.

CI installs openssh-server; a machine without it fails these tests loudly rather than skipping them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpuc.client.loopback_sshd import LoopbackSshd, SshdUnavailable, start_loopback_sshd
from gpuc.core.api import HeartbeatBody, PodEvent
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, verify

POD_TOKEN = "pod-token-" + "Z" * 32
Sshd = LoopbackSshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    try:
        server = start_loopback_sshd(tmp_path_factory.mktemp("sshd"))
    except SshdUnavailable as exc:
        pytest.fail(f"{exc.message}: these tests need a real sshd. {exc.hint}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ssh_settings(sshd: Sshd, tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path / "gpuc-home",
        ssh_key_path=sshd.key,
        ssh_sandbox_root=sshd.sandbox,
        heartbeat_interval_s=0.2,
        idle_check_interval_s=0.2,
        bootstrap_apt="",
    )


class Functions(BaseHTTPRequestHandler):
    """The functions' two pod routes, checking signatures with the pod's token like the real ones."""

    heartbeats: ClassVar[list[HeartbeatBody]] = []
    events: ClassVar[list[PodEvent]] = []
    problems: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ts, seq = int(self.headers["X-Gpuc-Timestamp"]), int(self.headers["X-Gpuc-Seq"])
        if not verify(derive_key(POD_TOKEN), ts, seq, body, self.headers["X-Gpuc-Signature"]):
            type(self).problems.append("bad signature")
        try:
            if self.path == "/v1/heartbeat":
                type(self).heartbeats.append(HeartbeatBody.model_validate_json(body))
            else:
                type(self).events.append(PodEvent.model_validate_json(body))
        except ValueError as exc:
            type(self).problems.append(str(exc))
        payload = json.dumps({"ok": True, "server_time": time.time(), "lease_until": None}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def functions_url() -> Iterator[str]:
    Functions.heartbeats, Functions.events, Functions.problems = [], [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Functions)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    assert Functions.problems == []
