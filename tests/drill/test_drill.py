"""The drill: every row of the failure matrix within its bound, with and without faults -- and a drill
that can fail: break one safety rule and it must exit non-zero."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuc.client.cli import cli
from gpuc.core.api import ReapReport
from gpuc.functions import reaper
from gpuc.functions.app import Deps
from gpuc.functions.reaper import rules, sweep
from gpuc.instance_side import agent, ending, heartbeat, observe, push, pushmanifest, pushplan, resume
from gpuc.testkit import docgen
from gpuc.testkit import drill as drill_module
from gpuc.testkit.drill import FAULT_FREE, SCENARIOS, run_drill
from gpuc.testkit.drill_ends import f3j_job_works_without_gpu
from gpuc.testkit.drill_results import f8_sync_fails, f10_network_lost
from gpuc.testkit.drill_silence import f5_agent_killed, f5c_clock_ahead
from gpuc.testkit.drill_spot import s30h_outbid_at_random_moments
from gpuc.testkit.drill_stage import DrillReport, RowResult, Stage
from gpuc.testkit.drill_text import header, row_lines

pytestmark = pytest.mark.e2e  # minutes of real processes: `make quick` leaves them out

ROWS = [f"F{i}" for i in range(1, 15)] + ["F3j", "F3h", "F3hs", "F3hn", "F3b", "F5c", "F9n"]
ROWS += ["F11s", "F5r", "F12b", "F5g"]
ROWS += ["F15", "F15v", "F15h"]
ROWS += ["F11u", "F18"]
ROWS += ["F16", "F16b"]
ROWS += ["F17"]
ROWS += ["F20"]  # Keep from the phone
ROWS += ["F11i"]  # `up | tee` stopped at each step
ROWS += ["F26s", "F26w"]  # Pods carry their own proof
ROWS += ["F26a", "F26f"]  # The agent killed mid-job, the pod frozen mid-job
ROWS += ["F34"]  # A hostile host reads the pod and asks for grants
ROWS += ["S30a", "S30b", "S30c", "S30d"]  # interruptible runs: recovered, stopped, a losing bid, a forged hint
ROWS += ["S30e", "S30f", "S30g"]  # a stop at every step of a re-rent, a re-rent cut, a 2-GPU run
ROWS += ["S30h"]  # outbid at random moments, inside a push or between two: the product's push and restore
FAULT_FREE_ROWS = {"F11i", "S30a", "S30b", "S30c", "S30d", "S30e", "S30f", "S30g", "S30h"}  # drill.FAULT_FREE's rows


@pytest.fixture(autouse=True)
def ram_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drill's pods write their markers at every tick (thousands of fsynced files a drill): on a RAM disk
    where the machine has one, each drill costs CPU, not disk waits. Elsewhere the usual temporary folder."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        monkeypatch.setattr(tempfile, "tempdir", str(shm))


def drill(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["drill", *args])
    return result.exit_code, result.output


def check_all_within(report: dict[str, Any], rows: list[str] = ROWS) -> None:
    assert [r["row"] for r in report["rows"]] == rows
    for row in report["rows"]:
        assert row["within_bound"], row
        assert row["false_kills"] == 0, row
        assert row["results_lost"] == 0, row
        assert row["problems"] == [], row
    faults = report["faults"]
    assert (faults["pods_leaked"], faults["double_creates"], faults["double_destroys"]) == (0, 0, 0)
    assert report["ok"] is True


def drill_of(report: DrillReport, *args: str) -> tuple[int, str]:
    """`gpuc drill` (the command: its table or JSON, its exit code) over a drill already run: one full drill
    costs a minute of CPU, and the command only renders what `run_drill` returns."""

    def ran(faults: bool = False, seed: int = 0, on_row: Callable[[RowResult], object] | None = None) -> DrillReport:
        assert (faults, seed) == ("--faults" in args, 0)
        if on_row is not None:  # as the drill says each row the moment it is done
            for row in report.rows:
                on_row(row)
        return report

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(drill_module, "run_drill", ran)
        return drill(*args)


def test_the_drill_passes_and_prints_the_table_and_its_json() -> None:
    report = run_drill()  # the whole fault-free drill, once for both renderings
    code, out = drill_of(report)
    assert code == 0, out
    assert "drill: PASS" in out
    for row in ROWS:
        assert f"\n{row} " in out

    code, out = drill_of(report, "--json")
    assert code == 0, out
    report_json = json.loads(out)
    check_all_within(report_json)
    by_row = {r["row"]: r for r in report_json["rows"]}
    assert by_row["F1"]["billed_min"] <= by_row["F1"]["bound_min"]
    assert by_row["F12"]["problems"] == []
    assert report_json["faults"]["injected"] > 0  # F12's fixed schedule of provider errors
    page = docgen.failure_matrix_page(report_json["rows"])
    assert (docgen.DOCS / "failure-matrix.md").read_text(encoding="utf-8") == page, (
        "docs/failure-matrix.md is out of date: run `python -m gpuc.testkit.docgen failure-matrix.md`"
    )


def test_the_drill_with_faults_passes_every_row_at_seed_0() -> None:
    code, out = drill("--faults", "--seed", "0", "--json")
    assert code == 0, out
    check_faulted(json.loads(out), ROWS)


# `gpuc drill --faults --seed N` for N in 1..9, each row under the faults it meets in the whole drill; the rows
# no fault can reach (FAULT_FREE) ran at seed 0 and would run the same again.
@pytest.mark.parametrize("seed", range(1, 10))
def test_the_drill_with_faults_passes(seed: int) -> None:
    report = run_drill(faults=True, seed=seed, skip=FAULT_FREE).as_json()
    check_faulted(report, [r for r in ROWS if r not in FAULT_FREE_ROWS])  # the names and the rows agree


def check_faulted(report: dict[str, Any], rows: list[str]) -> None:
    check_all_within(report, rows)
    kinds = report["faults"]["by_kind"]
    assert report["faults"]["injected"] >= 50
    for kind in ("notifier down", "store unavailable", "functions unreachable"):
        assert kinds.get(kind, 0) > 0, kinds
    assert any(k.startswith("provider ") for k in kinds) and any(k.startswith("emulator ") for k in kinds)


def test_a_reaper_that_ignores_the_second_witness_fails_the_drill(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "veto", lambda *args: None)
    report = run_drill(scenarios=[f10_network_lost])
    assert not report.ok
    assert report.rows[0].false_kills == 1
    code, out = drill_of(report)  # the whole drill holds this row: the command fails on it
    assert code == 1
    assert "drill: FAIL" in out


def test_a_reaper_that_never_acts_puts_silence_over_its_bound() -> None:
    def dry(deps: Deps, now: float) -> ReapReport:
        return reaper.reap_once(deps, now, dry_run=True)

    report = run_drill(scenarios=[f5_agent_killed], reaper=dry)
    row = report.rows[0]
    assert not row.within_bound and not report.ok
    assert row.billed_min is None  # never destroyed


def test_a_push_in_name_order_fails_s30h(monkeypatch: pytest.MonkeyPatch) -> None:
    """The push before snapshots were prefixes sent changed files in name order: ckpt.pt before the step files written
    before it."""
    real = pushplan.plan

    def by_name(*args: Any, **kwargs: Any) -> pushplan.Plan:
        planned = real(*args, **kwargs)
        return pushplan.Plan(tuple(sorted(planned.send, key=lambda s: s.name)), planned.waiting)

    monkeypatch.setattr(push, "plan", by_name)
    row = run_drill(scenarios=[s30h_outbid_at_random_moments]).rows[0]
    assert not row.ok and any("past its steps" in p for p in row.problems), row


def test_a_restore_that_follows_the_last_verified_manifest_alone_fails_s30h(monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore before snapshots were prefixes followed the last verified manifest: a push cut after a newer
    checkpoint left the manifest of the push before it."""
    real = resume.restorable
    monkeypatch.setattr(resume, "restorable", lambda m, listing: real(dataclasses.replace(m, sending=()), listing))
    row = run_drill(scenarios=[s30h_outbid_at_random_moments]).rows[0]
    assert not row.ok and any("past its steps" in p for p in row.problems), row


