from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fakes.ctx import answering
from fakes.money import T0

from gpuc.client.context import Ctx
from gpuc.client.money.commands import ledger
from gpuc.client.money.reconcile import SOURCE_FACTORIES, BillingRecord, ReconcileReport, billing_sources, reconcile
from gpuc.core.api import StatusResponse
from gpuc.core.billing import BillingKind
from gpuc.core.clock import iso
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.rows import LedgerEntry, LedgerRow
from gpuc.core.ledger.store import Ledger
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings

HOUR = 3600.0
MONTH = "2026-09"


def entry(
    pod_id: str | None,
    start: float,
    hours: float | None,
    price: float = 1.0,
    provider: str = "runpod",
    experiment: str = "exp",
) -> LedgerEntry:
    end = "" if hours is None else iso(start + hours * HOUR)
    cost = "" if hours is None else f"{price * hours:.4f}"
    row = LedgerRow(
        date=iso(start)[:10],
        experiment=experiment,
        provider=provider,
        gpu="RTX 4090",
        price_per_hour=str(price),
        start=iso(start),
        end=end,
        cost_usd=cost,
    )
    return LedgerEntry(pod_id=pod_id, row=row)


def charge(
    pod_id: str, start: float, hours: float, amount: float, kind: BillingKind = "gpu", provider: str = "runpod"
) -> BillingRecord:
    return BillingRecord(
        provider=provider, pod_id=pod_id, start=start, end=start + hours * HOUR, amount_usd=amount, kind=kind
    )


def run(entries: list[LedgerEntry], records: list[BillingRecord]) -> ReconcileReport:
    return reconcile(entries, records, MONTH, ["runpod"])


def test_a_row_that_matches_its_charges_is_clean() -> None:
    report = run(
        [entry("a", T0, 2.0)],
        [charge("a", T0, 1, 0.99), charge("a", T0 + HOUR, 1, 0.98), charge("a", T0, 2, 0.02, "disk")],
    )
    assert report.clean and (report.rows_checked, report.rows_ok) == (1, 1)
    assert report.ledger_total_usd == pytest.approx(2.0) and report.billed_total_usd == pytest.approx(1.99)


@pytest.mark.parametrize(
    ("billed", "flagged"), [(1.09, False), (0.91, False), (1.11, True), (0.89, True), (1.30, True)]
)
def test_rows_that_differ_by_more_than_ten_percent_are_flagged(billed: float, flagged: bool) -> None:
    report = reconcile([entry("a", T0, 1.0, provider="vast")], [charge("a", T0, 1, billed, provider="vast")], MONTH,
                       ["vast"])  # fmt: skip
    assert bool(report.mismatches) == flagged
    if flagged:
        (m,) = report.mismatches
        assert m.reason == "amount" and m.ledger_usd == 1.0 and m.billed_usd == billed
        assert m.diff_pct == pytest.approx((billed - 1.0) * 100)


def test_a_gap_under_a_cent_is_rounding_not_a_mismatch() -> None:
    report = run([entry("a", T0, 0.01, price=0.5)], [charge("a", T0, 0.01, 0.0095)])
    assert report.clean


def test_charges_with_no_ledger_row_are_reported_once_per_pod() -> None:
    report = run(
        [entry("a", T0, 1.0)],
        [
            charge("a", T0, 1, 1.0),
            charge("ghost", T0, 1, 0.4),
            charge("ghost", T0 + HOUR, 1, 0.4),
            charge("ghost", T0, 2, 0.1, "disk"),
        ],
    )
    (u,) = report.unmatched
    assert (u.pod_id, u.kinds) == ("ghost", ["disk", "gpu"]) and u.amount_usd == pytest.approx(0.9)
    assert (u.first, u.last) == (T0, T0 + 2 * HOUR)


def test_disk_billed_after_the_end_is_stopped_disk_not_part_of_the_run() -> None:
    records = [
        charge("a", T0, 1, 1.0),
        charge("a", T0, 1, 0.01, "disk"),
        charge("a", T0 + 2 * HOUR, 24, 0.48, "disk"),
    ]  # stopped, not destroyed: its disk bills on
    report = run([entry("a", T0, 1.0)], records)
    (d,) = report.disk_while_stopped
    assert (d.pod_id, d.records) == ("a", 1) and d.amount_usd == pytest.approx(0.48)
    assert not report.mismatches  # the run itself matches once the stopped disk is set apart


def test_disk_billed_in_a_window_without_compute_is_stopped_disk() -> None:
    # Stopped from hour 1 to hour 3 mid-run, then resumed: only the disk billed in between.
    records = [
        charge("a", T0, 1, 1.0),
        charge("a", T0 + HOUR, 2, 0.05, "disk"),
        charge("a", T0 + 3 * HOUR, 1, 1.0),
    ]
    report = run([entry("a", T0, 4.0, price=0.5)], records)
    assert [d.amount_usd for d in report.disk_while_stopped] == [pytest.approx(0.05)]
    assert not report.mismatches


def test_an_open_row_that_is_billed_and_a_closed_row_that_is_not_are_flagged() -> None:
    report = reconcile(
        [entry(p, T0, h, provider="vast") for p, h in (("open", None), ("silent", 1.0), ("quiet", None))],
        [charge("open", T0, 1, 1.0, provider="vast")],
        MONTH,
        ["vast"],
    )
    assert sorted((m.pod_id, m.reason) for m in report.mismatches) == [
        ("open", "open_row_billed"),
        ("silent", "no_charges"),
    ]
    assert report.rows_checked == 3 and report.rows_ok == 1


