"""`gpuc ls` shows what costs money: the deadline, the idle state and when the idle watch ends the
pod, a warm time, a pod KEPT after a failed sync in its own words with what it bills; `--json` the same.
The real CLI against local pods and the local watchdog."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, only_run, open_world, wait_for

from gpuc.client.pods.listing import next_view


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def _row(world: World) -> dict[str, object]:
    listed = world.gpuc("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    return row  # type: ignore[no-any-return]


def test_ls_shows_the_deadline_the_idle_watch_and_the_warm_time(world: World) -> None:
    assert world.gpuc("up", "exp", "-y", "--warm", "30m", "--max-hours", "2h").returncode == 0
    assert wait_for(lambda: _row(world).get("busy") is not None, timeout_s=30), "a heartbeat with its idle state"
    row = _row(world)
    assert str(row["deadline_at"]).endswith("Z") and row["warm_s"] == 1800.0
    assert row["busy"] is False and isinstance(row["idle_s"], int)
    assert isinstance(row["idle_destroy_in_s"], int) and 1700 < row["idle_destroy_in_s"] <= 1800, row
    table = world.gpuc("ls", COLUMNS="250").stdout
    assert "NEXT" in table and "deadline in 1h5" in table and "warm 30m" in table and "ends in 2" in table, table


def test_a_kept_pod_reads_kept_with_what_it_bills_not_ok(world: World) -> None:
    done = world.gpuc("up", "exp", "-y", "--wait", "--", "python", "train.py", "0", GPUC_RESULTS_BUCKET="nowhere://b")
    assert done.returncode == 120, done.stderr
    assert wait_for(lambda: _row(world).get("kept") == "sync failed", timeout_s=30), _row(world)
    table = world.gpuc("ls", COLUMNS="250").stdout
    assert "KEPT (sync failed): billing $0.44/h" in table, table
    assert world.gpuc("down", only_run(world).pod_id, "--force").returncode == 0


def test_a_stopped_pod_shows_its_disks_price_not_its_running_one() -> None:
    row: dict[str, object] = {"status": "stopped", "price_per_hour": 0.44, "disk_per_hour": 0.0137}
    assert next_view(row, 0.0) == "stopped: disk $0.014/h"
    row["disk_per_hour"] = None
    assert next_view(row, 0.0) == "stopped: its disk bills"
