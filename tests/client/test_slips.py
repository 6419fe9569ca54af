"""Slips caught on the laptop before anything is rented: a forgotten experiment name is never the
command's first word, and `--max-hours` takes units and refuses a deadline the job would get no time of.
The real CLI against local pods (a typo'd script: tests/client/test_outcome.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from localworld import World, only_run, open_world

from gpuc.client.pods.plan import RENTED_BOOT_S, check_max_hours, parse_max_hours
from gpuc.core.errors import ConfigError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def test_up_without_a_name_takes_the_folders_and_says_so_never_python(world: World) -> None:
    done = world.gpuc("up", "-y", "--wait", "--", "python", "train.py", "5")
    assert done.returncode == 5, done.stdout + done.stderr  # the whole command ran, "python" included
    assert "no experiment name given: using this folder's, proj" in done.stderr
    assert only_run(world).experiment == "proj"


def test_options_before_the_dashes_are_not_a_name(world: World) -> None:
    done = world.gpuc("up", "--gpu", "4090", "-y", "--dry-run", "--", "python", "train.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "using this folder's, proj" in done.stderr and "python train.py" in done.stderr


def test_a_name_before_the_dashes_is_the_name(world: World) -> None:
    done = world.gpuc("up", "exp", "-y", "--dry-run", "--", "python", "train.py")
    assert done.returncode == 0 and "no experiment name" not in done.stderr, done.stdout + done.stderr


def test_max_hours_takes_units_and_a_bare_number_stays_hours() -> None:
    assert parse_max_hours("5m") == pytest.approx(5 / 60)
    assert parse_max_hours("1h30m") == pytest.approx(1.5)
    assert parse_max_hours("0.5") == 0.5


def test_a_deadline_inside_the_lead_plus_a_boot_is_refused_naming_the_minimum(world: World) -> None:
    # local: 2 min lead + its boot (0.2 s here) -> at least 3m; the job would have had nothing.
    short = world.gpuc("up", "exp", "-y", "--max-hours", "0.03", "--", "python", "train.py")
    assert short.returncode == 2, short.stdout + short.stderr
    assert "shorter than the pod's boot on local" in short.stderr and "--max-hours 3m" in short.stderr
    assert world.provider().list_pods() == [] and world.deps().runs.all() == []
    fine = world.gpuc("up", "exp", "-y", "--dry-run", "--max-hours", "5m", "--", "python", "train.py")
    assert fine.returncode == 0, fine.stdout + fine.stderr


def test_on_a_rented_provider_the_minimum_counts_its_boot(world: World) -> None:
    with pytest.raises(ConfigError, match="boot on vast") as refused:
        check_max_hours(world.settings, parse_max_hours("5m"), "vast")
    assert f"--max-hours {int((120 + RENTED_BOOT_S) // 60)}m" in str(refused.value.hint)
    check_max_hours(world.settings, parse_max_hours("8m"), "vast")


def test_a_pod_up_destroyed_itself_is_ended_at_the_watchdog_not_found_gone(world: World) -> None:
    # Checked on the pod (repo/ is the clone's): up creates, registers, then destroys on the slip.
    done = world.gpuc("up", "exp", "-y", "--", "python", "repo/train.py", GPUC_GIT_REMOTE="file:///nowhere")
    assert done.returncode == 2 and "destroyed" in done.stderr, done.stdout + done.stderr
    deps = world.deps()
    (record,) = deps.watchdog.status().pods
    # "ended": not a state the reaper's gone-at-the-provider warning is sent for (functions/reaper/actions.py)
    assert (record.state, record.ended_by) == ("ended", "up"), record  # `up` ended it (the page says so)
    assert record.end_at is not None
