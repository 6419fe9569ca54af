"""A job that never exited (idle, deadline, the phone's destroy now): the outcome synced before the destroy
says who ended the pod and why, and the laptop says it, instead of only "the job did not finish"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, open_world, wait_for

from gpuc.client.jobs.outcome_file import BadOutcome, outcome_from, parse_outcome
from gpuc.core.podjson import Unreadable
from gpuc.instance_side.joblog import OUTCOME_FORMAT, note_pod_end, read_outcome, write_outcome
from gpuc.instance_side.podfiles import PodPaths

RUNNING = {"job_id": "j1", "started_at": 1.8e9, "exit_code": None}


def test_an_idle_end_under_a_running_job_is_noted(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path)
    paths.outcome.parent.mkdir(parents=True, exist_ok=True)
    write_outcome(paths, RUNNING)
    note_pod_end(paths, "idle_destroy", "idle for 20 min")
    read = outcome_from(read_outcome(paths))
    assert read.not_finished() == "the job did not finish: the pod's agent ended it, idle (idle for 20 min)"


def test_a_finished_job_and_a_job_exit_are_left_as_they_are(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path)
    paths.outcome.parent.mkdir(parents=True, exist_ok=True)
    write_outcome(paths, {**RUNNING, "exit_code": 0})
    before = paths.outcome.read_bytes()
    note_pod_end(paths, "idle_destroy", "idle for 20 min")
    assert paths.outcome.read_bytes() == before
    write_outcome(paths, RUNNING)
    before = paths.outcome.read_bytes()
    note_pod_end(paths, "job_exit", "job exited")
    assert paths.outcome.read_bytes() == before


def test_an_ended_by_gpuc_does_not_write_is_unreadable() -> None:
    with pytest.raises(Unreadable, match="ended_by"):
        outcome_from({"format": OUTCOME_FORMAT, **RUNNING, "ended_by": "the landlord"})
    bad = parse_outcome(json.dumps({"format": OUTCOME_FORMAT, **RUNNING, "ended_why": ["x"]}).encode(), "here")
    assert isinstance(bad, BadOutcome) and "ended_why" in bad.why


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def test_logs_of_an_idle_destroyed_hung_job_say_who_ended_it(world: World) -> None:
    hang = ("python", "-c", "import time; time.sleep(600)")
    up = world.gpuc("up", "hung", "-y", "--", *hang, GPUC_IDLE_WARN_S="1", GPUC_IDLE_DESTROY_S="2")
    assert up.returncode == 0, up.stderr
    assert wait_for(lambda: world.provider().list_pods() == [], timeout_s=60)
    logs = world.gpuc("logs", "hung")
    assert "the job did not finish: the pod's agent ended it, idle (idle for" in logs.stderr, logs.stderr
