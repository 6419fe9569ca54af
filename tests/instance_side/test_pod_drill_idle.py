"""The drill's idle rows (F3h, F3hs, F3hn, F3b) run the agent's real rule on real processes: they pass, they
leave no process behind, and they fail when the rule is broken."""

from __future__ import annotations

import dataclasses
import os

import pytest

from gpuc.instance_side import idle
from gpuc.instance_side.idle import Thresholds, TreeActivity
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.procs import ProcScanner
from gpuc.testkit.drill import run_drill
from gpuc.testkit.drill_idle import (
    IDLE_ROWS,
    f3b_busy_job_lives,
    f3h_python_job_hangs,
    f3hn_hand_started_python_hangs,
    f3hs_shell_job_hangs,
)


def leftovers() -> list[int]:
    """This run's drill processes still alive (each row's pod id ends in this process's pid)."""
    suffix = f"-{os.getpid():x}"
    return [
        proc.pid
        for row in ("f3h", "f3hs", "f3hn", "f3b")
        for proc in ProcScanner(only_pod=row + suffix).sample().procs.values()
    ]


def test_hung_jobs_are_ended_within_the_window_and_leave_nothing_behind() -> None:
    # F3b, the busy row, spends real CPU: tests/drill runs it with the whole table.
    report = run_drill(scenarios=IDLE_ROWS[:3])
    assert [r.row for r in report.rows] == ["F3h", "F3hs", "F3hn"]
    for row in report.rows:
        assert row.ok, row
        assert row.billed_min is not None and row.billed_min <= 22  # 20 min + two checks
    assert leftovers() == []


def test_the_old_rule_keeping_any_python_busy_by_name_fails_the_hung_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A python process counted as busy whatever it does (today's seeds): the hung python bills for ever."""
    real = TreeActivity.progressing

    def by_name(self: TreeActivity, th: Thresholds) -> bool:
        return self.comm.startswith("python") or real(self, th)

    monkeypatch.setattr(idle.TreeActivity, "progressing", by_name)
    report = run_drill(scenarios=[f3hn_hand_started_python_hangs])
    assert not report.ok and not report.rows[0].within_bound
    assert leftovers() == []


def test_with_no_floor_at_all_truly_blocked_jobs_are_still_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    """The floors are not what ends these rows: a blocked process's counters do not move at all, so the
    rows are deterministic however loaded the machine."""
    real = idle.Thresholds.from_config

    def no_floors(cls: type[Thresholds], cfg: AgentConfig) -> Thresholds:
        return dataclasses.replace(real(cfg), cpu_floor_s=0.0, io_floor_bytes=0.0)

    monkeypatch.setattr(idle.Thresholds, "from_config", classmethod(no_floors))
    report = run_drill(scenarios=[f3h_python_job_hangs, f3hs_shell_job_hangs])
    assert report.ok, report.rows


def test_a_rule_blind_to_cpu_kills_the_busy_job(monkeypatch: pytest.MonkeyPatch) -> None:
    def io_only(self: TreeActivity, th: Thresholds) -> bool:
        return self.first or self.io_bytes > th.io_floor_bytes

    monkeypatch.setattr(idle.TreeActivity, "progressing", io_only)
    report = run_drill(scenarios=[f3b_busy_job_lives])
    assert report.rows[0].false_kills == 1 and not report.ok
    assert leftovers() == []
