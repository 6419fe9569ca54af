"""core/budget.py, the one piece of month arithmetic `up`, `gpuc ledger` and the reaper share: a pod's part
of a UTC month, a ledger row's own cost prorated the same way, every pod counted once, and whatever cannot be
priced listed as unknown, never $0."""

from __future__ import annotations

import pytest

from gpuc.core.api import PodRecord
from gpuc.core.budget import Burn, ledger_burns, month_spend, record_burn
from gpuc.core.ledger.months import month_window
from gpuc.core.ledger.rows import LedgerEntry, LedgerRow

HOUR = 3600.0
SEPT, OCT = month_window("2026-09")
NOW = SEPT + 10 * 24 * HOUR


def rec(pod_id: str, **fields: object) -> PodRecord:
    base: dict[str, object] = {
        "pod_id": pod_id,
        "provider": "runpod",
        "name": f"gpuc-{pod_id}",
        "experiment": "exp",
        "registered_at": NOW - 2 * HOUR,
        "price_per_hour": 1.0,
    }
    return PodRecord.model_validate({**base, **fields})


def entry(pod_id: str | None, start: str, end: str = "", price: str = "1", cost: str = "") -> LedgerEntry:
    row = LedgerRow(
        date=start[:10],
        experiment="exp",
        provider="runpod",
        gpu="x",
        price_per_hour=price,
        start=start,
        end=end,
        cost_usd=cost,
    )
    return LedgerEntry(pod_id=pod_id, row=row)


def test_only_the_part_inside_the_month_counts() -> None:
    straddle = Burn("s", "exp", SEPT - 10 * HOUR, SEPT + 5 * HOUR, 2.0)
    last_month = Burn("l", "exp", SEPT - 30 * HOUR, SEPT - 20 * HOUR, 100.0)
    running = Burn("r", "exp", NOW - 3 * HOUR, None, 0.5)
    unpriced_last_month = Burn("u", "exp", SEPT - 30 * HOUR, SEPT - 20 * HOUR, None)  # August's problem
    spend = month_spend([straddle, last_month, running, unpriced_last_month], NOW)
    assert (spend.closed_usd, spend.running_usd, spend.running_per_hour) == (10.0, 1.5, 0.5)
    assert spend.running == ("r",) and spend.month == "2026-09" and spend.unknown == ()


def test_a_written_cost_is_prorated_and_wins_over_the_price() -> None:
    burn = Burn("c", "exp", SEPT - 2 * HOUR, SEPT + 2 * HOUR, 1.0, cost_usd=10.0)
    assert month_spend([burn], NOW).closed_usd == pytest.approx(5.0)


def test_what_cannot_be_priced_is_unknown_never_zero() -> None:
    spend = month_spend(
        [
            record_burn(rec("free", price_per_hour=None)),
            record_burn(rec("gone", state="destroyed")),  # vanished outside gpuc, never pinged: end unknown
            record_burn(rec("absurd", price_per_hour=1.0, started_at=1e12)),
        ],
        NOW,
    )
    assert spend.total_usd == 0.0
    assert spend.unknown == ("free (no price)", "gone (gone, end unknown)", "absurd (a time that is not sane)")


def test_a_pod_gone_outside_gpuc_bills_until_its_last_ping() -> None:
    burn = record_burn(rec("gone", state="destroyed", last_seen=NOW - HOUR))
    assert month_spend([burn], NOW).closed_usd == pytest.approx(1.0)


def test_each_pod_counts_once_and_the_watchdog_completes_open_rows() -> None:
    entries = [
        entry("closed", "2026-09-05T00:00:00Z", "2026-09-05T02:00:00Z"),  # $2, the watchdog knows it too
        entry("open", "2026-09-10T20:00:00Z", price="3"),  # the watchdog says it ended after 1 h
        entry(None, "2026-09-03T00:00:00Z", "2026-09-03T01:00:00Z"),  # typed in by hand: $1
    ]
    records = [
        rec("closed", started_at=SEPT + 4 * 24 * HOUR, end_at=SEPT + 4 * 24 * HOUR + 2 * HOUR),
        rec("open", started_at=NOW - 4 * HOUR, end_at=NOW - 3 * HOUR, price_per_hour=None),
        rec("unseen", started_at=NOW - 2 * HOUR),  # the laptop died before its ledger row: $2 so far
    ]
    view = ledger_burns(entries, records)
    spend = month_spend(view.burns, NOW)
    assert (spend.closed_usd, spend.running_usd, spend.running) == (6.0, 2.0, ("unseen",))
    assert view.notes == []


def test_an_open_row_the_watchdog_does_not_know_is_unknown_and_said() -> None:
    view = ledger_burns([entry("lost", "2026-09-10T10:00:00Z")], [])
    spend = month_spend(view.burns, NOW)
    assert spend.total_usd == 0.0 and spend.unknown == ("lost (open row the watchdog does not know)",)
    assert "unknown to the watchdog" in view.notes[0]


def test_one_experiment_alone() -> None:
    burns = [Burn("a", "exp", NOW - HOUR, NOW, 1.0), Burn("b", "other", NOW - HOUR, NOW, 5.0)]
    assert month_spend(burns, NOW, experiment="exp").total_usd == pytest.approx(1.0)
