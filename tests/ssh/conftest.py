"""An ssh server on loopback, reached with the real `ssh` client: OpenSSH's sshd where it is installed,
else asyncssh's (testkit.asyncsshd). A throwaway host key and user key, and the pod's root in a sandbox
directory (`ssh_sandbox_root`), so nothing touches the real /workspace.

A machine without the ssh client (or asyncssh) fails these tests loudly, saying what to install.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from fakes.pod import recording_functions

from gpuc.core.settings import Settings
from gpuc.testkit.sshd import LoopbackSshd, SshdUnavailable, start_loopback_sshd

POD_TOKEN = "pod-token-" + "Z" * 32
Sshd = LoopbackSshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    try:
        server = start_loopback_sshd(tmp_path_factory.mktemp("sshd"))
    except SshdUnavailable as exc:
        pytest.fail(f"{exc.message}. {exc.hint}")
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


Functions = recording_functions(POD_TOKEN)


@pytest.fixture
def watchdog_url() -> Iterator[str]:
    Functions.reset()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Functions)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    assert Functions.problems == []
