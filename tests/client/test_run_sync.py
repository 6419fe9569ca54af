"""`gpuc run --sync`: a kept pod runs today's code. The folder is checked here first, as
`up` checks it; it is never uploaded under a running job; and without --sync the pod keeps what it had."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, open_world, wait_for

STAMP = "print('code version', {n}, flush=True)\n"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def pod_id(world: World) -> str:
    (pod,) = world.provider().list_pods()
    return pod.id


def test_run_sync_uploads_the_changed_code_and_run_alone_does_not(world: World) -> None:
    (world.project / "ver.py").write_text(STAMP.format(n=1))
    assert world.gpuc("up", "fix", "-y").returncode == 0
    (world.project / "ver.py").write_text(STAMP.format(n=2))
    stale = world.gpuc("run", "fix", "--wait", "--", "python", "ver.py")
    assert stale.returncode == 0, stale.stderr
    assert "code version 1" in stale.stdout, "without --sync the pod keeps what `up` sent"
    assert wait_for(lambda: world.provider().list_pods() == [], timeout_s=30)  # that job's end ended the pod

    assert world.gpuc("up", "fix2", "-y").returncode == 0
    (world.project / "ver.py").write_text(STAMP.format(n=3))
    fresh = world.gpuc("run", "fix2", "--sync", "--wait", "--", "python", "ver.py")
    assert fresh.returncode == 0, fresh.stderr
    assert "code version 3" in fresh.stdout
    assert "project uploaded:" in fresh.stderr and "project uploaded:" not in fresh.stdout


def test_a_credential_in_the_folder_is_refused_before_the_pod_is_touched(world: World) -> None:
    (world.project / "ver.py").write_text(STAMP.format(n=1))
    assert world.gpuc("up", "fix", "-y").returncode == 0
    pod = pod_id(world)
    workspace = world.provider().paths(pod).workspace
    (world.project / "ver.py").write_text(STAMP.format(n=2))
    block = "OPENSSH PRIVATE " + "KEY-----"  # in two parts: the repository's own upload scan stays clean
    (world.project / "id_rsa").write_text(f"-----BEGIN {block}\nabc\n-----END {block}\n")
    refused = world.gpuc("run", "fix", "--sync", "--", "python", "ver.py")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "id_rsa" in refused.stderr
    assert (workspace / "ver.py").read_text() == STAMP.format(n=1), "nothing was uploaded"
    assert not (workspace / "id_rsa").exists()


def test_sync_is_refused_under_a_running_job_even_with_force(world: World) -> None:
    assert world.gpuc("up", "busy", "-y", "--", "python", "train.py", "0", "60").returncode == 0
    pod = pod_id(world)
    workspace = world.provider().paths(pod).workspace
    assert wait_for(lambda: "epoch 1" in world.gpuc("logs", "busy").stdout)
    (world.project / "train.py").write_text("print('changed under the job')\n")
    refused = world.gpuc("run", "busy", "--sync", "--force", "--", "python", "train.py")
    assert refused.returncode != 0 and "--sync would change the files under it" in refused.stderr
    assert "changed under the job" not in (workspace / "train.py").read_text()