def test_an_ender_that_skips_the_sync_check_loses_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ending.Ender, "_sync", lambda self: "unchecked")
    report = run_drill(scenarios=[f8_sync_fails])
    row = report.rows[0]
    assert row.results_lost > 0 and row.false_kills == 1
    assert not report.ok


def test_an_idle_watch_blind_to_the_job_tree_kills_a_working_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observe.Observer, "_job", lambda self: (None, None))
    report = run_drill(scenarios=[f3j_job_works_without_gpu])
    row = report.rows[0]
    assert row.false_kills == 1 and row.results_lost >= 1 and not report.ok


def test_a_pod_that_never_learns_the_functions_time_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heartbeat.PodClient, "_learn_time", lambda self, result: None)
    report = run_drill(scenarios=[f5c_clock_ahead])
    assert report.rows[0].false_kills == 1 and not report.ok


def deadline_rows(*names: str) -> list[Any]:
    return [s for s in SCENARIOS if s.__name__ in names]


def test_a_reaper_whose_deadline_a_busy_gpu_can_veto_leaves_a_faked_pod_billing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rules, "BUSY_RULES", (*rules.BUSY_RULES, "deadline"))
    report = run_drill(scenarios=deadline_rows("f15h_host_fakes_pings"))
    row = report.rows[0]
    assert row.billed_min is None and not row.within_bound and not report.ok


