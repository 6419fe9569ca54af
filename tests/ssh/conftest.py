"""A real OpenSSH server on loopback: a throwaway host key and user key, a config of its own, and the
pod's root in a sandbox directory (`ssh_sandbox_root`), so nothing touches the real /workspace.

CI installs openssh-server; a machine without it fails these tests loudly rather than skipping them.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gpuc.core.api import HeartbeatBody, PodEvent
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, verify

SSHD = Path("/usr/sbin/sshd")
POD_TOKEN = "pod-token-" + "Z" * 32


@dataclass(frozen=True)
class Sshd:
    port: int
    key: Path
    log: Path
    sandbox: Path
    pid: int
    user: str = getpass.getuser()  # an sshd not run by root takes logins for its own user only


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited at start: {log.read_text()[-500:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError("sshd did not listen within 10 s")


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    if not SSHD.exists():
        pytest.fail(f"{SSHD} is missing: these tests need a real sshd. Install it: apt-get install openssh-server")
    tmp = tmp_path_factory.mktemp("sshd")
    _keygen(tmp / "host_key")
    _keygen(tmp / "user_key")
    (tmp / "authorized_keys").write_text((tmp / "user_key.pub").read_text())
    if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
        # Debian's sshd refuses to start as root without its privilege-separation directory; the
        # package's service unit creates it, a bare container does not.
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    log = tmp / "sshd.log"
    for _attempt in range(5):
        port = _free_port()
        config = tmp / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {tmp / 'host_key'}",
                    f"PidFile {tmp / 'sshd.pid'}",
                    f"AuthorizedKeysFile {tmp / 'authorized_keys'}",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )
        proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config), "-E", str(log)])
        try:
            _wait_listening(port, proc, log)
            break
        except RuntimeError:
            proc.kill()
            proc.wait()
    else:
        pytest.fail(f"could not start sshd on loopback: {log.read_text()[-500:] if log.exists() else ''}")
    sandbox = tmp / "pods"
    sandbox.mkdir()
    try:
        yield Sshd(port=port, key=tmp / "user_key", log=log, sandbox=sandbox, pid=proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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
