"""Money the reaper must not let go (tests/mutants/table_money.py): a pod
stuck provisioning past its deadline is destroyed; a deadline a clock jump passed is warned first and
destroyed a pass later (time to extend); the month's spend counts destroyed pods and pods on a provider
unread this pass; a pod pulled in last month is pulled in again in a new one; a rescued stray's lifetime
cap counts from when this watchdog first saw it; two deadline moves at once never lose one silently."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.watchdog import FakeProvider, World, make_world, outage

from gpuc.core import api
from gpuc.core.api import EndRequest
from gpuc.core.clock import FakeClock
from gpuc.core.ledger.months import month_window
from gpuc.functions.edge import HttpError
from gpuc.functions.reaper.trust import JUMP_PERIODS
from gpuc.functions.transitions import set_deadline

HOUR = 3600.0


def kinds(world: World, pod_id: str) -> list[str]:
    return [n.kind for n in world.store.recent_notifications(1000) if n.pod_id == pod_id]


# -- the deadline ------------------------------------------------------------------------------------------
def test_a_pod_stuck_provisioning_past_its_deadline_is_destroyed_not_only_alerted(world: World) -> None:
    deadline = world.now + HOUR
    world.register("p1", deadline_at=deadline)
    world.provider.set("p1", status="provisioning")  # never came up: no ping, billing all the same
    world.run(HOUR + 2 * world.settings.reaper_period_s)
    assert not world.provider.alive("p1"), "a pod past its deadline is ended whatever its status says"
    assert deadline <= world.provider.destroyed_at["p1"] <= deadline + world.settings.reaper_period_s
    assert world.pod("p1").ended_by == "reaper"


def test_a_deadline_a_clock_jump_passed_is_warned_first_and_destroyed_a_pass_later(world: World) -> None:
    period = world.settings.reaper_period_s
    world.register("p1", deadline_at=world.now + HOUR)
    world.reap()
    world.clock.advance(2 * HOUR)  # the laptop slept: the pass comes long after the last, past the deadline
    assert JUMP_PERIODS * period < 2 * HOUR
    world.ping("p1")
    jumped = world.reap()
    assert world.provider.alive("p1"), "destroyed in the pass that found the clock jumped: no time to extend"
    assert any(a.pod_id == "p1" and a.action == "mark" for a in jumped.actions)
    assert "mark" in kinds(world, "p1")  # warned: `gpuc extend p1 2h` moves it
    world.clock.advance(period)
    world.ping("p1")
    world.reap()
    assert not world.provider.alive("p1")


def test_the_warning_after_a_clock_jump_leaves_time_to_extend(world: World) -> None:
    period = world.settings.reaper_period_s
    world.register("p1", deadline_at=world.now + HOUR)
    world.reap()
    world.clock.advance(2 * HOUR)
    world.ping("p1")
    world.reap()
    answer = world.admin("POST", "/v1/pods/p1/deadline", api.DeadlineRequest(extend_s=2 * HOUR))
    assert answer.status == 200, answer.body
    world.clock.advance(period)
    world.ping("p1")
    world.reap()
    assert world.provider.alive("p1")


# -- the month's budget ------------------------------------------------------------------------------------
@pytest.fixture
def budgeted(home: Path, clock: FakeClock) -> World:
    """A $10 month, two providers: "fake" and "other" (the one that will not answer)."""
    other = FakeProvider(clock, name="other")
    return make_world(home, clock, providers=(other,), monthly_budget=10.0)


def test_the_month_counts_destroyed_pods_and_pods_on_a_provider_unread_this_pass(budgeted: World) -> None:
    world = budgeted
    other = world.deps.providers.get("other")
    assert isinstance(other, FakeProvider)
    world.register("gone", at_provider=False, started_at=world.now - 8 * HOUR)  # $4.00, ended and destroyed
    assert world.admin("POST", "/v1/pods/gone/end", EndRequest(end_at=world.now)).status == 200
    assert world.store.update_if("gone", {}, {"state": "destroyed"})
    world.register("far", provider=other, started_at=world.now - 8 * HOUR)  # $4.00 so far, its provider down
    world.register("p1", started_at=world.now - 4 * HOUR, deadline_at=world.now + 8 * HOUR)  # $2.00 so far
    world.ping("far")
    world.ping("p1")
    other.fail = outage("other")
    world.reap()
    [alert] = [n for n in world.store.recent_notifications(20) if n.kind == "budget"]
    assert "SPENT" in alert.title and "$10.00 spent of $10.00" in alert.message
    # Spent: the readable running pod ends within the pull-in (not later, at when its worst case would cross).
    assert world.pod("p1").deadline_at == world.now + world.settings.budget_pull_in_s


def test_a_pod_pulled_in_last_month_is_pulled_in_again_in_a_new_month(budgeted: World) -> None:
    world = budgeted
    start = month_window("2026-10")[0]
    world.clock.advance(start - world.now + 3 * HOUR)  # 03:00 on 1 October
    world.register("p1", started_at=world.now - HOUR, deadline_at=world.now + 40 * HOUR)
    world.store.update_if("p1", {}, {"budget_pulled_at": start - 24 * HOUR})  # pulled in in September
    world.ping("p1")
    world.reap()  # $0.50 spent, but $20.50 at worst: October's budget pulls it in
    rec = world.pod("p1")
    assert rec.budget_pulled_at == world.now
    assert rec.deadline_at is not None and rec.deadline_at < world.now + 40 * HOUR


# -- a rescued stray, and two moves at once ----------------------------------------------------------------
def test_a_rescued_strays_lifetime_cap_counts_from_first_sight_not_its_creation(world: World) -> None:
    world.provider.add("stray", created_at=world.now - 100 * HOUR)  # created long before this watchdog saw it
    world.reap()
    seen = world.pod("stray").registered_at
    assert world.pod("stray").origin == "adopted"
    keep = api.DeadlineRequest(deadline_at=world.now + 40 * HOUR, at_least=True)  # `gpuc keep stray --for 40h`
    answer = world.admin("POST", "/v1/pods/stray/deadline", keep)
    assert answer.status == 200, answer.body
    assert world.pod("stray").deadline_at == world.now + 40 * HOUR  # within 48 h of its rescue, not capped
    later = api.DeadlineRequest(deadline_at=seen + world.settings.max_lifetime_hours * HOUR)
    assert world.admin("POST", "/v1/pods/stray/deadline", later).status == 200


def test_two_deadline_moves_at_once_never_lose_one_silently(world: World) -> None:
    world.register("p1", deadline_at=world.now + HOUR)
    first = world.pod("p1")
    both = [first, first]  # two `gpuc extend p1 2h` that read the record at the same moment
    set_deadline(world.deps, both[0], world.now, api.DeadlineRequest(extend_s=2 * HOUR))
    with pytest.raises(HttpError) as caught:
        set_deadline(world.deps, both[1], world.now, api.DeadlineRequest(extend_s=2 * HOUR))
    assert caught.value.status == 409  # said, so the user (or the client) asks again from the new deadline
    assert world.pod("p1").deadline_at == world.now + 3 * HOUR
