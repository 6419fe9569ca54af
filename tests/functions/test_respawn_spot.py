"""The watchdog's recovery pass against the Vast emulator (functions/reaper/respawn.py): what it rents,
and what it never does (rent while the paused instance may still bill, act on one reading)."""

from __future__ import annotations

import pytest

from gpuc.core.errors import ProviderError
from gpuc.core.pod import RESUME_ENV
from gpuc.functions.reaper.respawn import recover_pass
from gpuc.testkit.drill_spot import BID, WAIT_S, SpotWorld, _world


def outbid_and_wait(world: SpotWorld) -> None:
    world.emu.outbid(world.run.pod_ids[-1], by=BID + 0.05)
    assert recover_pass(world.vast, world.run, world.clock.now(), WAIT_S).action == "wait"
    world.clock.advance(WAIT_S + 1)


def test_a_recovery_rents_the_same_run_at_the_users_bid_resuming_from_the_push() -> None:
    world, tmp = _world(recover=2)
    with tmp:
        outbid_and_wait(world)
        decision = recover_pass(world.vast, world.run, world.clock.now(), WAIT_S)
        assert decision.action == "rerent"
        [alive] = world.emu.alive()
        # same run (its env), never above the bid, named for its attempt (the previous one may still be listed)
        assert alive.bid == BID and alive.label == f"{world.run.spec.name}-a2"
        assert alive.env[RESUME_ENV] == world.run.results_at and alive.env["GPUC_RUN_ID"] == world.run.spec.run_id
        assert world.run.told == ["outbid: recovering, attempt 2 of 3, $0.00 spent of $0.45"]
        world.close()


def test_nothing_is_rented_while_the_paused_instance_is_not_confirmed_gone() -> None:
    world, tmp = _world(recover=2)
    with tmp:
        outbid_and_wait(world)
        world.emu.destroy_lag_polls = 50  # still listed after the destroy
        with pytest.raises(ProviderError, match="still listed"):
            recover_pass(world.vast, world.run, world.clock.now(), WAIT_S)
        assert world.emu.ops("create") == world.emu.ops("create")[:1]  # the first attempt's only
        assert len(world.run.pod_ids) == 1
        world.close()


def test_a_pod_that_resumed_on_its_own_is_left_alone() -> None:
    world, tmp = _world(recover=2)
    with tmp:
        outbid_and_wait(world)
        world.emu.outbidder_leaves(world.run.pod_ids[-1])
        for _ in range(3):
            recover_pass(world.vast, world.run, world.clock.now(), WAIT_S)
        assert world.run.paused_since is None and len(world.emu.ops("destroy")) == 0
        world.close()


def test_a_re_rent_that_fails_ends_recovery_with_nothing_billing_and_says_so() -> None:
    world, tmp = _world(recover=2)
    with tmp:
        outbid_and_wait(world)
        world.emu.faults.add(op="create", kind="success_false", times=None)
        decision = recover_pass(world.vast, world.run, world.clock.now(), WAIT_S)
        assert decision.action == "rerent" and world.run.done
        assert world.emu.alive() == [] and "re-rent failed" in world.run.told[-1]
        assert "kept at file://" in world.run.told[-1]
        world.close()


def test_two_readings_that_disagree_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    world, tmp = _world(recover=2)
    with tmp:
        outbid_and_wait(world)
        real = world.vast.get
        answers = iter([real(world.run.pod_ids[-1]), None])  # paused, then "gone": uncertain
        monkeypatch.setattr(world.vast, "get", lambda pod_id: next(answers))
        assert recover_pass(world.vast, world.run, world.clock.now(), WAIT_S).action == "none"
        assert len(world.emu.ops("destroy")) == 0 and len(world.emu.alive()) == 1
        world.close()
