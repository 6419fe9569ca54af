"""A wrapper or agent started over ssh still finds the pod's own key. RunPod injects RUNPOD_API_KEY and
RUNPOD_POD_ID into the container's main process only (providers.md R7: "may be missing from SSH
shells"); Vast's CONTAINER_API_KEY and CONTAINER_ID "are not visible in SSH sessions unless exported"
(V7). Without the fallback to /proc/1/environ, every self-destroy of a job started by `gpuc run` fails
and the pod bills until the reaper's limit. End to end: the destroyer make_destroyer builds, from an
environment without the key, against the emulator served over real HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.providers import VAST_OFFER, spec

from gpuc.core.errors import ConfigError
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.selfdestroy import container_environ, make_destroyer
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator
from gpuc.testkit.podfakes import FakeProcTree

SSH_SHELL = {"PATH": "/usr/bin:/bin", "HOME": "/root", "SHELL": "/bin/bash"}  # what an ssh session has


def config(provider: str, pod_id: str) -> AgentConfig:
    return AgentConfig(pod_id=pod_id, provider=provider, experiment="exp", run_id="run0001", watchdog_url="http://x")


def container(tmp_path: Path, environ: dict[str, str]) -> Path:
    """A /proc whose PID 1 (the container's main process) holds what the platform injected."""
    proc = FakeProcTree(tmp_path / "proc")
    proc.add(1, "start.sh", ["/bin/bash", "/start.sh"], environ={**SSH_SHELL, **environ})
    return proc.root


def test_a_wrapper_over_ssh_self_destroys_a_runpod_pod_with_the_key_from_pid_1(
    tmp_path: Path, runpod: RunPodProvider, runpod_emu: RunPodEmulator, runpod_server: EmulatorServer
) -> None:
    pod = runpod.create(spec("runpod"))
    proc_root = container(tmp_path, runpod_emu.pod_environ(pod.id))
    own = {**SSH_SHELL, "GPUC_RUNPOD_GRAPHQL_URL": f"{runpod_server.url}/graphql"}
    destroyer = make_destroyer(config("runpod", pod.id), own, proc_root=proc_root)
    assert destroyer.destroy_self() == f"terminated pod {pod.id}"
    assert runpod_emu.alive() == []


def test_a_wrapper_over_ssh_self_destroys_a_vast_instance_with_the_key_from_pid_1(
    tmp_path: Path, vast: VastProvider, vast_emu: VastEmulator, vast_server: EmulatorServer
) -> None:
    pod = vast.create(spec("vast", offer_id=VAST_OFFER))
    proc_root = container(tmp_path, vast_emu.pod_environ(pod.id))
    own = {**SSH_SHELL, "GPUC_VAST_URL": f"{vast_server.url}/api/v0"}
    destroyer = make_destroyer(config("vast", pod.id), own, proc_root=proc_root)
    assert destroyer.destroy_self() == f"destroyed instance {pod.id}"
    assert vast_emu.alive() == []


def test_the_processs_own_key_wins_over_pid_1(tmp_path: Path, runpod_emu: RunPodEmulator) -> None:
    """An agent whose env has the key (bootstrap passed it on) uses it as it is."""
    proc_root = container(tmp_path, {"RUNPOD_POD_ID": "pod1", "RUNPOD_API_KEY": "stale"})
    own = {"RUNPOD_POD_ID": "pod2", "RUNPOD_API_KEY": "current"}
    destroyer = make_destroyer(config("runpod", "pod2"), own, proc_root=proc_root)
    assert getattr(destroyer, "pod_id", None) == "pod2"


def test_no_key_anywhere_says_where_it_should_have_been(tmp_path: Path) -> None:
    proc_root = container(tmp_path, {})
    with pytest.raises(ConfigError, match="RUNPOD_POD_ID and RUNPOD_API_KEY") as err:
        make_destroyer(config("runpod", "pod1"), SSH_SHELL, proc_root=proc_root)
    assert "main process" in (err.value.hint or "")


def test_pid_1_environ_is_read_as_the_kernel_writes_it(tmp_path: Path) -> None:
    proc = FakeProcTree(tmp_path / "proc")
    proc.add(1, "init", ["init"], environ={"A": "1", "B": "x=y", "EMPTY": ""})
    (proc.root / "1" / "environ").write_bytes((proc.root / "1" / "environ").read_bytes() + b"junk-without-equals\0")
    assert container_environ(proc.root) == {"A": "1", "B": "x=y", "EMPTY": ""}
    assert container_environ(tmp_path / "no-proc") == {}  # hidepid or no /proc: nothing, never a crash
