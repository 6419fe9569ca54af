"""The money that is going. Running pods in the month's figures as "running, so far" (counted
once: never again after their row closes), notes on any run, and a live pod's open row is no mismatch."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from fakes.money import T0

from gpuc.client.money import reconcile
from gpuc.client.money.plot import plot_data
from gpuc.client.money.reconcile import BillingRecord
from gpuc.core.api import PodRecord
from gpuc.core.billing import still_billing
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.intake import live_pod_ids
from gpuc.core.ledger.rows import check_note
from gpuc.core.ledger.store import Ledger
from gpuc.core.ledger.summary import RUNNING_SO_FAR, running_lines, running_rows

State = Literal["ok", "late", "down", "destroying", "destroyed", "ended"]
HOUR = 3600.0
MONTH = "2026-09"


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "gpu-ledger.csv")


def start(book: Ledger, pod: str, ts: float = T0, price: float | None = 2.0, experiment: str = "exp") -> None:
    book.start(pod, provider="runpod", experiment=experiment, gpu="H100", price_per_hour=price, start_ts=ts)


def record(pod: str, state: State = "ok", end_at: float | None = None) -> PodRecord:
    return PodRecord(
        pod_id=pod,
        provider="runpod",
        name=pod,
        experiment="exp",
        registered_at=T0,
        state=state,
        end_at=end_at,
    )


# -- running, so far ---------------------------------------------------------------------------------
def test_a_running_pod_is_in_the_months_total_as_running_so_far(book: Ledger) -> None:
    start(book, "closed", price=1.0)
    book.end("closed", end_ts=T0 + 2 * HOUR)  # $2.00
    start(book, "hot", ts=T0 + HOUR, price=3.0)  # running 3 h at `now`: $9.00 so far
    summary = book.summary(MONTH, now=T0 + 4 * HOUR, live={"hot"})
    assert summary.total_cost_usd == pytest.approx(2.0)  # the closed rows, as before
    assert summary.running_usd == pytest.approx(9.0)
    assert summary.month_total_usd == pytest.approx(11.0)
    (hot,) = summary.running
    assert hot.pod_id == "hot" and hot.hours == pytest.approx(3.0) and hot.cost_usd == pytest.approx(9.0)
    assert running_lines(summary)[0] == f"{RUNNING_SO_FAR}: $9.00 (1 pod(s), $3.00/h); with the closed rows $11.00"


def test_a_pod_that_closes_is_counted_once_never_again_as_running(book: Ledger) -> None:
    start(book, "p", price=2.0)
    before = book.summary(MONTH, now=T0 + HOUR, live={"p"})
    assert before.running_usd == pytest.approx(2.0) and before.month_total_usd == pytest.approx(2.0)
    book.end("p", end_ts=T0 + 3 * HOUR)
    # The watchdog may still list it as live for a moment (its record lags): the closed row wins.
    after = book.summary(MONTH, now=T0 + 5 * HOUR, live={"p"})
    assert after.running == [] and after.running_usd == 0.0
    assert after.month_total_usd == pytest.approx(6.0) == after.total_cost_usd


def test_an_open_row_the_watchdog_does_not_hear_is_not_counted_as_running(book: Ledger) -> None:
    start(book, "gone")
    summary = book.summary(MONTH, now=T0 + HOUR, live=set())
    assert summary.running == [] and summary.running_usd == 0.0 and len(summary.open_rows) == 1


def test_without_the_watchdog_every_open_row_counts_and_says_so(book: Ledger) -> None:
    start(book, "a")
    start(book, "free", price=None)
    summary = book.summary(MONTH, now=T0 + HOUR, live=None)
    assert summary.running_usd == pytest.approx(2.0)
    assert any("no word from the watchdog" in w for w in summary.warnings)
    assert any("no price" in w for w in summary.warnings)


def test_running_pods_of_another_month_stay_there(book: Ledger) -> None:
    start(book, "august", ts=T0 - 10 * 24 * HOUR)
    assert book.summary(MONTH, now=T0, live={"august"}).running == []
    assert book.summary("2026-08", now=T0, live={"august"}).running_usd == pytest.approx(2.0 * 240)


def test_the_summary_without_now_is_what_it_was(book: Ledger) -> None:
    start(book, "hot")
    summary = book.summary(MONTH)
    assert summary.running == [] and summary.month_total_usd == 0.0 and len(summary.open_rows) == 1


def test_the_plot_counts_a_running_pod_once(book: Ledger) -> None:
    start(book, "closed", price=1.0, experiment="old")
    book.end("closed", end_ts=T0 + HOUR)
    start(book, "hot", price=3.0, experiment="new")
    summary = book.summary(MONTH, now=T0 + 2 * HOUR, live={"hot"})
    rows = book.rows() + running_rows(summary.running)  # the open row itself is among book.rows()
    data = plot_data(rows, "t")
    assert {b.label: b.cost_usd for b in data.experiments} == {"new": pytest.approx(6.0), "old": pytest.approx(1.0)}
    assert sum(b.cost_usd for b in data.weeks) == pytest.approx(summary.month_total_usd)
    assert [r.note for r in running_rows(summary.running)] == [RUNNING_SO_FAR]


def test_live_pod_ids_are_the_records_still_billing() -> None:
    records = [record("a"), record("b", "late"), record("c", "down"), record("d", "destroyed", T0)]
    records.append(record("e", end_at=T0))
    assert live_pod_ids(records) == {"a", "b", "c"}


# -- notes -------------------------------------------------------------------------------------------
def test_a_note_goes_on_an_open_row_and_stays_when_it_closes(book: Ledger) -> None:
    start(book, "p")
    row = book.note("p", "  kv cache on; tok/s=74.2 ")
    assert row is not None and row.note == "kv cache on; tok/s=74.2"
    closed = book.end("p", end_ts=T0 + HOUR, note="idle destroy")
    assert closed is not None and closed.note == "kv cache on; tok/s=74.2; idle destroy"


def test_a_note_goes_on_a_run_that_ended_itself(book: Ledger) -> None:
    start(book, "p")
    book.end("p", end_ts=T0 + HOUR)
    assert book.summary(MONTH).no_note_rows != []
    book.note("p", "lr 3e-4 wins")
    book.note("p", "lr 3e-4 wins")  # twice: written once
    (row,) = book.rows()
    assert row.note == "lr 3e-4 wins" and book.summary(MONTH).no_note_rows == []


def test_a_note_for_a_pod_with_no_row_says_so(book: Ledger) -> None:
    assert book.note("nobody", "x") is None


@pytest.mark.parametrize("text", ["", "   ", "two\nlines", "tab\there", "x" * 501, "bell\x07"])
def test_a_note_that_is_not_one_line_of_text_is_refused(book: Ledger, text: str) -> None:
    start(book, "p")
    with pytest.raises(ConfigError):
        check_note(text)
    with pytest.raises(ConfigError):
        book.note("p", text)
    assert book.rows()[0].note == ""


def test_a_formula_note_is_stored_safely_and_reads_back_as_written(book: Ledger) -> None:
    start(book, "p")
    book.note("p", '=HYPERLINK("x")')
    assert book.rows()[0].note == '=HYPERLINK("x")'
    assert "'=HYPERLINK" in book.path.read_text()


# -- reconcile ---------------------------------------------------------------------------------------
def _open_and_billed(book: Ledger) -> list[BillingRecord]:
    start(book, "hot")
    return [BillingRecord(provider="runpod", pod_id="hot", start=T0, end=T0 + HOUR, amount_usd=2.0, kind="gpu")]


def test_a_live_pods_open_row_is_not_a_mismatch(book: Ledger) -> None:
    records = _open_and_billed(book)
    report = reconcile.reconcile(book.entries(), records, MONTH, ["runpod"], live={"hot"})
    assert report.clean and report.mismatches == [] and report.unmatched == []
    assert report.rows_checked == 0  # compared once it ends, not counted as a match before


def test_an_open_row_billed_for_a_pod_that_is_not_running_is_still_a_mismatch(book: Ledger) -> None:
    records = _open_and_billed(book)
    report = reconcile.reconcile(book.entries(), records, MONTH, ["runpod"], live=set())
    assert [m.reason for m in report.mismatches] == ["open_row_billed"] and not report.clean


def test_a_closed_row_is_compared_even_while_the_watchdog_lists_it_live(book: Ledger) -> None:
    records = _open_and_billed(book)
    book.end("hot", end_ts=T0 + 2 * HOUR)  # $4 in the ledger, $2 billed
    report = reconcile.reconcile(book.entries(), records, MONTH, ["runpod"], live={"hot"})
    # Compared: billed below its ledger cost, a RunPod row is listed (its `cost` leaves out savings plans).
    assert [m.reason for m in report.below_ledger] == ["amount"] and report.rows_checked == 1


def test_still_billing_needs_an_open_row_a_pod_id_and_a_live_pod() -> None:
    assert still_billing("", "p", {"p"})
    assert not still_billing("2026-09-01T23:00:00Z", "p", {"p"})
    assert not still_billing("", None, {"p"}) and not still_billing("", "p", set())
