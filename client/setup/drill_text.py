"""`gpuc drill`'s text: the failure-matrix table, one row per failure, and the fault plan's totals."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuc.testkit.drill_stage import DrillReport, RowResult


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _line(r: RowResult) -> str:
    verdict = "ok" if r.ok else "FAIL"
    return (
        f"{r.row:<4} {r.failure[:44]:<44} {r.caught_by[:34]:<34} {_num(r.billed_min):>8} {_num(r.bound_min):>8}"
        f"  {r.bound_text[:48]:<48} {r.false_kills:>5} {r.results_lost:>4} {r.notifications:>5}  {verdict}"
    )


def render(report: DrillReport) -> str:
    head = (
        f"{'row':<4} {'failure':<44} {'caught by':<34} {'billed':>8} {'bound':>8}  {'bound (SPEC)':<48}"
        f" {'false':>5} {'lost':>4} {'notif':>5}"
    )
    lines = [head, f"{'':<84}{'min':>8} {'min':>8}  {'':<48} {'kills':>5}", *(_line(r) for r in report.rows)]
    for r in report.rows:
        lines.extend(f"  {r.row}: {p}" for p in r.problems)
    f = report.faults
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(f.injected.items())) or "none"
    lines.append(
        f"faults {'on' if report.faults_on else 'off'} (seed {report.seed}): {f.total} injected ({kinds}); "
        f"pods leaked {f.pods_leaked}, double creates {f.double_creates}, double destroys {f.double_destroys}"
    )
    lines.append("drill: PASS" if report.ok else "drill: FAIL")
    return "\n".join(lines)