@pytest.mark.parametrize("billed", [0.5, None], ids=["discounted", "not-billed"])
def test_a_runpod_row_billed_below_its_ledger_cost_is_listed_with_the_savings_plan_reason(billed: float | None) -> None:
    """RunPod's pod `cost`, which the ledger prices with, leaves out savings plans (its v2 docs): a bill below the
    ledger is what a plan looks like, and costs the user nothing. Listed and explained; not a mismatch."""
    records = [] if billed is None else [charge("a", T0, 1, billed)]
    report = run([entry("a", T0, 1.0)], records)
    assert report.clean and report.mismatches == []
    (below,) = report.below_ledger
    assert (below.pod_id, below.reason) == ("a", "amount" if billed else "no_charges")
    assert (report.rows_checked, report.rows_ok) == (1, 0)
    [note] = report.notes
    assert note.startswith("runpod:") and "savings plans" in note


def test_a_runpod_row_billed_above_its_ledger_cost_is_still_a_mismatch() -> None:
    report = run([entry("a", T0, 1.0)], [charge("a", T0, 1, 1.5)])
    assert [m.reason for m in report.mismatches] == ["amount"] and report.below_ledger == [] and not report.clean
    assert report.notes == []


def test_an_unpriced_row_cannot_be_checked() -> None:
    e = entry("a", T0, 1.0)
    e.row.price_per_hour = e.row.cost_usd = ""
    (m,) = run([e], [charge("a", T0, 1, 1.0)]).mismatches
    assert m.reason == "unpriced_row" and m.ledger_usd is None and m.diff_pct is None


def test_rows_without_a_pod_id_other_months_and_other_providers_are_left_alone() -> None:
    entries = [
        entry(None, T0, 1.0),
        entry("aug", T0 - 5 * 24 * HOUR, 1.0),
        entry("v", T0, 1.0, provider="vast"),
    ]
    records = [charge("aug", T0 - 5 * 24 * HOUR, 1, 1.0), charge("v", T0, 1, 9.0, provider="vast")]
    report = run(entries, records)
    assert report.unlinked_rows == 1 and report.rows_checked == 0
    assert report.clean and report.billed_total_usd == pytest.approx(1.0)


def test_bad_months_and_negative_amounts_are_refused() -> None:
    with pytest.raises(ConfigError):
        reconcile([], [], "September", ["runpod"])
    with pytest.raises(ValueError):
        charge("a", T0, 1, -1.0)


class FakeBilling:
    def __init__(self, records: list[BillingRecord]) -> None:
        self.records = records
        self.months: list[str] = []

    def billing(self, month: str) -> list[BillingRecord]:
        self.months.append(month)
        return self.records


def test_billing_sources_need_a_configured_account_and_a_source() -> None:
    with pytest.raises(ConfigError) as err:
        billing_sources(Settings())
    assert err.value.hint and "RUNPOD_API_KEY" in err.value.hint
    with pytest.raises(ConfigError) as err:
        billing_sources(Settings(), only=["local"])  # runpod and vast have sources now (tests/reconcile)
    assert "local" in err.value.message and err.value.hint


def test_a_registered_source_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    source = FakeBilling([])
    monkeypatch.setitem(SOURCE_FACTORIES, "vast", lambda settings: source)
    assert billing_sources(Settings(vast_api_key="v" * 40)) == {"vast": source}  # type: ignore[arg-type]
    assert billing_sources(Settings(), only=["vast"]) == {"vast": source}


def test_the_cli_exits_1_and_names_each_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    book = Ledger(load_settings().ledger)
    book.start("p1", provider="vast", experiment="kv", gpu="RTX 4090", price_per_hour=0.4, start_ts=T0)
    book.end("p1", end_ts=T0 + HOUR)
    source = FakeBilling(
        [
            charge("p1", T0, 1, 0.6, provider="vast"),
            charge("p9", T0, 1, 0.2, provider="vast"),
            charge("p1", T0 + 5 * HOUR, 5, 0.3, "disk", provider="vast"),
        ]
    )
    monkeypatch.setitem(SOURCE_FACTORIES, "vast", lambda settings: source)
    quiet = Ctx(watchdog=answering(StatusResponse(server_time=T0, reaper_period_s=300)))
    args = ["reconcile", "--month", MONTH, "--provider", "vast"]
    result = CliRunner().invoke(ledger, args, obj=quiet)
    assert result.exit_code == 1, result.output
    assert "mismatch [amount] vast p1 kv: ledger $0.40, billed $0.60 (+50 %)" in result.output
    assert "no ledger row: vast p9 billed $0.20" in result.output
    assert "disk billed while stopped: vast p1 $0.30" in result.output
    assert source.months == [MONTH]
    body = json.loads(CliRunner().invoke(ledger, [*args, "--json"], obj=quiet).output)
    assert [m["reason"] for m in body["mismatches"]] == ["amount"]
    assert [u["pod_id"] for u in body["unmatched"]] == ["p9"]


def test_the_cli_says_when_the_ledger_matches_the_bill(monkeypatch: pytest.MonkeyPatch) -> None:
    book = Ledger(load_settings().ledger)
    book.start("p1", provider="vast", experiment="kv", gpu="RTX 4090", price_per_hour=0.4, start_ts=T0)
    book.end("p1", end_ts=T0 + HOUR)
    monkeypatch.setitem(
        SOURCE_FACTORIES,
        "vast",
        lambda settings: FakeBilling([charge("p1", T0, 1, 0.41, provider="vast")]),
    )
    quiet = Ctx(watchdog=answering(StatusResponse(server_time=T0, reaper_period_s=300)))
    result = CliRunner().invoke(ledger, ["reconcile", "--month", MONTH, "--provider", "vast"], obj=quiet)
    assert result.exit_code == 0, result.output
    assert "the ledger matches the bill" in result.output and "1/1 row(s) match" in result.output
