"""A dry-run reaper pass (`gpuc watchdog reap --dry-run`) never destroys or rents for a recovering run: an outbid
run past its wait, that a real pass would destroy and re-rent, is left exactly as it was, at the provider and in
the store; the real pass after it then acts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.functions.reaper import reap_once
from gpuc.functions.recovery import runs
from gpuc.testkit.spot_world import RUN_ID, WAIT_S, RecWorld, make_rec_world


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock)
    yield w
    w.close()


def test_a_dry_run_pass_neither_destroys_nor_rents_for_a_recovering_run(world: RecWorld) -> None:
    first = world.up()
    world.outbid()
    world.reap()  # the pause noted
    world.clock.advance(WAIT_S + 1)  # due for its re-rent
    run_before = world.store.get_meta(runs.run_key(RUN_ID))
    pod_before = world.store.get_pod(first.id)
    report = reap_once(world.deps, world.now, dry_run=True)
    assert report.dry_run and world.emu.ops("destroy") == [] and world.creates() == 1
    assert world.store.get_meta(runs.run_key(RUN_ID)) == run_before  # no claim, no attempt
    assert world.store.get_pod(first.id) == pod_before
    world.reap()  # the control: a real pass acts
    assert world.creates() == 2 and len(world.run().attempts) == 2
