"""A warm pod's deadline follows its jobs unless --max-hours fixes it (client/pods/warm.py, core/warm.py): one job
allowance (GPUC_WARM_JOB_HOURS) plus the warm time after its start, then after each `gpuc run`'s start. The
budget holds that much for it (the price line says how much), not GPUC_MAX_HOURS; a move the month's budget
cannot hold is not made; the deadline is still a hard one, the agent's and the watchdog's. The real CLI
against local pods and the local watchdog."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.localworld import World, only_run, open_world, wait_for

from gpuc.core.clock import parse_iso


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def deadline(world: World) -> float:
    listed = world.gpuc("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    return parse_iso(row["deadline_at"])


def test_the_price_line_says_what_the_budget_holds_for_a_warm_pod(world: World) -> None:
    """`--warm 30m` on a $0.44/h pod: $0.66 held (1 h job + 30 min warm), where the 12 h default held $5.28."""
    warm = world.gpuc("up", "exp", "--warm", "30m", "--dry-run", "--", "python", "train.py", GPUC_MONTHLY_BUDGET="40")
    assert warm.returncode == 0, warm.stderr
    assert "warm pod: the budget holds $0.66 for it, one job of up to 1h00m (GPUC_WARM_JOB_HOURS) and its 30m" in (
        warm.stderr
    )
    assert "each `gpuc run` moves the deadline to as much after its start" in warm.stderr
    assert "this pod at most $0.66" in warm.stderr
    fixed = world.gpuc("up", "exp", "--warm", "30m", "--max-hours", "12", "--dry-run", "--", "python", "train.py")
    assert "at most $5.28 by the deadline (--max-hours 12h, ends at" in fixed.stderr, fixed.stderr
    assert "warm pod: the budget holds" not in fixed.stdout + fixed.stderr


def test_the_budget_holds_a_warm_pod_at_its_job_and_warm_time_not_12_hours(world: World) -> None:
    budget: dict[str, Any] = {"GPUC_MONTHLY_BUDGET": "1"}
    warm = world.gpuc("up", "warm", "-y", "--warm", "30m", **budget)
    assert warm.returncode == 0, warm.stderr  # $0.66 of $1; at 12 h ($5.28) it was refused
    assert "no job started: warm pod: with no job for 30m it syncs and ends itself, and at the latest at" in (
        warm.stdout + warm.stderr
    )
    refused = world.gpuc("up", "other", "-y", "--max-hours", "2h", **budget)
    assert refused.returncode == 4, refused.stderr
    assert "$0.440/h x 1.5 h to its deadline" in refused.stderr, refused.stderr  # the warm pod, as held
    fits = world.gpuc("up", "other", "-y", "--max-hours", "0.5", **budget)
    assert fits.returncode == 0, fits.stderr


def test_each_run_moves_the_deadline_to_a_job_and_the_warm_time_from_its_start(world: World) -> None:
    env: dict[str, Any] = {"GPUC_WARM_JOB_HOURS": "10m"}
    up = world.gpuc("up", "exp", "-y", "--warm", "1m", "--wait", "--", "python", "train.py", **env)
    assert up.returncode == 0, up.stderr
    first = deadline(world)
    time.sleep(2.0)
    started = time.time()
    again = world.gpuc("run", "exp", "--wait", "--", "python", "train.py", **env)
    assert again.returncode == 0, again.stderr
    moved = deadline(world)
    assert moved > first and started + 660 - 2 <= moved <= time.time() + 660, (first, moved)
    assert "warm pod: deadline " in again.stderr + again.stdout and "this job's 10m and 1m warm" in again.stderr
    # The pod's agent hears it from the watchdog: the deadline it enforces itself (F15) is the moved one.
    log = world.provider().paths(only_run(world).pod_id).state / "agent.log"
    assert wait_for(lambda: "deadline: the watchdog says" in log.read_text(), timeout_s=20), log.read_text()[-2000:]


def test_a_move_the_budget_cannot_hold_is_not_made(world: World) -> None:
    """$60/h, a 6 min job allowance and 1 min warm: $7.00 held at `up`; with $7.02 a month, the seconds the first
    job ran leave no room to move the deadline: `run` says so and the job runs to the current one."""
    env: dict[str, Any] = {
        "GPUC_WARM_JOB_HOURS": "6m",
        "GPUC_LOCAL_PRICE_PER_HOUR": "60",
        "GPUC_MONTHLY_BUDGET": "7.02",
    }
    up = world.gpuc("up", "exp", "-y", "--warm", "1m", "--wait", "--", "python", "train.py", **env)
    assert up.returncode == 0, up.stderr
    first = deadline(world)
    time.sleep(2.0)
    again = world.gpuc("run", "exp", "--wait", "--", "python", "train.py", **env)
    assert again.returncode == 0, again.stderr
    said = again.stdout + again.stderr
    assert "budget: moving" in said and "would cross the monthly budget" in said, said
    assert "this job must end by then" in said
    assert deadline(world) == first


def test_a_warm_pods_deadline_ends_a_job_that_runs_past_it(world: World) -> None:
    """Still a hard deadline: a job longer than its allowance is ended at it (results synced first), code 121."""
    env: dict[str, Any] = {"GPUC_WARM_JOB_HOURS": "20s", "GPUC_DEADLINE_LEAD_S": "1", "GPUC_DEADLINE_WARN_S": "1"}
    up = world.gpuc("up", "exp", "-y", "--warm", "5s", "--wait", "--", "python", "train.py", "0", "120", **env)
    assert up.returncode == 121, up.stderr
    assert wait_for(lambda: world.provider().list_pods() == [], timeout_s=30), "ended at its deadline"
