"""The month's budget in the reaper (functions/reaper/budget.py), on both stores: an alert at the alert fraction
(once, nagged, all-clear); at 100 % every running pod's deadline pulled in to now + budget_pull_in_s (sooner
than 100 %, once the running pods' worst case would cross it: tests/money/test_money_worst_case.py) in the
store, warned, once per pod, and never again over the user's own extension; a dry run changes nothing; a
pod with no price is UNKNOWN, never $0; a pod that is not gpuc's, or not billing, is never pulled in."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.watchdog import World, make_world

from gpuc.core.api import EndRequest
from gpuc.core.clock import FakeClock, iso

HOUR = 3600.0
BUDGET = 10.0  # $; the pods below cost $0.50/h


@pytest.fixture
def world(any_world: World) -> World:
    """Both stores (conftest's any_world: SQLite, and DynamoDB on moto), with a $10 month."""
    any_world.settings = any_world.deps.settings = any_world.settings.with_overrides(monthly_budget=BUDGET)
    return any_world


def running_for(world: World, pod_id: str, hours: float, left: float = 6.0) -> None:
    """A pod that has billed `hours` so far at $0.50/h, with a deadline `left` hours ahead, pinging."""
    world.register(pod_id, started_at=world.now - hours * HOUR, deadline_at=world.now + left * HOUR)
    world.ping(pod_id)


def budget_notes(world: World) -> list[str]:
    return [n.kind for n in world.store.recent_notifications(1000) if n.kind.startswith("budget")]


def test_the_alert_goes_out_once_at_the_fraction_then_nags_then_clears(world: World) -> None:
    running_for(world, "p1", 15.0, left=2.0)  # $7.50: 75 %; at worst $8.50 by its deadline: no pull-in
    world.reap()
    assert budget_notes(world) == []
    world.clock.advance(HOUR)  # $8.00: 80 %
    world.ping("p1")
    world.reap()
    assert budget_notes(world) == ["budget"]
    [alert] = [n for n in world.store.recent_notifications(10) if n.kind == "budget"]
    assert "80 %" in alert.title and "$8.00 spent of $10.00" in alert.message
    assert world.pod("p1").budget_pulled_at is None  # an alert, no pull-in below 100 %
    world.clock.advance(600)
    world.ping("p1")
    world.reap()
    assert budget_notes(world) == ["budget"]  # not every pass
    world.deps.settings = world.settings.with_overrides(monthly_budget=100.0)
    world.ping("p1")
    world.reap()
    assert budget_notes(world) == ["budget", "budget"]
    assert "again" in world.store.recent_notifications(1)[0].title


def test_at_100_percent_the_running_pods_deadline_is_pulled_in_warned_once(world: World) -> None:
    running_for(world, "p1", 20.0)  # $10.00: 100 %
    running_for(world, "p2", 0.0)
    soon = world.now + 10 * 60
    world.store.update_if("p2", {}, {"deadline_at": soon})  # already ends sooner: kept
    world.reap()
    pull_in = world.now + world.settings.budget_pull_in_s
    assert world.pod("p1").deadline_at == pull_in and world.pod("p1").budget_pulled_at == world.now
    assert world.pod("p2").deadline_at == soon
    [told] = [n for n in world.store.recent_notifications(10) if n.kind == "budget_pull_in"]
    assert f"p1 (exp) at {iso(pull_in)}" in told.message and f"p2 (exp) at {iso(soon)}" in told.message
    assert "gpuc keep p1 --for 2h" in told.message
    assert "SPENT" in next(n for n in world.store.recent_notifications(10) if n.kind == "budget").title
    world.clock.advance(world.settings.reaper_period_s)
    world.ping("p1")
    world.reap()
    assert budget_notes(world).count("budget_pull_in") == 1
    assert world.pod("p1").deadline_at == pull_in
    assert world.provider.destroyed == []  # the deadline ends it (agent, deadline rule), not this module


def test_a_later_extension_by_the_user_is_not_pulled_in_again(world: World) -> None:
    running_for(world, "p1", 20.0)
    world.reap()
    extended = world.now + 3 * HOUR
    world.store.update_if("p1", {}, {"deadline_at": extended})  # `gpuc keep p1 --for 3h`
    for _ in range(3):
        world.clock.advance(world.settings.reaper_period_s)
        world.ping("p1")
        world.reap()
    assert world.pod("p1").deadline_at == extended
    assert budget_notes(world).count("budget_pull_in") == 1


def test_a_dry_run_reports_and_changes_nothing(world: World) -> None:
    running_for(world, "p1", 20.0)
    before = world.pod("p1")
    report = world.reap(dry_run=True)
    assert any(a.pod_id == "p1" and "would be pulled in" in a.reason for a in report.actions)
    assert any("budget" in a.reason for a in report.actions if a.action == "alert")
    after = world.pod("p1")
    assert (after.deadline_at, after.budget_pulled_at) == (before.deadline_at, None)
    assert budget_notes(world) == []


def test_a_pod_without_a_price_is_unknown_never_zero(world: World) -> None:
    running_for(world, "p1", 16.0)  # $8.00: 80 %
    world.register("free", price_per_hour=None, started_at=world.now - HOUR)
    world.reap()
    [alert] = [n for n in world.store.recent_notifications(10) if n.kind == "budget"]
    assert "$8.00 spent" in alert.message
    assert "1 pod(s) UNKNOWN, not counted: free (no price)" in alert.message


def test_a_pod_that_is_not_gpucs_or_not_billing_is_never_pulled_in(world: World) -> None:
    running_for(world, "p1", 20.0)
    running_for(world, "foreign", 0.0)
    running_for(world, "kept", 0.0)
    world.provider.set("foreign", managed=False)
    world.provider.set("kept", status="stopped")  # kept for its results: a budget does not end it
    deadline = world.pod("foreign").deadline_at
    world.reap()
    assert world.pod("foreign").deadline_at == deadline and world.pod("foreign").budget_pulled_at is None
    assert world.pod("kept").deadline_at == deadline and world.pod("kept").budget_pulled_at is None
    assert world.pod("p1").budget_pulled_at is not None


def test_ended_pods_count_with_their_part_of_this_month(world: World) -> None:
    """The watchdog has no ledger: an ended pod's record is what it spent; last month's part is not this one's."""
    world.register("old", started_at=world.now - 29 * 24 * HOUR)
    assert world.admin("POST", "/v1/pods/old/end", EndRequest(end_at=world.now - 25 * 24 * HOUR)).status == 200
    world.register("done", started_at=world.now - 10 * HOUR)
    assert world.admin("POST", "/v1/pods/done/end", EndRequest(end_at=world.now - 4 * HOUR)).status == 200
    running_for(world, "p1", 10.0)  # $5.00 running, $3.00 ended (done's 6 h); old's 4 days were August's
    world.reap()
    [alert] = [n for n in world.store.recent_notifications(10) if n.kind == "budget"]
    assert "$8.00 spent of $10.00 (80 %): $3.00 ended, $5.00 running now" in alert.message


def test_no_budget_set_means_no_budget_work(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock)
    running_for(world, "p1", 1000.0)
    world.reap()
    assert budget_notes(world) == [] and world.pod("p1").budget_pulled_at is None
    world.store.close()
