"""Stop and resume (F16): a kept pod stops itself with its own key, and `gpuc results` resumes it with the
account key, against the emulators, as strict as the reference (providers.md R4/R7, V4/V7): RunPod
releases the GPU on stop and may bring the pod back with zero GPUs; Vast restarts an instance only on its
own machine and waits ("scheduling") while that machine's GPUs are taken."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.providers import spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import NotFound, ProviderError
from gpuc.core.models import PodSpec
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.local import LocalProvider, LocalSelfDestroyer
from gpuc.core.providers.podkey import RunPodSelfDestroyer, VastSelfDestroyer
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator

OFFER = "11684738"
GPU_ID = "NVIDIA GeForce RTX 4090"


def running(provider: RunPodProvider | VastProvider, pod_id: str) -> str:
    """Read it until it runs (the emulators boot a pod after a few reads); its status then."""
    status = "?"
    for _ in range(5):
        pod = provider.get(pod_id)
        assert pod is not None
        status = pod.status
        if status == "running":
            break
    return status


# -- RunPod ---------------------------------------------------------------------------------------------
def test_runpod_self_stop_uses_the_pod_key_and_keeps_the_volume(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    running(runpod, pod.id)
    stopper = RunPodSelfDestroyer.from_environ(
        runpod_emu.pod_environ(pod.id), send=runpod_emu.pod_send(), clock=FakeClock()
    )
    said = stopper.stop_self()
    assert "stopped pod" in said and "/workspace" in said
    seen = runpod.get(pod.id)
    assert seen is not None and seen.status == "stopped"
    assert seen.disk_gb == 30 and seen.disk_usd_gb_month == 0.20  # the volume, at RunPod's stopped price
    assert [r.op for r in runpod_emu.requests if r.op == "destroy"] == []


def test_runpod_resume_takes_the_gpu_back_or_comes_back_with_none(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    running(runpod, pod.id)
    runpod.stop(pod.id)
    runpod.start(pod.id)
    assert running(runpod, pod.id) == "running"
    again = runpod.get(pod.id)
    assert again is not None and again.gpu_count == 1
    runpod.stop(pod.id)
    runpod_emu.set_stock(GPU_ID, 0)  # someone else rented the machine's GPU meanwhile
    runpod.start(pod.id)
    assert running(runpod, pod.id) == "running"
    bare = runpod.get(pod.id)
    assert bare is not None and bare.gpu_count == 0  # RunPod's docs: enough to read the volume


def test_runpod_resume_needs_the_account_key(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    """The pod key may stop its own pod (documented), not resume it: only the laptop resumes (`gpuc results`)."""
    pod = runpod.create(spec("runpod"))
    runpod.stop(pod.id)
    own = RunPodProvider(
        runpod_emu.pod_environ(pod.id)["RUNPOD_API_KEY"],
        rest_url=runpod.rest_url,
        transport=runpod_emu.transport(),
        backoff=zero_backoff,
    )
    with pytest.raises(ProviderError, match="access denied"):  # REST v2: 403 to a pod-scoped key
        own.start(pod.id)
    assert runpod_emu.pods[pod.id].state == "exited"


def test_runpod_resume_of_a_gone_pod_says_so(runpod: RunPodProvider) -> None:
    pod = runpod.create(spec("runpod"))
    runpod.destroy(pod.id)
    with pytest.raises(NotFound, match="no longer exists"):
        runpod.start(pod.id)


# -- Vast -----------------------------------------------------------------------------------------------
def test_vast_self_stop_uses_the_instance_key(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    stopper = VastSelfDestroyer.from_environ(vast_emu.pod_environ(pod.id), send=vast_emu.pod_send(), clock=FakeClock())
    assert "stopped instance" in stopper.stop_self()
    seen = vast.get(pod.id)
    assert seen is not None and seen.status == "stopped"
    assert seen.disk_gb is not None and seen.disk_usd_gb_month == 0.15
    assert vast_emu.alive() != []


def test_vast_start_waits_in_scheduling_while_its_machine_is_taken(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    running(vast, pod.id)
    vast.stop(pod.id)
    vast_emu.occupy_machine(pod.id)
    vast.start(pod.id)
    for _ in range(5):
        waiting = vast.get(pod.id)
        assert waiting is not None and waiting.status == "provisioning" and "scheduling" in waiting.raw_status
    vast_emu.free_machine(pod.id)
    assert running(vast, pod.id) == "running"


# -- local ----------------------------------------------------------------------------------------------
def test_local_stop_keeps_the_disk_and_start_brings_it_back(tmp_path: Path, clock: FakeClock) -> None:
    home = tmp_path / "home"
    provider = LocalProvider(home, Settings(home=home, local_boot_s=0.0), clock=clock)
    pod = provider.create(PodSpec(experiment="exp", run_id="run-kept1", provider="local", gpu_type="RTX 4090"))
    results = provider.paths(pod.id).results
    results.mkdir(parents=True)
    (results / "model.bin").write_bytes(b"w" * 10)
    said = LocalSelfDestroyer({"GPUC_LOCAL_HOME": str(home), "GPUC_POD_ID": pod.id}).stop_self()
    assert "stopped" in said
    assert provider.get(pod.id).status == "stopped"  # type: ignore[union-attr]
    assert (results / "model.bin").read_bytes() == b"w" * 10
    provider.start(pod.id)
    assert provider.get(pod.id).status == "running"  # type: ignore[union-attr]
    provider.destroy(pod.id)
    with pytest.raises(NotFound):
        provider.start(pod.id)
