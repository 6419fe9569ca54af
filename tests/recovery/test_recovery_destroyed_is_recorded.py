"""An attempt the recovery destroyed is recorded as such by the reaper itself, at the moment it destroys it: its
record ends then, by the recovery, so no later pass takes it for a pod "gone at the provider" (and tells the
user so), nor for the run's pod having ended on its own (which would end the run)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.ledger.intake import RECOVERY_ENDED_BY
from gpuc.testkit.spot_world import WAIT_S, RecWorld, make_rec_world


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock, reaper_period_s=60.0)
    yield w
    w.close()


def test_the_attempt_recovery_destroyed_is_ended_by_the_recovery(world: RecWorld) -> None:
    first = world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT_S + 1)
    report = world.reap()
    destroyed_at = world.now
    assert [a.reason.startswith("recovery:") for a in report.actions if a.action == "destroy"] == [True]
    rec = world.store.get_pod(first.id)
    assert rec is not None and (rec.state, rec.ended_by, rec.end_at) == ("destroyed", RECOVERY_ENDED_BY, destroyed_at)
    assert rec.reason is not None and rec.reason.startswith("recovery:")
    for _ in range(10):
        world.clock.advance(60.0)
        world.reap()
    assert [n.kind for n in world.store.recent_notifications(100) if n.pod_id == first.id] == []  # never "gone"
    run = world.run()
    assert not run.done and len(run.attempts) == 2  # the run goes on with its new attempt
