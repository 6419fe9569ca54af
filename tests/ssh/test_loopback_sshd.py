"""The loopback ssh server itself: which one runs, what it needs, and that the asyncssh stand-in behaves
as OpenSSH's sshd does where gpuc relies on it (the behaviour tests run against every server installed)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuc.client.onpod.ssh import SshTarget, ssh_command, ssh_environ
from gpuc.testkit.asyncsshd import write_keypair
from gpuc.testkit.sshd import SSHD, LoopbackSshd, SshdUnavailable, require_ssh, start_loopback_sshd

pytestmark = pytest.mark.sshd
SERVERS = ["asyncssh", *(["openssh"] if SSHD.exists() else [])]


def ssh(
    server: LoopbackSshd, tmp: Path, command: str, stdin: bytes = b"", key: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The argv gpuc itself runs (client.ssh), so this is the server as gpuc sees it."""
    target = SshTarget(
        host=server.host,
        port=server.port,
        key_path=key or server.key,
        known_hosts=tmp / "known_hosts",
        host_alias=f"gpuc-{server.kind}",
        user=server.user,
    )
    return subprocess.run(ssh_command(target, command), input=stdin, capture_output=True, env=ssh_environ(), timeout=60)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(predicate: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_the_server_is_openssh_where_installed_else_asyncssh(tmp_path: Path) -> None:
    installed = tmp_path / "sshd"
    installed.touch()
    assert require_ssh(installed) == "openssh"
    assert require_ssh(tmp_path / "no-sshd") == "asyncssh"
    assert require_ssh() == ("openssh" if SSHD.exists() else "asyncssh")
    # No OpenSSH server is no longer an error: the fallback serves.
    server = start_loopback_sshd(tmp_path / "fallback", sshd=tmp_path / "no-sshd")
    try:
        assert server.kind == "asyncssh"
        assert ssh(server, tmp_path, "echo $USER").stdout == f"{server.user}\n".encode()
    finally:
        server.stop()


def test_no_ssh_client_says_what_to_install_and_starts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a machine with Python and no OpenSSH client
    with pytest.raises(SshdUnavailable, match="no ssh client found") as exc:
        start_loopback_sshd(tmp_path / "sshd")
    assert exc.value.hint == "install it: apt-get install openssh-client"
    assert not (tmp_path / "sshd").exists()


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackSshd]:
    directory = tmp_path_factory.mktemp(request.param)
    started = start_loopback_sshd(directory, sshd=SSHD if request.param == "openssh" else directory / "no-sshd")
    assert started.kind == request.param
    yield started
    started.stop()


def test_a_command_gets_stdin_its_output_and_the_exit_status_in_a_login_environment(
    server: LoopbackSshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUC_LAPTOP_ONLY", "must not reach the pod")
    command = 'echo "$USER ${GPUC_LAPTOP_ONLY:-unset}"; wc -c; echo oops >&2; exit 7'
    result = ssh(server, tmp_path, command, stdin=b"x" * 300_000)
    assert (result.returncode, result.stderr) == (7, b"oops\n")
    assert result.stdout == f"{server.user} unset\n300000\n".encode()
    assert ssh(server, tmp_path, "kill -9 $$").returncode == 255  # killed by a signal: the client says so


def test_a_process_holding_the_output_holds_the_session_as_with_openssh(server: LoopbackSshd, tmp_path: Path) -> None:
    # The hazard SshAccess.start redirects every stream against: the session lasts as long as the output.
    result = ssh(server, tmp_path, "(sleep 1; echo late) & echo early")
    assert (result.returncode, result.stdout) == (0, b"early\nlate\n")


def test_a_detached_process_outlives_the_session(server: LoopbackSshd, tmp_path: Path) -> None:
    result = ssh(server, tmp_path, "setsid nohup sleep 120 < /dev/null > /dev/null 2>&1 & echo $!")
    assert result.returncode == 0, result.stderr
    pid = int(result.stdout)
    try:
        assert alive(pid)
    finally:
        os.kill(pid, 9)


def test_only_the_throwaway_key_gets_in(server: LoopbackSshd, tmp_path: Path) -> None:
    write_keypair(tmp_path / "other_key")
    result = ssh(server, tmp_path, "true", key=tmp_path / "other_key")
    assert result.returncode == 255 and b"Permission denied" in result.stderr
    assert (tmp_path / "other_key").stat().st_mode & 0o077 == 0


def server_threads() -> int:
    return sum(t.name == "gpuc-loopback-sshd" for t in threading.enumerate())


def test_stop_ends_the_sessions_the_shells_and_the_thread(tmp_path: Path) -> None:
    threads = server_threads()
    server = start_loopback_sshd(tmp_path / "sshd", sshd=tmp_path / "no-sshd")
    marker = f"gpuc-stop-test-{os.getpid()}"
    target = SshTarget(server.host, server.port, server.key, tmp_path / "known_hosts", "gpuc-stop", server.user)
    client = subprocess.Popen(ssh_command(target, f"sleep 300; echo {marker}"), env=ssh_environ())
    running: list[int] = []  # the session's shell and its `sleep`

    def session_started() -> bool:
        shell = [pid for pid in _pids() if pid != client.pid and marker.encode() in _read(pid, "cmdline")]
        running[:] = shell + [pid for pid in _pids() if shell and _ppid(pid) == shell[0]]
        return len(running) == 2

    try:
        assert wait_for(session_started)
        server.stop()
        assert client.wait(timeout=30) == 255
        assert wait_for(lambda: not any(alive(pid) for pid in running))
        assert server_threads() == threads
        server.stop()  # idempotent
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _read(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _ppid(pid: int) -> int:
    fields = _read(pid, "stat").rsplit(b")", 1)
    return int(fields[1].split()[1]) if len(fields) == 2 else 0
