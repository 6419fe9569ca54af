"""SshAccess against an ssh server on loopback: uploads, commands, detached processes, waiting."""

from __future__ import annotations

import dataclasses
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from conftest import Sshd

from gpuc.client.onpod.ssh import (
    SshAccess,
    SshError,
    SshResult,
    ssh_access,
    subprocess_runner,
    wait_for_ssh,
    wait_for_ssh_endpoint,
)
from gpuc.core.clock import FakeClock
from gpuc.core.pod import Pod
from gpuc.core.settings import Settings

SECRET = "hf_" + "SuperSecretValue" * 3

pytestmark = pytest.mark.sshd


def rented(port: int, pod_id: str = "sshpod01", host: str | None = "127.0.0.1") -> Pod:
    return Pod(provider="runpod", id=pod_id, name="gpuc-sshpod01", status="running", ssh_host=host, ssh_port=port)


class Recorder:
    """The real runner, recording the argv and environment of every ssh process it starts."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, argv: list[str], stdin: bytes | None, timeout_s: float, env: Mapping[str, str]) -> SshResult:
        self.calls.append((list(argv), dict(env)))
        return subprocess_runner(argv, stdin, timeout_s, env)

    def leaked(self, secret: str) -> bool:
        return any(secret in " ".join(argv) or secret in " ".join(env.values()) for argv, env in self.calls)


def proc_cmdlines_with(secret: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if secret.encode() in raw:
            found.append(int(pid))
    return found


def test_put_file_writes_mode_600_and_the_secret_never_reaches_argv_env_or_logs(
    sshd: Sshd, ssh_settings: Settings
) -> None:
    recorder = Recorder()
    access = ssh_access(rented(sshd.port), ssh_settings, runner=recorder, user=sshd.user)
    # Large enough that the transfer takes a while, so the /proc watch runs during it.
    payload = (f'HF_TOKEN="{SECRET}"\n' + "# padding\n" * 400_000).encode()
    seen: list[int] = []
    scans: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.extend(proc_cmdlines_with(SECRET))
            scans.append(1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        access.put_file("workspace/.gpuc/secrets.env", payload, 0o600)
    finally:
        done.set()
        watcher.join()
    target = sshd.sandbox / "sshpod01" / "workspace" / ".gpuc" / "secrets.env"
    assert target.read_bytes() == payload
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in target.parent.iterdir()] == ["secrets.env"]  # no temporary file left
    assert scans and seen == [] and not recorder.leaked(SECRET)
    assert set(recorder.calls[0][1]) <= {"PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK"}
    assert SECRET not in sshd.log.read_text()


def test_put_file_keeps_the_mode_asked_for_and_replaces_the_old_content(sshd: Sshd, ssh_settings: Settings) -> None:
    access = ssh_access(rented(sshd.port), ssh_settings, user=sshd.user)
    access.put_file("/workspace/.gpuc/bin/python", b"#!/bin/sh\nexit 3\n", 0o755)
    access.put_file("/workspace/.gpuc/bin/python", b"#!/bin/sh\nexit 4\n", 0o755)
    target = sshd.sandbox / "sshpod01" / "workspace" / ".gpuc" / "bin" / "python"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755 and target.read_bytes().endswith(b"exit 4\n")
    with pytest.raises(ValueError, match="escapes"):
        access.put_file("../../etc/passwd", b"x")


def test_run_returns_the_exit_code_and_output_in_the_pods_environment(sshd: Sshd, ssh_settings: Settings) -> None:
    access = ssh_access(rented(sshd.port), ssh_settings, user=sshd.user)
    root = sshd.sandbox / "sshpod01"
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    # What a real platform injects into the container: a sandbox stands it in with container.env.
    (root / "container.env").write_text("RUNPOD_POD_ID=sshpod01\n")
    code, out = access.run(["sh", "-c", 'echo "$RUNPOD_POD_ID $GPUC_POD_ROOT $(pwd)"; echo oops >&2; exit 7'])
    assert code == 7
    assert out.splitlines() == [f"sshpod01 {root} {root / 'workspace'}", "oops"]
    code, out = access.run(["printf", "%s|", "two words", "it's", "$HOME"])
    assert (code, out) == (0, "two words|it's|$HOME|")


def test_the_host_key_is_pinned_per_pod_not_per_address(sshd: Sshd, ssh_settings: Settings) -> None:
    # RunPod hands a host's ip:port to the next pod on it: each pod's key is recorded under its own name.
    for pod_id in ("podone", "podtwo"):
        assert ssh_access(rented(sshd.port, pod_id), ssh_settings, user=sshd.user).run(["true"])[0] == 0
    known = ssh_settings.home / "known_hosts"
    assert len(known.read_text().splitlines()) == 2

    def lookup(name: str) -> int:
        return subprocess.run(["ssh-keygen", "-F", name, "-f", str(known)], capture_output=True).returncode

    assert (lookup("gpuc-podone"), lookup("gpuc-podtwo"), lookup(f"[127.0.0.1]:{sshd.port}")) == (0, 0, 1)


def test_spawn_outlives_the_ssh_session(sshd: Sshd, ssh_settings: Settings) -> None:
    access = ssh_access(rented(sshd.port), ssh_settings, user=sshd.user)
    assert isinstance(access, SshAccess)
    pid = access.start(["sleep", "120"], role="sleeper")
    try:
        time.sleep(0.3)  # the ssh session that started it has ended by now
        stat_fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        state, session = stat_fields[0], int(stat_fields[3])
        assert state in ("S", "R") and session == pid  # alive, leading a session of its own
        state_dir = sshd.sandbox / "sshpod01" / "workspace" / ".gpuc"
        assert (state_dir / "sleeper.pid").read_text().strip() == str(pid)
        assert (state_dir / "sleeper.out").exists()
    finally:
        os.kill(pid, signal.SIGKILL)
    with pytest.raises(ValueError):
        access.start(["true"], role="../evil")


def test_wait_for_ssh_returns_once_ssh_answers(sshd: Sshd, ssh_settings: Settings) -> None:
    access = ssh_access(rented(sshd.port), ssh_settings, user=sshd.user)
    lines: list[str] = []
    assert wait_for_ssh(access, clock=FakeClock(), progress=lines.append) == 0
    assert "up after" in lines[-1]


def test_wait_for_ssh_gives_up_after_its_bound_with_the_last_error(ssh_settings: Settings) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    access = ssh_access(rented(closed_port), ssh_settings)
    clock = FakeClock()
    lines: list[str] = []
    with pytest.raises(SshError, match="not ready after") as exc:
        wait_for_ssh(access, clock=clock, timeout_s=30, interval_s=5, progress=lines.append)
    assert "refused" in str(exc.value).lower() and exc.value.hint
    assert sum("waiting" in line for line in lines) == 7  # at 0, 5, ... 30 s: bounded, each one shown


def test_a_pod_without_an_address_or_a_key_is_a_clear_error(sshd: Sshd, ssh_settings: Settings) -> None:
    with pytest.raises(SshError, match="no public ssh address"):
        ssh_access(rented(sshd.port, host=None), ssh_settings)
    with pytest.raises(SshError, match="no ssh private key") as exc:
        ssh_access(rented(sshd.port), ssh_settings.with_overrides(ssh_key_path=Path("/nonexistent/id")))
    assert "GPUC_SSH_KEY_PATH" in str(exc.value.hint)


def test_a_rented_pod_uses_the_real_root(ssh_settings: Settings) -> None:
    access = ssh_access(rented(22), ssh_settings.with_overrides(ssh_sandbox_root=None))
    assert str(access.root) == "/" and not access.sandbox
    argv = access.ssh_argv("true")
    assert "export GPUC_POD_ROOT=/;" in argv[-1] and "container.env" not in argv[-1]
    assert argv[argv.index("-l") + 1] == "root"
    for option in ("BatchMode=yes", "PasswordAuthentication=no", "StrictHostKeyChecking=accept-new"):
        assert option in argv


class SlowProvider:
    """A provider whose pod gets its public port a few polls after RUNNING (as RunPod's does)."""

    def __init__(self, pod: Pod, polls: int) -> None:
        self.pod, self.polls = pod, polls

    def get(self, pod_id: str) -> Pod | None:
        self.polls -= 1
        return self.pod if self.polls <= 0 else dataclasses.replace(self.pod, ssh_host=None)


def test_waiting_for_the_ssh_address_polls_until_the_provider_has_it() -> None:
    pod = rented(2222)
    provider = SlowProvider(pod, polls=3)
    got = wait_for_ssh_endpoint(provider, dataclasses.replace(pod, ssh_port=None), clock=FakeClock())  # type: ignore[arg-type]
    assert got.ssh_port == 2222 and provider.polls == 0
    with pytest.raises(SshError, match="no public ssh address within"):
        wait_for_ssh_endpoint(SlowProvider(pod, 10**6), dataclasses.replace(pod, ssh_host=None), clock=FakeClock())  # type: ignore[arg-type]
