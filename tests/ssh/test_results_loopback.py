"""`gpuc results` over real ssh (loopback sshd): the pod's half (gpuc.instance_side.resultscopy, run by
the pod's own gpuc install) lists and streams results/ and the job's log; the laptop extracts them
safely and checks every name and size before anything could be destroyed."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import Sshd
from test_provision_loopback import Rented

from gpuc.client.context import Ctx
from gpuc.client.jobs.copyout import What
from gpuc.client.jobs.results import NOT_COPIED, copy_results, fetcher
from gpuc.client.onpod.bundle import build_bundle
from gpuc.client.onpod.provision import install_code
from gpuc.client.onpod.ssh import SshAccess, ssh_access
from gpuc.client.runs import RunStore
from gpuc.core.clock import SystemClock
from gpuc.core.errors import GpucError
from gpuc.core.pod import Pod
from gpuc.core.podinstall import Installer
from gpuc.core.podpaths import PodPaths
from gpuc.core.settings import Settings

pytestmark = pytest.mark.sshd
POD_ID = "loopres1"


def reach(sshd: Sshd, settings: Settings) -> tuple[SshAccess, Pod, Ctx]:
    pod = Pod(
        provider="runpod", id=POD_ID, name="gpuc-run0003", status="running", ssh_host="127.0.0.1", ssh_port=sshd.port
    )
    deps = Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=SystemClock(),
        echo=lambda _: None,
        watchdog=cast(Any, object()),
        providers={"runpod": Rented()},
    )
    access = ssh_access(pod, settings, user=sshd.user)
    install_code(access, build_bundle(), Installer(sys.executable), lambda _: None)
    return access, pod, deps


def test_results_come_over_ssh_whole_and_verified(sshd: Sshd, ssh_settings: Settings, tmp_path: Path) -> None:
    access, pod, deps = reach(sshd, ssh_settings)
    paths = PodPaths(sshd.sandbox / POD_ID)
    (paths.results / "ckpt").mkdir(parents=True, exist_ok=True)
    weights = os.urandom(2_000_000)
    (paths.results / "ckpt" / "weights bin").write_bytes(weights)  # a space: nothing goes through a shell
    os.symlink("ckpt/weights bin", paths.results / "latest")
    os.symlink("/root/.cache/rotated", paths.results / "stale")  # dangling and outside: written down
    paths.job_log.write_text("step 100 loss 0.2\n")
    dest = tmp_path / "copied"
    copy_results(access, fetcher(access, Rented(), pod), dest, deps)
    assert (dest / "results" / "ckpt" / "weights bin").read_bytes() == weights
    assert not (dest / "results" / "latest").is_symlink(), "no link is made from what a pod sends"
    assert (dest / "logs" / "job.log").read_text() == "step 100 loss 0.2\n"
    written = (dest / NOT_COPIED).read_text()
    assert "results/stale -> /root/.cache/rotated" in written and "results/latest -> ckpt/weights bin" in written


def test_a_copy_cut_short_over_ssh_is_refused(sshd: Sshd, ssh_settings: Settings, tmp_path: Path) -> None:
    access, pod, deps = reach(sshd, ssh_settings)
    paths = PodPaths(sshd.sandbox / POD_ID)
    paths.results.mkdir(parents=True, exist_ok=True)
    (paths.results / "big.bin").write_bytes(b"\0" * 100_000)
    real = fetcher(access, Rented(), pod)

    def grows_meanwhile(out: Any, timeout_s: float) -> None:
        (paths.results / "big.bin").write_bytes(b"\0" * 10)  # not what the listing said
        real(out, timeout_s)

    with pytest.raises(GpucError, match="does not match the pod"):
        copy_results(access, grows_meanwhile, tmp_path / "copied", deps)
    assert not (tmp_path / "copied").exists()


def test_cp_from_the_pod_over_ssh_names_one_path_and_refuses_a_way_out(
    sshd: Sshd, ssh_settings: Settings, tmp_path: Path
) -> None:
    """`gpuc cp POD:PATH` rides the same verified copy, the pod naming one path of its workspace."""
    access, pod, deps = reach(sshd, ssh_settings)
    paths = PodPaths(sshd.sandbox / POD_ID)
    (paths.workspace / "ckpt").mkdir(parents=True, exist_ok=True)
    (paths.workspace / "ckpt" / "step 9.pt").write_bytes(b"w" * 5000)
    what = What.workspace_path("ckpt", POD_ID)
    copy_results(access, fetcher(access, Rented(), pod, what), tmp_path / "got", deps, what)
    assert (tmp_path / "got" / "ckpt" / "step 9.pt").read_bytes() == b"w" * 5000
    out = What.workspace_path("../secrets.env", POD_ID)
    with pytest.raises(GpucError, match="is not a path inside the workspace"):
        copy_results(access, fetcher(access, Rented(), pod, out), tmp_path / "nope", deps, out)
    assert not (tmp_path / "nope").exists()
