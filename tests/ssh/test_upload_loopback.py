"""The project upload, the command check and the job log over real ssh (loopback sshd): the rented-pod path.
The upload runs once the agent watches the pod and BEFORE the bootstrap, whose minutes a missing script
must not cost."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import POD_TOKEN, Sshd
from test_provision_loopback import Rented

from gpuc.client.context import Ctx
from gpuc.client.jobs.outcome_file import JobOutcome
from gpuc.client.jobs.podlog import read_pod_log
from gpuc.client.onpod.provision import ProvisionError, provision
from gpuc.client.onpod.script import put_project
from gpuc.client.onpod.ssh import SshAccess, ssh_access
from gpuc.client.onpod.upload import collect
from gpuc.client.pods.run import start_job
from gpuc.client.runs import RunStore
from gpuc.core.clock import SystemClock
from gpuc.core.errors import ConfigError
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.podinstall import Installer
from gpuc.core.podpaths import PodPaths
from gpuc.core.providers.base import PodAccess
from gpuc.core.settings import Settings

pytestmark = pytest.mark.sshd
POD_ID = "loopup01"


@pytest.fixture
def pod_paths(sshd: Sshd) -> Iterator[PodPaths]:
    paths = PodPaths(sshd.sandbox / POD_ID)
    yield paths
    for lock in (paths.agent_lock, paths.state / "job.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(lock.read_text().split()[0]), signal.SIGTERM)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text("import sys\nprint('loss 0.1')\nprint('warn', file=sys.stderr)\nsys.exit(5)\n")
    return root


def rented(sshd: Sshd, settings: Settings, watchdog_url: str) -> tuple[SshAccess, Pod, PodSpec, Ctx]:
    settings = settings.with_overrides(watchdog_url=watchdog_url)
    pod = Pod(
        provider="runpod", id=POD_ID, name="gpuc-run0002", status="running", ssh_host="127.0.0.1", ssh_port=sshd.port
    )
    spec = PodSpec(experiment="exp", run_id="run0002", provider="runpod", gpu_type="RTX 4090")
    deps = Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=SystemClock(),
        echo=lambda _: None,
        watchdog=cast(Any, object()),  # provisioning never calls the watchdog
        providers={"runpod": Rented()},
    )
    return ssh_access(pod, settings, user=sshd.user), pod, spec, deps


def project_for(command: list[str], project: Path) -> Callable[[PodAccess], None]:
    bundle = collect(project)
    return lambda access: put_project(access, bundle, command, lambda _: None)


def test_a_missing_script_stops_provisioning_before_the_bootstrap(
    sshd: Sshd, ssh_settings: Settings, watchdog_url: str, pod_paths: PodPaths, project: Path
) -> None:
    access, pod, spec, deps = rented(sshd, ssh_settings, watchdog_url)
    with pytest.raises(ConfigError, match=f"trian.py not in the job's folder {pod_paths.workspace}"):
        provision(
            access,
            pod,
            spec,
            deps,
            {},
            POD_TOKEN,
            installer=Installer(sys.executable),
            verify=False,
            before_bootstrap=project_for([sys.executable, "trian.py"], project),
        )
    assert (pod_paths.workspace / "train.py").exists(), "uploaded over ssh"
    assert not pod_paths.bootstrap_csv.exists(), "the bootstrap never ran"


def test_the_job_log_and_outcome_are_read_over_ssh(
    sshd: Sshd, ssh_settings: Settings, watchdog_url: str, pod_paths: PodPaths, project: Path
) -> None:
    access, pod, spec, deps = rented(sshd, ssh_settings, watchdog_url)
    provision(
        access,
        pod,
        spec,
        deps,
        {},
        POD_TOKEN,
        installer=Installer(sys.executable),
        verify=False,
        bootstrap=False,
        before_bootstrap=project_for([sys.executable, "train.py"], project),
    )
    start_job(access, [sys.executable, "train.py"], "job-ssh")
    deadline = time.monotonic() + 60
    read = read_pod_log(access, 0)
    while getattr(read.outcome, "exit_code", None) is None and time.monotonic() < deadline:
        time.sleep(0.2)
        read = read_pod_log(access, 0)
    assert isinstance(read.outcome, JobOutcome), read.outcome
    assert (read.outcome.exit_code, read.outcome.job_id) == (5, "job-ssh")
    assert read.data == b"loss 0.1\nwarn\n" and read.size == len(read.data)
    assert read_pod_log(access, 9).data == b"warn\n", "from an offset"


# A requirements.txt that did not install started the job anyway; it died on its first import and
# the pod sat idle, billed, until the idle watch. Over real ssh, the real bootstrap on the pod.
def test_requirements_that_fail_to_install_stop_the_job_with_the_error(
    sshd: Sshd, ssh_settings: Settings, watchdog_url: str, pod_paths: PodPaths, project: Path
) -> None:
    (project / "requirements.txt").write_text("numpy\n")  # unpinned: the bootstrap refuses it, offline
    access, pod, spec, deps = rented(sshd, ssh_settings.with_overrides(bootstrap_torch="skip"), watchdog_url)
    with pytest.raises(
        ProvisionError, match="requirements did not install on the pod, so the job was not started"
    ) as refused:
        provision(
            access,
            pod,
            spec,
            deps,
            {},
            POD_TOKEN,
            installer=Installer(sys.executable),
            verify=False,
            before_bootstrap=project_for([sys.executable, "train.py"], project),
            job_needs_deps=True,
        )
    assert "unpinned requirements in requirements.txt: numpy" in refused.value.message
    assert refused.value.hint and "destroyed" in refused.value.hint
    # Without a job to start (`up NAME` alone), the pod stays for the user to fix, as before.
    report = provision(
        access,
        pod,
        spec,
        deps,
        {},
        POD_TOKEN,
        installer=Installer(sys.executable),
        verify=False,
        before_bootstrap=project_for([], project),
    )
    assert report.bootstrap_ok is False and report.deps_failed and "numpy" in report.deps_failed