def test_an_agent_that_ignores_its_deadline_is_a_problem_even_when_the_reaper_catches_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent.Agent, "_deadline", lambda self, now: False)
    report = run_drill(scenarios=deadline_rows("f15_runpod", "f15v_vast"))
    for row in report.rows:
        assert row.within_bound, row  # the reaper, on its own, holds the bound
        assert "the agent did not end the pod itself" in row.problems
    assert not report.ok


def push_rows(*names: str) -> list[Any]:
    return [s for s in SCENARIOS if s.__name__ in names]


def test_a_wrapper_that_does_not_restart_the_agent_loses_the_job(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuc.instance_side import wrapper

    monkeypatch.setattr(wrapper.AgentGuard, "check", lambda self, now=None: False)
    report = run_drill(scenarios=push_rows("f26a_agent_killed_job_running"))
    row = report.rows[0]
    assert row.false_kills == 1 and "the agent was never restarted" in row.problems and not report.ok


def test_a_push_that_sends_everything_fails_the_frozen_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def everything(listing: Any, last: Any, now: float, settle_s: float, **_: Any) -> pushplan.Plan:
        files = listing.files.items()
        sends = (pushmanifest.Send(n, size, listing.mtimes.get(n, 0), pushmanifest.FILE) for n, size in files)
        return pushplan.Plan(tuple(sends), ())

    monkeypatch.setattr(push, "plan", everything)
    report = run_drill(scenarios=push_rows("f26f_pod_frozen_mid_job"))
    assert any("unchanged files again" in p for p in report.rows[0].problems) and not report.ok


def test_a_restarted_agent_that_forgets_its_state_is_still_kept_but_a_never_pushing_one_loses_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent.Agent, "_periodic_sync", lambda self, now: None)
    report = run_drill(scenarios=push_rows("f26f_pod_frozen_mid_job"))
    row = report.rows[0]
    assert row.results_lost > 0 and "no periodic push ran" in row.problems and not report.ok


# -- `gpuc drill` prints each row as it is done, whole ------------------------------------------------------


def test_each_row_is_heard_the_moment_it_is_done() -> None:
    """The drill takes minutes: `gpuc drill` prints a row once it is done, not the table at the end."""
    heard: list[str] = []

    def first(stage: Stage) -> RowResult:
        return RowResult("T1", "first", "nobody", 0.0, 1.0, "1 min")

    def second(stage: Stage) -> RowResult:
        assert heard == ["T1"], "the first row was out before the second ran"
        return RowResult("T2", "second", "nobody", 0.0, 1.0, "1 min")

    report = run_drill(scenarios=[first, second], on_row=lambda row: heard.append(row.row))
    assert heard == ["T1", "T2"] == [r.row for r in report.rows]


def test_a_rows_words_are_never_cut() -> None:
    long = RowResult(
        "T9",
        "a failure whose description runs well past forty-four characters of the old column",
        "a very particular piece of the watchdog that catches it",
        1.5,
        2.0,
        "the bound the failure matrix gives, in words longer than the forty-eight characters the table once kept",
        problems=["a problem, said whole"],
    )
    line, problem = row_lines(long)
    assert line.startswith("T9    FAIL     1.5     2.0     0    0     0  ")  # a problem fails the row
    for words in (long.failure, long.caught_by, long.bound_text):
        assert words in line
    assert problem == "  T9: a problem, said whole"
    assert all(len(h) > 0 for h in header())
