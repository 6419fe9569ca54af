"""Each ending of a `--wait` has its own exit code (client/exits.py), said when it happens: a pod ended
under its job (idle, deadline, the phone) is not "the outcome could not be learnt" (125), and a job that
exited 0 on a pod KEPT for a failed sync is not "the job failed" (1). The real CLI against local pods."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, only_run, open_world, wait_for

from gpuc.client.exits import ENDED_EXITS, EXIT_CODES_HELP, KEPT_SYNC_FAILED_EXIT
from gpuc.client.jobs.follow import follow
from gpuc.core.podpaths import PodPaths
from gpuc.instance_side.joblog import note_pod_end, read_outcome

HANG = ("python", "-c", "import time; time.sleep(600)")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def test_a_job_ended_idle_exits_with_the_idle_code_and_says_so_first(world: World) -> None:
    done = world.gpuc("up", "hung", "-y", "--wait", "--", *HANG, GPUC_IDLE_WARN_S="1", GPUC_IDLE_DESTROY_S="2")
    assert done.returncode == ENDED_EXITS["idle_destroy"] == 122, done.stderr
    last = done.stderr.splitlines()[-1]
    assert "did not finish: the pod's agent ended it, idle" in last and "$" in last, done.stderr
    assert world.provider().list_pods() == []


def test_a_job_ended_at_its_deadline_exits_with_the_deadline_code(world: World) -> None:
    # The agent starts the ending LEAD ahead of the deadline, where the reaper acts: 8 s for the sync, the
    # notice and the destroy even at load 15 on 2 cores (1 s was not, and the reaper's destroy left no outcome).
    done = world.gpuc("up", "late", "-y", "--max-hours", "20s", "--wait", "--", *HANG, GPUC_DEADLINE_LEAD_S="8")
    assert done.returncode == ENDED_EXITS["deadline_destroy"] == 121, done.stderr
    assert "did not finish: the pod's agent ended it at its deadline" in done.stderr.splitlines()[-1]


def test_a_job_that_exited_0_on_a_kept_pod_exits_with_the_kept_code(world: World) -> None:
    done = world.gpuc("up", "exp", "--wait", "--", "python", "train.py", "0", GPUC_RESULTS_BUCKET="nowhere://b")
    assert done.returncode == KEPT_SYNC_FAILED_EXIT == 120, done.stderr
    assert "job exited with code 0" in done.stderr and "results sync FAILED" in done.stderr
    assert [p.id for p in world.provider().list_pods()] == [only_run(world).pod_id]


def test_the_codes_are_in_the_help_of_up_and_run(world: World) -> None:
    for command in ("up", "run"):
        shown = " ".join(world.gpuc(command, "--help").stdout.split())
        assert " ".join(EXIT_CODES_HELP.split()) in shown


def test_the_wait_says_the_pod_is_ending_under_the_job_when_it_starts_to(world: World) -> None:
    """Said as it happens (the outcome on the pod names who ends it, before the sync), not once it is gone."""
    assert world.gpuc("up", "hung", "-y", "--", *HANG).returncode == 0
    run = only_run(world)
    deps = world.deps()
    pod = deps.provider("local").get(run.pod_id)
    assert pod is not None
    paths = PodPaths(world.provider().paths(pod.id).root)
    assert wait_for(lambda: read_outcome(paths) is not None, timeout_s=30), "the job started"
    note_pod_end(paths, "deadline_destroy", "deadline 2026-12-05T04:00:00Z (--max-hours) in 2 min")
    told: list[str] = []
    state = follow(deps, pod, job_id=None, out=io.BytesIO(), timeout_s=3, poll_s=0.2, tell=told.append)
    assert state.stopped == "timeout", "the pod still lives: the wait goes on"
    assert told == [
        "the job did not finish: the pod's agent ended it at its deadline (deadline 2026-12-05T04:00:00Z"
        " (--max-hours) in 2 min): the pod syncs results/, then is destroyed"
    ], told
