"""Slips caught on the laptop before anything is rented: a forgotten experiment name is never the
command's first word, and `--max-hours` takes units and refuses a deadline the job would get no time of.
The real CLI against local pods (a typo'd script: tests/client/test_outcome.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, only_run, open_world

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
    # "ended": not a state the reaper's gone-at-the-provider warning is sent for (functions/reaper/steps.py)
    assert (record.state, record.ended_by) == ("ended", "up"), record  # `up` ended it (the page says so)
    assert record.end_at is not None


# -- slips refused before renting or uploading, each with its fix ------------------------------------
def said(done: object) -> str:
    return str(getattr(done, "stdout", "")) + str(getattr(done, "stderr", ""))


def nothing_rented(world: World) -> bool:
    return world.provider().list_pods() == [] and world.deps().runs.all() == []


def test_a_forgotten_name_and_dashes_is_refused_before_renting_with_the_fix(world: World) -> None:
    # `gpuc up python train.py`: click takes "python" for the name and `train.py` for the command; it used to
    # rent, install, then fail on the pod with "no program 'train.py'".
    done = world.gpuc("up", "-y", "python", "train.py")
    assert done.returncode == 2, said(done)
    assert "no program" not in said(done) and "Traceback" not in said(done)
    assert "nothing was rented" in said(done)
    assert "gpuc up NAME -- python train.py" in said(done) and "gpuc up -- python train.py" in said(done)
    assert nothing_rented(world)


def test_a_script_given_as_the_program_is_refused_before_renting(world: World) -> None:
    # The name given, the interpreter forgotten: `train.py` is a file of the upload, not a program on PATH.
    done = world.gpuc("up", "exp", "-y", "--", "train.py", "0")
    assert done.returncode == 2, said(done)
    assert "nothing was rented" in said(done) and "python train.py" in said(done)
    assert nothing_rented(world)


def test_a_name_without_dashes_still_runs_the_whole_command(world: World) -> None:
    done = world.gpuc("up", "exp", "-y", "--dry-run", "python", "train.py")
    assert done.returncode == 0, said(done)
    assert "python train.py" in done.stderr  # gpuc's own lines, the dry run's steps among them


def test_max_hours_is_echoed_as_typed_not_as_a_float(world: World) -> None:
    done = world.gpuc("up", "exp", "-y", "--dry-run", "--max-hours", "7m", "--", "python", "train.py")
    assert done.returncode == 0, said(done)
    assert "0.116667" not in said(done) and "0.1166" not in said(done)
    assert "--max-hours 7m" in said(done) and "max 7m" in said(done)
    longer = world.gpuc("up", "exp", "-y", "--dry-run", "--max-hours", "1.5", "--", "python", "train.py")
    assert "--max-hours 1h30m" in said(longer), said(longer)


def test_max_hours_text_reads_back_as_the_same_deadline() -> None:
    from gpuc.core.clock import hours_text

    for hours in (7 / 60, 0.5, 1.5, 2.0, 12.0, 48.0, 1 + 5 / 3600, 0.05):
        text = hours_text(hours)
        assert parse_max_hours(text) == pytest.approx(hours, abs=1 / 3600), text
    assert (hours_text(7 / 60), hours_text(12.0), hours_text(1.5)) == ("7m", "12h", "1h30m")


def kept_pod(world: World, name: str, *extra: str) -> str:
    done = world.gpuc("up", name, "-y", *extra)
    assert done.returncode == 0, said(done)
    (pod,) = world.provider().list_pods()
    return pod.id


def test_run_of_a_script_only_here_suggests_sync(world: World) -> None:
    pod = kept_pod(world, "lora", "--warm", "30m")
    (world.project / "burn.py").write_text("print('burn')\n")  # written after `up`: not on the pod
    done = world.gpuc("run", "lora", "--", "python", "burn.py")
    assert done.returncode == 2, said(done)
    assert "burn.py" in said(done) and "gpuc run lora --sync -- python burn.py" in said(done)
    assert "copy the file onto the pod" not in said(done)
    assert [p.id for p in world.provider().list_pods()] == [pod], "refused, not destroyed"


def test_run_sync_checks_the_command_before_uploading(world: World) -> None:
    (world.project / "ver.py").write_text("print('v1')\n")
    pod = kept_pod(world, "lora", "--warm", "30m")
    workspace = world.provider().paths(pod).workspace
    (world.project / "ver.py").write_text("print('v2')\n")
    typo = world.gpuc("run", "lora", "--sync", "--", "python", "vr.py")
    assert typo.returncode == 2, said(typo)
    assert "did you mean ver.py?" in said(typo) and "nothing was uploaded" in said(typo)
    assert "project uploaded" not in said(typo)
    no_program = world.gpuc("run", "lora", "--sync", "--", "pythn-nowhere", "ver.py")
    assert no_program.returncode == 2, said(no_program)
    assert "no program 'pythn-nowhere'" in said(no_program) and "nothing was uploaded" in said(no_program)
    assert (workspace / "ver.py").read_text() == "print('v1')\n", "neither refusal uploaded anything"


def test_run_after_a_warm_pod_ended_suggests_a_new_warm_pod(world: World) -> None:
    pod = kept_pod(world, "lora", "--warm", "30m")
    assert world.gpuc("down", pod).returncode == 0
    done = world.gpuc("run", "lora", "--sync", "--wait", "--", "python", "train.py")
    assert done.returncode == 3, said(done)
    assert "gpuc up lora --warm 30m --wait -- python train.py" in said(done)
    assert "`gpuc ls` shows live pods" not in said(done)


def test_run_after_a_pod_ended_suggests_up(world: World) -> None:
    pod = kept_pod(world, "once")
    assert world.gpuc("down", pod).returncode == 0
    done = world.gpuc("run", "once", "--", "python", "train.py")
    assert done.returncode == 3, said(done)
    assert "gpuc up once -- python train.py" in said(done)


def test_an_option_of_the_job_without_dashes_says_where_it_goes(world: World) -> None:
    done = world.gpuc("up", "exp", "-y", "python", "train.py", "--lr", "3e-4")
    assert done.returncode == 2 and "No such option: --lr" in said(done), said(done)
    assert "gpuc up exp -y -- python train.py --lr 3e-4" in said(done), said(done)
    assert nothing_rented(world)
    unnamed = world.gpuc("up", "python", "train.py", "--lr", "3e-4")
    assert "gpuc up NAME -- python train.py --lr 3e-4" in said(unnamed), said(unnamed)
    again = world.gpuc("run", "exp", "python", "train.py", "--lr", "3e-4")
    assert again.returncode == 2 and "gpuc run exp -- python train.py --lr 3e-4" in said(again), said(again)
