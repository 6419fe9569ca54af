"""ssh's exit 255 with nothing printed: the session ended without the command's exit status (the connection
closed or timed out, or the command was killed, as when the watchdog destroys a pod mid-install). At
LogLevel=ERROR ssh says nothing for these, so gpuc must: "exit 255: no output" told the user nothing.

And the retry rule: a command that only looks (`read`: verify, a listing, a probe) is tried again when ssh
failed before it printed anything; one that acts (`run`, `start`, `put_file`) never is, whatever ssh said."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from conftest import Sshd

from gpuc.client.onpod.provision import PodVerificationFailed, verify_pod
from gpuc.client.onpod.ssh import (
    READ_ATTEMPTS,
    READ_RETRY_PAUSE_S,
    SILENT_FAILURE,
    SshAccess,
    SshError,
    SshResult,
    SshTarget,
    ssh_access,
)
from gpuc.core.pod import Pod
from gpuc.core.settings import Settings


class Scripted:
    """A runner that answers the ssh calls in turn (the last answer repeats), counting the calls."""

    def __init__(self, *results: SshResult) -> None:
        self.results = list(results)
        self.calls = 0

    def __call__(self, argv: list[str], stdin: bytes | None, timeout_s: float, env: Mapping[str, str]) -> SshResult:
        self.calls += 1
        return self.results[min(self.calls, len(self.results)) - 1]


def access(runner: Scripted, tmp_path: Path, pauses: list[float] | None = None) -> SshAccess:
    target = SshTarget("203.0.113.7", 22022, tmp_path / "key", tmp_path / "known_hosts", "gpuc-pod1")
    return SshAccess(target, runner=runner, sleep=(pauses if pauses is not None else []).append)


SILENT = SshResult(255, b"", b"")


def test_a_silent_255_says_what_it_means_in_every_step(tmp_path: Path) -> None:
    pod = access(Scripted(SILENT), tmp_path)
    assert pod.run(["python", "-m", "gpuc.instance_side", "bootstrap"]) == (255, SILENT_FAILURE)
    with pytest.raises(SshError, match="ssh exited 255 and printed nothing") as upload:
        pod.put_file("workspace/.gpuc/config.json", b"{}")
    assert "was the pod destroyed or restarted?" in upload.value.message
    with pytest.raises(SshError, match="ssh exited 255 and printed nothing"):
        pod.start(["python", "-m", "gpuc.instance_side", "agent"], "agent")
    with pytest.raises(PodVerificationFailed) as verify:
        verify_pod(pod, "NVIDIA GeForce RTX 4090")
    assert verify.value.message == f"verification gave no verdict (exit 255): {SILENT_FAILURE}"


def test_what_acts_is_never_run_twice_whatever_ssh_exits(tmp_path: Path) -> None:
    """A 255 may come after the pod acted (the agent started, the sync ran): a second try is a second act.
    Each act meets a failure that a second try would get past, and is not tried again."""
    refused = SshResult(255, b"", b"ssh: connect to host 203.0.113.7 port 22022: Connection refused\n")
    acts: list[Callable[[SshAccess], object]] = [
        lambda pod: pod.run(["python", "-m", "gpuc.instance_side", "sync"]),
        lambda pod: pod.start(["python", "-m", "gpuc.instance_side", "agent"], "agent"),
        lambda pod: pod.spawn(["python", "job.py"], "job"),
        lambda pod: pod.put_file("workspace/.gpuc/config.json", b"{}"),
    ]
    for failed in (SILENT, refused):
        for act in acts:
            pauses: list[float] = []
            runner = Scripted(failed, SshResult(0, b"4242\n", b""))
            with contextlib.suppress(SshError):
                act(access(runner, tmp_path, pauses))
            assert runner.calls == 1 and pauses == []


def test_a_read_is_tried_again_when_ssh_failed_before_it_printed(tmp_path: Path) -> None:
    verdict = SshResult(0, b'{"ok": true}\n', b"")
    dropped = SshResult(255, b"", b"kex_exchange_identification: Connection closed by remote host\n")
    pauses: list[float] = []
    runner = Scripted(SILENT, dropped, verdict)
    assert access(runner, tmp_path, pauses).read(["python", "-m", "gpuc.instance_side", "verify"]) == (
        0,
        '{"ok": true}\n',
    )
    assert runner.calls == 3 and pauses == [READ_RETRY_PAUSE_S] * 2
    pauses = []  # a pod that stays unreachable: a bounded number of tries
    runner = Scripted(SILENT)
    assert access(runner, tmp_path, pauses).read(["cat", "marker"]) == (255, SILENT_FAILURE)
    assert runner.calls == READ_ATTEMPTS and len(pauses) == READ_ATTEMPTS - 1


def test_a_read_that_answered_is_not_tried_again(tmp_path: Path) -> None:
    """The command ran and spoke (its own exit 255, or any other failure): a second try would say the same."""
    for answered in (SshResult(255, b"the job's own exit 255\n", b""), SshResult(1, b"", b"no such file\n")):
        pauses: list[float] = []
        runner = Scripted(answered, SshResult(0, b"", b""))
        assert access(runner, tmp_path, pauses).read(["cat", "marker"])[0] == answered.code
        assert runner.calls == 1 and pauses == []


def test_what_ssh_or_the_command_did_print_is_kept(tmp_path: Path) -> None:
    refused = SshResult(255, b"", b"ssh: connect to host 203.0.113.7 port 22022: Connection refused\n")
    assert "Connection refused" in access(Scripted(refused), tmp_path).run(["true"])[1]
    own = SshResult(255, b"the job's own exit 255\n", b"")  # a command may exit 255 itself
    assert access(Scripted(own), tmp_path).run(["sh", "-c", "exit 255"]) == (255, "the job's own exit 255\n")
    assert access(Scripted(SshResult(1, b"", b"")), tmp_path).run(["false"]) == (1, "")


@pytest.mark.sshd
def test_a_command_killed_on_the_pod_is_named_through_the_real_ssh(sshd: Sshd, ssh_settings: Settings) -> None:
    pod = Pod(
        provider="runpod",
        id="silent01",
        name="gpuc-silent01",
        status="running",
        ssh_host="127.0.0.1",
        ssh_port=sshd.port,
    )
    remote = ssh_access(pod, ssh_settings, user=sshd.user)
    assert remote.run(["sh", "-c", "kill -9 $$"]) == (255, SILENT_FAILURE)
