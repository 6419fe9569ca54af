"""One resolver for every command: the name `gpuc ls` shows (the experiment) works in
`run`, `keep`, `down` and `logs` as a pod id or run id does, and two live pods of one experiment are
refused with both listed, never guessed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, open_world, wait_for

from gpuc.client.runs import RunStore
from gpuc.core.errors import NotFound


def store_with(home: Path, *runs: tuple[str, str, str]) -> RunStore:
    """runs: (run id, experiment, phase), created in this order, pod ids pod-<run id>."""
    store = RunStore(home)
    for n, (run_id, experiment, phase) in enumerate(runs):
        store.record_intent(run_id, f"gpuc-{run_id}", "local", experiment, now=1000.0 + n)
        store.set_pod_id(run_id, f"pod-{run_id}")
        store.set_phase(run_id, phase)
    return store


def test_an_experiment_name_finds_its_one_open_run(tmp_path: Path) -> None:
    store = store_with(tmp_path, ("r1", "kv", "ended"), ("r2", "kv", "running"), ("r3", "other", "running"))
    assert store.find("kv").run_id == "r2"


def test_an_experiment_with_only_closed_runs_finds_its_latest(tmp_path: Path) -> None:
    store = store_with(tmp_path, ("r1", "kv", "ended"), ("r2", "kv", "failed"))
    assert store.find("kv").run_id == "r2"


def test_two_open_runs_are_refused_with_both_listed(tmp_path: Path) -> None:
    store = store_with(tmp_path, ("r1", "kv", "running"), ("r2", "kv", "registered"))
    with pytest.raises(NotFound) as refused:
        store.find("kv")
    assert "ambiguous: experiment 'kv' has 2 pods" in refused.value.message
    assert "pod-r1" in refused.value.message and "pod-r2" in refused.value.message
    assert refused.value.hint is not None and "pod id" in refused.value.hint


def test_an_exact_id_wins_over_an_experiment_of_that_name(tmp_path: Path) -> None:
    store = store_with(tmp_path, ("r1", "kv", "running"), ("r2", "kv", "running"), ("kv", "x", "running"))
    assert store.find("kv").run_id == "kv"
    assert store.find("pod-r1").run_id == "r1" and store.find("gpuc-r2").run_id == "r2"


def test_nothing_matching_says_what_was_looked_for(tmp_path: Path) -> None:
    store = store_with(tmp_path, ("r1", "kv", "running"))
    with pytest.raises(NotFound, match="no pod, run or experiment 'nope'"):
        store.find("nope")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def test_the_name_ls_shows_works_in_keep_run_logs_and_down(world: World) -> None:
    up = world.gpuc("up", "keepme", "-y")  # a pod with no job yet
    assert up.returncode == 0, up.stderr
    assert "no job started: the pod is destroyed after 10m idle" in up.stderr, up.stderr  # GPUC_IDLE_DESTROY_S
    listed = world.gpuc("ls")
    assert "keepme" in listed.stdout, listed.stdout
    kept = world.gpuc("keep", "keepme", "--for", "1h")
    assert kept.returncode == 0, kept.stderr
    ran = world.gpuc("run", "keepme", "--", "python", "train.py", "0", "60")
    assert ran.returncode == 0, ran.stderr
    assert wait_for(lambda: "epoch 1" in world.gpuc("logs", "keepme").stdout)
    down = world.gpuc("down", "keepme", "--force")
    assert down.returncode == 0, down.stderr
    assert world.provider().list_pods() == []
