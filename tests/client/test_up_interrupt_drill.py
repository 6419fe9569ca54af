"""Drill row F11i (testkit/drill_interrupt.py): the real `up`, stopped at each step by a real signal with its
output already broken, leaves 0 pods and kills no other pod; and the row fails when `up` leaves one."""

from __future__ import annotations

import pytest

from gpuc.client.pods import abort
from gpuc.testkit.drill import run_drill
from gpuc.testkit.drill_interrupt import STEPS, f11i_up_interrupted


def test_the_row_passes_with_every_step_stopped_and_nothing_left() -> None:
    (row,) = run_drill(scenarios=[f11i_up_interrupted]).rows
    assert row.row == "F11i" and row.ok, row
    assert row.problems == [] and row.false_kills == 0
    assert row.billed_min is not None and row.bound_min is not None and row.billed_min <= row.bound_min
    assert row.failure == "up | tee stopped at each step: 0 pods left"
    assert {step for step, _ in STEPS} == {"create", "registration", "boot wait", "agent start", "upload", "job start"}


def test_the_row_fails_when_up_prints_before_it_destroys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The old abort path: its first line to the broken pipe raises, and the destroy never runs."""
    real = abort._destroy_made

    def print_first(pod, spec, ctx, why, *rest):  # type: ignore[no-untyped-def]
        ctx.echo(f"up failed after create ({why}); destroying")
        return real(pod, spec, ctx, why, *rest)

    monkeypatch.setattr(abort, "_destroy_made", print_first)
    (row,) = run_drill(scenarios=[f11i_up_interrupted]).rows
    assert not row.ok
    assert f"{len(STEPS)} pod(s) left billing" in " ".join(row.problems), row.problems
    assert f"{len(STEPS)} pods left" in row.failure
