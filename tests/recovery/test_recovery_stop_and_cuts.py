"""A re-rent against the user's stop and against its own interruption (functions/recovery/rerent.py), on the
Vast emulator through the real VastProvider, the real routes and a real store, on a FakeClock.

- A stop always wins: asked at any step of a re-rent (before the paused instance's destroy, after it, after
  the create, after the register, after the ticket is saved), the run ends with no instance left billing.
- A re-rent cut at any step (a store write that fails, a Lambda that times out) is seen through by the next
  pass: the pod it rented boots (its ticket made valid) or, if the stop came, is destroyed; the user hears
  which. Before that, the pod's boot is told "later" (409), never "never" (403).
- The same machine: a 2-GPU run is re-rented on 2 GPUs, bid per GPU as `up` bid, and its new pod verifies 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes import recovery as rec_fixtures

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError
from gpuc.core.pod import Pod
from gpuc.functions.recovery import claim, rerent, runs, watch
from gpuc.testkit.spot_world import (
    BID,
    CUT_STEPS,
    OFFER,
    PLANTED_SECRET,
    RUN_ID,
    STOP_STEPS,
    WAIT_S,
    RecWorld,
    at_step,
    make_rec_world,
)  # fmt: skip

# The recovering run's worlds (tests/fakes/recovery.py), on SQLite and on both stores
world, any_world = rec_fixtures.world, rec_fixtures.any_world


def billing(world: RecWorld) -> list[int]:
    return world.billing()


@pytest.mark.parametrize("step", STOP_STEPS[:-1])
def test_a_stop_at_any_step_of_a_re_rent_leaves_no_instance_billing(any_world: RecWorld, step: str) -> None:
    world = any_world
    world.up()
    world.outbid_and_wait()
    world.stop_at(step)
    world.reap()  # the pass that re-rents, with the stop landing at `step`
    run = world.run()
    assert billing(world) == [], step
    assert run.done and run.stopped_why == rerent.YOU_STOPPED and run.acting is None
    assert run.request.kit.secrets == {}  # the run ended: its secrets went with it
    rented = world.creates() - 1
    assert rented == (0 if step in ("before the destroy", "after the destroy") else 1), step  # nothing after a stop
    assert len(run.attempts) == 1 + rented and all(a.end is not None for a in run.attempts)  # every minute counted
    [told] = [m.message for m in world.outbox() if m.kind == rerent.STOPPED_KIND]
    if rented:
        new = run.attempts[-1].pod_id
        assert f"({new}) is destroyed and confirmed gone" in told
        assert world.boot(new, world.ticket_of(new)).status == 403  # never boots
        assert world.store.get_pod(new) is None or world.store.get_pod(new).state == "destroyed"  # type: ignore[union-attr]
    world.reap()
    assert world.creates() == 1 + rented and billing(world) == []  # and no later pass rents again


def test_a_stop_after_the_ticket_is_saved_finds_the_attempt_in_the_run_for_down_to_destroy(world: RecWorld) -> None:
    world.up()
    world.outbid_and_wait()
    world.stop_at("after the ticket is saved")
    world.reap()
    new = world.latest()
    assert world.creates() == 2 and billing(world) == [int(new)]  # rented before the stop: the run's live attempt
    assert world.down_after() == [new]
    world.reap()
    assert billing(world) == [] and world.run().done


def test_a_stop_during_the_act_is_said_as_what_the_watchdog_is_doing(world: RecWorld) -> None:
    """While a pass is inside a re-rent, the run says so (`busy`): `gpuc down` and the phone never say that
    nothing bills meanwhile."""
    world.up()
    world.outbid_and_wait()
    said: list[str | None] = []
    world.after_write(at_step("rented"), lambda: said.append(runs.busy_with(world.run())))
    world.stop_at("after the register")
    world.reap()
    assert said and said[0] is not None and said[0].startswith("renting attempt 2 (pod ")
    assert billing(world) == []


def test_a_destroy_that_does_not_confirm_after_a_stop_keeps_the_claim_and_the_next_pass_ends_it(
    world: RecWorld,
) -> None:
    world.up()
    world.outbid_and_wait()
    world.stop_at("after the register")
    real = world.vast.destroy
    calls: list[str] = []

    def flaky(pod_id: str) -> Any:
        calls.append(pod_id)
        if len(calls) == 2:  # the new pod's first destroy: still listed
            raise ProviderError(f"instance {pod_id} is still listed after the destroy", provider="vast")
        return real(pod_id)

    world.vast.destroy = flaky  # type: ignore[method-assign]
    world.reap()
    run = world.run()
    assert not run.done and run.acting is not None and run.acting.pod_id is not None  # kept: it still bills
    assert runs.busy_with(run) == f"destroying attempt 2 (pod {run.acting.pod_id}), rented as you asked to stop"
    world.clock.advance(claim.ACT_LEASE_S + 1)
    world.reap()
    assert billing(world) == [] and world.run().done and world.creates() == 2


# -- a re-rent cut at any step ---------------------------------------------------------------------------


@pytest.mark.parametrize("step", CUT_STEPS)
def test_a_re_rent_cut_at_any_step_boots_after_the_next_pass_and_the_user_is_told(
    any_world: RecWorld, step: str
) -> None:
    world = any_world
    world.up()
    world.outbid_and_wait()
    world.cut_at(step)
    world.reap()  # cut at `step`: the claim stays (its lease)
    assert world.creates() == 2 and world.run().acting is not None
    new = next(str(i.id) for i in world.emu.alive())
    first_boot = world.boot(new, world.ticket_of(new))
    # Not yet registered by the claim: "later" (onstart asks again), never "never"; registered: it boots.
    assert first_boot.status == (200 if step == "before the ticket is saved" else 409), first_boot.body
    world.clock.advance(claim.ACT_LEASE_S + 1)
    world.reap()  # the next pass takes the claim over: it finds the pod by its attempt's name
    run = world.run()
    assert world.creates() == 2 and run.acting is None and run.latest.pod_id == new and not run.done
    if first_boot.status == 409:
        answer = world.boot(new, world.ticket_of(new))
        assert answer.status == 200 and api.BootAnswer.model_validate(answer.body).kit.secrets == {
            "HF_TOKEN": PLANTED_SECRET
        }
    assert world.boot(new, world.ticket_of(new)).status == 403  # spent: once only
    told = [m.message for m in world.outbox() if m.kind == rerent.RECOVERING_KIND]
    assert len(told) == 1 and "A pass was cut short after renting it" in told[0]
    assert billing(world) == [int(new)]


def test_a_re_rent_cut_after_its_create_is_destroyed_when_the_stop_came_meanwhile(world: RecWorld) -> None:
    world.up()
    world.outbid_and_wait()
    world.cut_at("after the create")
    world.reap()
    new = next(str(i.id) for i in world.emu.alive())
    world.ask_stop()
    assert world.boot(new, world.ticket_of(new)).status == 403  # a stop is coming for it: never
    world.clock.advance(claim.ACT_LEASE_S + 1)
    world.reap()
    run = world.run()
    assert billing(world) == [] and run.done and world.creates() == 2
    [told] = [m.message for m in world.outbox() if m.kind == rerent.STOPPED_KIND]
    assert f"({new}) is destroyed and confirmed gone" in told
    assert run.attempts[-1].pod_id == new and run.attempts[-1].end is not None  # its minutes counted


def test_a_pass_cut_after_writing_its_intent_but_before_the_create_rents_once(world: RecWorld) -> None:
    world.up()
    world.outbid_and_wait()
    real = world.vast.create
    world.vast.create = _raises  # type: ignore[method-assign, assignment]
    with pytest.raises(RuntimeError):
        watch.recover_one(_pass(world), RUN_ID)  # died at its create: nothing rented
    world.vast.create = real  # type: ignore[method-assign]
    assert world.creates() == 1 and world.run().acting.step == "renting"  # type: ignore[union-attr]
    world.clock.advance(claim.ACT_LEASE_S + 1)
    world.reap()
    assert world.creates() == 2 and len(world.run().attempts) == 2 and len(billing(world)) == 1


def _raises(*args: object) -> Pod:
    raise RuntimeError("the Lambda timed out here")


def _pass(world: RecWorld) -> Any:
    from gpuc.functions.reaper.state import Pass

    return Pass(world.deps, world.now, False, api.ReapReport(ran_at=world.now))


def test_only_the_pod_the_claim_rented_boots_before_its_ticket_is_saved(world: RecWorld) -> None:
    """Cut after its register: the right ticket is valid for the pod the claim names, and for no other pod id
    (the ticket shows in Vast's listing of the new pod: anyone with the account's listing could try it)."""
    world.up()
    world.outbid_and_wait()
    world.cut_at("before the ticket is saved")
    world.reap()
    new = world.run().acting.pod_id  # type: ignore[union-attr]
    assert new is not None
    other = world.vast.create(world.spec().model_copy(update={"run_id": "spot-other", "offer_id": "11684745"}))
    assert world.boot(other.id, world.ticket_of(new)).status in (403, 409)
    assert world.boot(new, world.ticket_of(new)).status == 200


def test_a_boot_ticket_for_an_attempt_nobody_is_renting_is_403(world: RecWorld) -> None:
    world.up()
    key = world.deps.watchdog_key.get_secret_value()  # type: ignore[union-attr]
    forged = runs.boot_ticket(key, RUN_ID, 2, world.now)  # the right shape, the right key, no claim behind it
    assert world.boot("31009999", forged).status == 403
    assert world.boot("31009999", "x" * 43).status == 403


# -- the same machine ------------------------------------------------------------------------------------

X2_RECOVERY = 11684746  # the emulator's 2 x RTX 4090 offer (min_bid 0.30 for the machine)


def test_a_2_gpu_run_is_re_rented_on_2_gpus_at_its_bid_per_gpu_and_verifies_2(home: Path, clock: FakeClock) -> None:
    world = make_rec_world(home, clock)
    world.gpus = 2
    try:
        world.up()
        world.outbid_and_wait()
        world.reap()
        new = world.emu.instances[int(world.latest())]
        assert new.offer.num_gpus == 2 and new.offer.id == X2_RECOVERY  # not a cheaper 1-GPU machine listed
        assert new.bid == pytest.approx(2 * BID)  # the per-GPU bid x 2, as `up` sent it, never more
        booted = api.BootAnswer.model_validate(world.boot(world.latest(), world.ticket_of(world.latest())).body)
        assert booted.kit.config["gpu_count"] == 2  # the new pod's verification expects both
    finally:
        world.close()


def test_a_2_gpu_run_with_no_2_gpu_offer_under_its_cap_stops_rather_than_rent_one_gpu(
    home: Path, clock: FakeClock
) -> None:
    world = make_rec_world(home, clock)
    world.gpus = 2
    world.emu.offers[X2_RECOVERY].min_bid = 0.50  # the machine's floor above the run's cap (2 x 0.22)
    try:
        world.up()
        world.outbid_and_wait()
        world.reap()
        run = world.run()
        assert world.creates() == 1 and run.done and "no offer at or under your price cap" in (run.stopped_why or "")
        assert billing(world) == []
    finally:
        world.close()


def test_a_floor_that_rose_past_the_cap_before_the_create_rents_elsewhere_or_nothing(world: RecWorld) -> None:
    """The offer is listed again just before the create: a floor that moved past the cap since the choice is
    never bid at (the create would be refused, or worse, win above what the user allowed)."""
    world.up()
    world.outbid_and_wait()
    real = world.vast.offers
    calls: list[int] = []

    def offers(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the re-check, after the decision
            for offer in world.emu.offers.values():
                offer.min_bid = BID + 0.01
        return real(*args, **kwargs)

    world.vast.offers = offers  # type: ignore[method-assign]
    world.reap()
    run = world.run()
    assert world.creates() == 1 and run.done and billing(world) == []
    assert "no offer at or under your price cap" in (run.stopped_why or "") and "now" in (run.stopped_why or "")


# -- a frozen instance bills its GPU ---------------------------------------------------------------------


def test_a_frozen_instance_counts_its_gpu_in_the_envelope_and_the_ledger(world: RecWorld) -> None:
    """Vast's `frozen` ("GPU charges apply") reads as paused: the recovery waits as for an outbid, but the
    attempt's GPU is counted the whole time, in the run's spend (the envelope's check) and in what the ledger
    is given (RunRecovery)."""
    world.up()
    start = world.now
    world.emu.set_status(world.latest(), "frozen")
    world.reap()
    run = world.run()
    assert run.paused_since == world.now and run.latest.paused_at is None  # the wait starts; the GPU bills on
    world.clock.advance(WAIT_S - 1)
    world.reap()
    view = api.RunRecovery.model_validate(world.admin("GET", f"/v1/runs/{RUN_ID}").body)
    hours = (world.now - start) / 3600
    assert view.spent_usd == pytest.approx((BID + run.latest.disk_per_hour) * hours, rel=1e-4)


def test_an_outbid_instance_frozen_later_counts_its_gpu_again(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    assert world.run().latest.paused_at is not None  # outbid: the GPU stopped billing
    world.emu.set_status(world.latest(), "frozen")
    world.clock.advance(60)
    world.reap()
    assert world.run().latest.paused_at is None  # frozen since: billed from the pause on, never less


def test_the_phones_stop_during_a_re_rent_says_what_the_watchdog_is_doing(world: RecWorld) -> None:
    """The phone cannot wait for the pass: its answer says plainly that a re-rent is under way and what happens
    to it, and the pass then destroys what it rented."""
    from gpuc.functions.actions import verbs

    world.up(recover=3)
    world.outbid_and_wait()
    world.reap()  # attempt 2, and the phone's notification with its stop button
    [note] = [m for m in world.outbox() if m.kind == rerent.RECOVERING_KIND]
    world.emu.offers[int(OFFER)].winning_bid = None  # the first machine's higher bidder left: it is offered again
    world.outbid_and_wait()
    world.cut_at("after the register")
    world.reap()  # attempt 3 rented, then the pass cut: the claim stays
    sentence = verbs.act(world.deps, note.actions[0].token, world.now, "ntfy").sentence
    assert "right now the watchdog is destroying attempt 3 (pod " in sentence and "confirmed gone" in sentence
    world.clock.advance(claim.ACT_LEASE_S + 1)
    world.reap()
    assert billing(world) == [] and world.run().done
