"""The whole provisioning path over ssh on loopback: upload the wheel, install it (offline), config and
secrets, the agent first (it heartbeats to a loopback functions stub), the bootstrap, the verdict.
This machine has no GPU, so a pod rented as an RTX 4090 fails verification and says why."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import POD_TOKEN, Functions, Sshd

from gpuc.client.context import Ctx
from gpuc.client.onpod.provision import PodVerificationFailed, PythonMissing, provision
from gpuc.client.onpod.ssh import SshResult, ssh_access, subprocess_runner
from gpuc.client.runs import RunStore
from gpuc.core.clock import SystemClock
from gpuc.core.models import Balance, PodSpec
from gpuc.core.pod import Pod
from gpuc.core.podinstall import Installer
from gpuc.core.podpaths import PodPaths
from gpuc.core.providers.base import DestroyResult, Provider
from gpuc.core.settings import Settings
from gpuc.instance_side.bootstrap import read_csv

HF = "hf_" + "LoopbackToken" * 3
GIT = "ghp_" + "LoopbackGit" * 3
POD_ID = "loop01"

pytestmark = pytest.mark.sshd


class Rented(Provider):
    """Stands in for RunPod: provisioning asks it nothing but its name."""

    name = "runpod"

    def create(self, spec: PodSpec) -> Pod:
        raise AssertionError("not called")

    def get(self, pod_id: str) -> Pod | None:
        raise AssertionError("not called")

    def list_pods(self) -> list[Pod]:
        raise AssertionError("not called")

    def stop(self, pod_id: str) -> None:
        raise AssertionError("not called")

    def destroy(self, pod_id: str) -> DestroyResult:
        raise AssertionError("not called")

    def balance(self) -> Balance:
        raise AssertionError("not called")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, argv: list[str], stdin: bytes | None, timeout_s: float, env: Mapping[str, str]) -> SshResult:
        self.calls.append((list(argv), dict(env)))
        return subprocess_runner(argv, stdin, timeout_s, env)


@pytest.fixture
def pod_paths(sshd: Sshd) -> Iterator[PodPaths]:
    paths = PodPaths(sshd.sandbox / POD_ID)
    yield paths
    # The agent was started detached on the "pod": stop it by the pid it wrote, whatever happened.
    with contextlib.suppress(OSError, ValueError):
        pid = int(paths.agent_lock.read_text().strip())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def wait_for(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)


def test_provision_installs_starts_the_agent_first_bootstraps_and_verifies(
    sshd: Sshd, ssh_settings: Settings, watchdog_url: str, pod_paths: PodPaths
) -> None:
    settings = ssh_settings.with_overrides(watchdog_url=watchdog_url)
    pod = Pod(
        provider="runpod",
        id=POD_ID,
        name="gpuc-run0001",
        status="running",
        ssh_host="127.0.0.1",
        ssh_port=sshd.port,
        gpu="NVIDIA GeForce RTX 4090",
    )
    spec = PodSpec(experiment="exp", run_id="run0001", provider="runpod", gpu_type="RTX 4090")
    echoed: list[str] = []
    deps = Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=SystemClock(),
        echo=echoed.append,
        watchdog=cast(Any, object()),  # provisioning never calls the watchdog
        providers={"runpod": Rented()},
    )
    recorder = Recorder()
    access = ssh_access(pod, settings, runner=recorder, user=sshd.user)
    installer = Installer(sys.executable)
    secrets = {"HF_TOKEN": HF, "GPUC_GIT_TOKEN": GIT}

    # No GPU here: the pod "rented as an RTX 4090" fails verification, with the reason.
    with pytest.raises(PodVerificationFailed, match="rented 'RTX 4090' but no GPU is visible") as exc:
        provision(access, pod, spec, deps, secrets, POD_TOKEN, installer=installer)
    assert exc.value.hint and "destroyed" in exc.value.hint

    # The agent started before the bootstrap and verification, from the uploaded code, and heartbeats.
    wait_for(lambda: len(Functions.heartbeats) >= 2)
    assert len(Functions.heartbeats) >= 2 and Functions.heartbeats[-1].pod_id == POD_ID
    assert "agent_start" not in [e.kind for e in Functions.events]  # not pushed unless GPUC_NOTIFY_START=1
    agent_pid = int(pod_paths.agent_lock.read_text().strip())
    environ = Path(f"/proc/{agent_pid}/environ").read_bytes().split(b"\0")
    assert f"PYTHONPATH={pod_paths.code / 'site'}".encode() in environ
    code, out = access.run(["python", "-c", "import gpuc.instance_side.agent as a; print(a.__file__)"])
    assert code == 0 and out.strip().startswith(str(pod_paths.code / "site"))

    # Config and secrets as files, mode 600; the bootstrap ran and timed its steps.
    assert stat.S_IMODE(pod_paths.secrets.stat().st_mode) == 0o600
    assert stat.S_IMODE(pod_paths.config.stat().st_mode) == 0o600
    first = {step: status for step, _, status in read_csv(pod_paths.bootstrap_csv)}
    assert first["hf_login"] == "ok" and first["git"] == "not-configured" and first["system"] == "not-configured"
    assert (pod_paths.hf_home / "token").read_text() == HF
    assert stat.S_IMODE((pod_paths.hf_home / "token").stat().st_mode) == 0o600
    assert pod_paths.verdict.exists() and any("verify gpu_name: fail" in line for line in echoed)

    # Again: nothing to install, the same agent keeps running, done steps are skipped.
    report = provision(access, pod, spec, deps, secrets, POD_TOKEN, installer=installer, verify=False)
    assert not report.installed and report.agent_pid == agent_pid
    second = {step: status for step, _, status in read_csv(pod_paths.bootstrap_csv)}
    assert second["hf_login"] == "skipped"
    assert any("already installed" in line for line in echoed)
    # Every number on the install lines says what it is: the bundle's size and its sha256, never a bare hash.
    for line in (x for x in echoed if "installed on the pod" in x):
        assert re.search(r"sha256 [0-9a-f]{12}", line), line
        for bare in re.findall(r"\b[0-9a-f]{12}\b", line):
            assert f"sha256 {bare}" in line, line

    # No secret in any ssh argv or environment, in what was printed, or in any log.
    for secret in (HF, GIT, POD_TOKEN):
        assert not any(secret in " ".join(argv) or secret in " ".join(env.values()) for argv, env in recorder.calls)
        assert not any(secret in line for line in echoed)
        for log in (sshd.log, pod_paths.log, pod_paths.bootstrap_log, pod_paths.state / "agent.out"):
            assert secret not in log.read_text(errors="replace"), log


@pytest.mark.parametrize(
    ("python", "found"),
    [("/nonexistent/python3", "none"), ("/root/.pyenv/versions/3.8.18/bin/python3.8", "3.8.18")],
    ids=["no-python", "python-3.8"],
)
def test_an_image_without_a_usable_python_is_told_before_anything_is_installed(
    sshd: Sshd, ssh_settings: Settings, python: str, found: str
) -> None:
    if found != "none" and not os.access(python, os.X_OK):
        pytest.skip(f"no {python} on this machine: the too-old case needs one")
    pod_id = "nopy-" + found.replace(".", "")  # a pod of its own: never one gpuc was installed on before
    pod_paths = PodPaths(sshd.sandbox / pod_id)
    pod = Pod(provider="runpod", id=pod_id, name="gpuc-run0001", status="running", ssh_host="127.0.0.1",
              ssh_port=sshd.port)  # fmt: skip
    spec = PodSpec(experiment="exp", run_id="run0001", provider="runpod", gpu_type="RTX 4090")
    echoed: list[str] = []
    deps = Ctx(settings=ssh_settings, runs=RunStore(ssh_settings.home), clock=SystemClock(), echo=echoed.append,
               watchdog=cast(Any, object()), providers={"runpod": Rented()})  # fmt: skip
    access = ssh_access(pod, ssh_settings, runner=Recorder(), user=sshd.user)
    with pytest.raises(PythonMissing) as exc:
        provision(access, pod, spec, deps, {}, POD_TOKEN, installer=Installer(python))
    said = str(exc.value)
    assert "no python3 gpuc's pod side can run on" in said and (found in said if found != "none" else True)
    assert exc.value.hint and "destroyed" in exc.value.hint and "python3 >= 3.9" in exc.value.hint
    assert not pod_paths.python.exists() and not pod_paths.agent_lock.exists()  # nothing installed, nothing run
