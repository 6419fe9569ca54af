"""Reaper balance alerts per provider account: below balance_low_usd, above balance_cap_usd; on
transitions, nagged every nag_interval_s (the cap: daily), never a kill."""

from __future__ import annotations

import pytest
from fakes.watchdog import World

from gpuc.core.models import Balance
from gpuc.functions.reaper.alerts import CAP_NAG_S
from gpuc.testkit.fakes import outage


def set_balance(world: World, usd: float) -> None:
    def balance() -> Balance:
        world.provider._maybe_fail()
        return Balance(provider=world.provider.name, balance_usd=usd, spend_per_hour=0.5)

    world.provider.balance = balance  # type: ignore[method-assign]


@pytest.mark.parametrize(
    ("usd", "kind", "nag_s"), [(2.0, "balance_low:fake", None), (50.0, "balance_cap:fake", CAP_NAG_S)]
)
def test_a_balance_problem_alerts_once_then_nags_then_clears(
    world: World, usd: float, kind: str, nag_s: float | None
) -> None:
    world.register("p1", deadline_at=world.now + 3 * 86400)  # a day's nag outlives the default deadline
    set_balance(world, usd)
    world.reap()
    world.clock.advance(60)
    world.reap()
    assert world.kinds() == [kind]
    world.run(nag_s or world.settings.nag_interval_s, keep_alive=("p1",))
    assert world.kinds() == [kind, kind]
    set_balance(world, 10.0)
    world.ping("p1")
    world.reap()
    assert world.kinds() == [kind, kind, kind]  # the all-clear
    assert "again" in world.store.recent_notifications(1)[0].title
    assert world.provider.destroyed == []


def test_a_normal_balance_says_nothing(world: World) -> None:
    world.register("p1")
    set_balance(world, 10.0)
    world.reap()
    assert world.kinds() == []


def test_the_thresholds_come_from_settings(world: World) -> None:
    world.register("p1")
    set_balance(world, world.settings.balance_low_usd)  # at the threshold is not below it
    world.reap()
    set_balance(world, world.settings.balance_cap_usd)
    world.ping("p1")
    world.reap()
    assert world.kinds() == []


def test_a_blind_provider_gets_no_balance_alert(world: World) -> None:
    world.register("p1")
    set_balance(world, 1.0)
    world.provider.fail = outage()
    world.reap()
    assert "balance_low:fake" not in world.kinds()
    assert "blind" in world.kinds()


def test_dry_run_reports_a_balance_problem_and_sends_nothing(world: World) -> None:
    world.register("p1")
    set_balance(world, 1.0)
    report = world.reap(dry_run=True)
    assert any("balance low" in a.reason for a in report.actions)
    assert world.kinds() == []
