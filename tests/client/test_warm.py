"""`gpuc up NAME --warm 30m`: a pod to iterate on. A job's end syncs and notifies but keeps the pod;
`gpuc run POD --sync --wait` after an edit reruns today's code on it, and keeps it warm; idle for the warm
time, it syncs and ends itself; `down` ends it. The real CLI against local pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, only_run, open_world, wait_for


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def test_edit_and_rerun_on_a_warm_pod_then_down(world: World) -> None:
    first = world.gpuc("up", "exp", "-y", "--warm", "30m", "--wait", "--", "python", "train.py", "0")
    assert first.returncode == 0, first.stderr
    assert "job exited with code 0" in first.stderr and "gpuc run" in first.stderr and "--sync --wait" in first.stderr
    pod_id = only_run(world).pod_id
    assert [p.id for p in world.provider().list_pods()] == [pod_id], "kept warm, not destroyed"
    assert (world.home / "results" / "exp" / only_run(world).run_id / "metrics.json").exists(), "synced first"
    for code in (3, 4):  # edit -> rerun, twice: today's code each time, the same pod
        (world.project / "train.py").write_text(f"import sys\nprint('edit {code}')\nsys.exit({code})\n")
        again = world.gpuc("run", pod_id, "--sync", "--wait", "--", "python", "train.py")
        assert again.returncode == code, again.stderr
        assert f"edit {code}\n" in again.stdout
        assert [p.id for p in world.provider().list_pods()] == [pod_id], "run on a warm pod keeps it warm"
    assert world.gpuc("down", pod_id).returncode == 0
    assert world.provider().list_pods() == []


def test_a_warm_pod_left_idle_ends_itself_after_the_warm_time(world: World) -> None:
    done = world.gpuc("up", "exp", "-y", "--warm", "3s", "--wait", "--", "python", "train.py", "0")
    assert done.returncode == 0, done.stderr
    assert world.provider().list_pods() != [], "kept after the job"
    assert wait_for(lambda: world.provider().list_pods() == [], timeout_s=60), "idle for 3s: ended by its agent"
