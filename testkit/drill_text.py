"""`gpuc drill`'s text: the failure-matrix table, one row per failure, and the fault plan's totals.

The drill takes minutes, so `gpuc drill` prints each row the moment it is done (`row_lines`). The columns of
fixed width come first and the row's own words last, whole: a row's width is not known before it runs, and a
cut "caught by" or bound is the one part a reader came for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuc.testkit.drill_stage import DrillReport, RowResult


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def header() -> list[str]:
    return [
        f"{'row':<5} {'':<4} {'billed':>7} {'bound':>7} {'false':>5} {'lost':>4} {'notif':>5}  failure; caught by; "
        "bound (docs/failure-matrix.md)",
        f"{'':<10} {'min':>7} {'min':>7} {'kills':>5}",
    ]


def row_lines(r: RowResult) -> list[str]:
    """The row, then each problem it found."""
    verdict = "ok" if r.ok else "FAIL"
    line = (
        f"{r.row:<5} {verdict:<4} {_num(r.billed_min):>7} {_num(r.bound_min):>7} {r.false_kills:>5}"
        f" {r.results_lost:>4} {r.notifications:>5}  {r.failure}; caught by {r.caught_by}; {r.bound_text}"
    )
    return [line, *(f"  {r.row}: {p}" for p in r.problems)]


def footer(report: DrillReport) -> list[str]:
    f = report.faults
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(f.injected.items())) or "none"
    return [
        f"faults {'on' if report.faults_on else 'off'} (seed {report.seed}): {f.total} injected ({kinds}); "
        f"pods leaked {f.pods_leaked}, double creates {f.double_creates}, double destroys {f.double_destroys}",
        "drill: PASS" if report.ok else "drill: FAIL",
    ]
