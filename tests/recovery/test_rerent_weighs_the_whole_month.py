"""A re-rent is weighed against the month's WHOLE spend and every other pod ahead, as `up` weighs a new pod: not
the run's own pods only (functions/recovery/watch.py budget_left). A kept pod the recovery did not read (it
reads no other pod) counts at its worst case as far as it is known, its GPU to its deadline, never as stopped.
Through the real reaper on the Vast emulator (testkit/spot_world.py), and budget_left on the same store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.api import ReapReport
from gpuc.core.clock import FakeClock
from gpuc.functions.reaper.state import Pass
from gpuc.functions.recovery.watch import budget_left
from gpuc.functions.store import StoredPod
from gpuc.testkit.spot_world import RUN_ID, WAIT_S, RecWorld, make_rec_world

H = 3600.0
BUDGET = 1.0


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock, monthly_budget=BUDGET)
    w.up()
    yield w
    w.close()


def another_pod(world: RecWorld, pod_id: str, **fields: object) -> None:
    """A pod of another run, on this watchdog's books (registered as `up` does)."""
    values: dict[str, object] = {
        "pod_id": pod_id, "provider": "vast", "name": f"gpuc-{pod_id}", "experiment": "other", "price_per_hour": 0.25,
        "started_at": world.now, "registered_at": world.now, "deadline_at": world.now + 2 * H, "key": "k" * 64,
    }  # fmt: skip
    values.update(fields)
    assert world.store.register(StoredPod.model_validate(values)) == "created"


def left(world: RecWorld) -> float:
    found = budget_left(Pass(world.deps, world.now, False, ReapReport(ran_at=world.now)), RUN_ID)
    assert found is not None
    return found


def test_what_other_pods_spent_this_month_is_counted(world: RecWorld) -> None:
    alone = left(world)
    another_pod(world, "spent-1", started_at=world.now - 3 * H, end_at=world.now - H, state="destroyed")
    assert left(world) == pytest.approx(alone - 0.50)  # $0.25/h x 2 h


def test_other_pods_ahead_count_at_their_worst_case(world: RecWorld) -> None:
    alone = left(world)
    another_pod(world, "running-1")
    assert left(world) == pytest.approx(alone - 0.50)  # $0.25/h to its deadline, 2 h away


def test_a_kept_pod_not_read_counts_its_gpu_to_its_deadline_never_as_stopped(world: RecWorld) -> None:
    alone = left(world)
    another_pod(world, "kept-1", kept_at=world.now, kept_until=world.now + H)
    assert left(world) == pytest.approx(alone - 0.50)  # its disk price unknown (not read): that part is not


@pytest.mark.parametrize("spent_elsewhere", [False, True], ids=["alone", "spent-elsewhere"])
def test_a_re_rent_the_other_pods_leave_no_room_for_stops(world: RecWorld, spent_elsewhere: bool) -> None:
    # The next attempt's worst case to the run's deadline is about $0.45: inside $1 alone; not with $0.75 spent
    # elsewhere this month.
    if spent_elsewhere:
        another_pod(world, "spent-1", started_at=world.now - 4 * H, end_at=world.now - H, state="destroyed")
    world.outbid()
    world.reap()
    world.clock.advance(WAIT_S + 1)
    world.reap()
    run = world.run()
    if not spent_elsewhere:
        assert world.creates() == 2 and len(run.attempts) == 2  # the control: re-rented
        return
    assert world.creates() == 1 and run.done and "would cross the budget" in (run.stopped_why or "")
