"""`gpuc ledger` shows the month against GPUC_MONTHLY_BUDGET, by the same arithmetic `up` refuses by
(core/budget.py): the ledger's closed rows, the open ones completed by the watchdog's records, and the
pods only the watchdog knows; a pod with no price is UNKNOWN, never $0; no budget line without a budget."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result
from fakes.ctx import answering
from fakes.money import T0

from gpuc.client.context import Ctx
from gpuc.client.money.commands import ledger
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.ledger.months import current_month
from gpuc.core.ledger.store import Ledger
from gpuc.core.settingsload import load_settings

HOUR = 3600.0
NOW = T0 + 5 * 24 * HOUR  # within the month of T0


@pytest.fixture
def month(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("GPUC_MONTHLY_BUDGET", "20")
    book = Ledger(load_settings().ledger)
    book.start("done", provider="runpod", experiment="a", gpu="x", price_per_hour=1.0, start_ts=T0)
    book.end("done", end_ts=T0 + 6 * HOUR)  # $6
    book.start("open", provider="vast", experiment="a", gpu="x", price_per_hour=0.5, start_ts=NOW - 4 * HOUR)
    return current_month(NOW)


RECORDS = [
    PodRecord(pod_id="open", provider="vast", name="gpuc-o", experiment="a", registered_at=NOW - 4 * HOUR),
    PodRecord(pod_id="free", provider="vast", name="gpuc-f", experiment="b", registered_at=NOW - HOUR),
]


def ledger_cli(args: list[str]) -> Result:
    """`gpuc ledger ARGS` at NOW, the watchdog knowing the open pod and one the ledger does not."""
    status = StatusResponse(server_time=NOW, reaper_period_s=300, pods=RECORDS)
    return CliRunner().invoke(ledger, args, obj=Ctx(clock=FakeClock(NOW), watchdog=answering(status)))


def test_the_month_is_shown_against_the_budget(month: str) -> None:
    result = ledger_cli(["--month", month])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("budget "))
    assert f"budget {month}: $8.00 spent of $20.00 (40 %): $6.00 ended, $2.00 running now" in line
    assert "1 pod(s) UNKNOWN, not counted: free (no price)" in line


def test_the_json_carries_the_budget_and_all_months_carry_none(month: str) -> None:
    body = json.loads(ledger_cli(["--month", month, "--json"]).output)
    assert body["budget"]["spent_usd"] == pytest.approx(8.0) and body["budget"]["budget_usd"] == 20.0
    assert body["budget"]["unknown"] == ["free (no price)"]
    assert json.loads(ledger_cli(["--month", "all", "--json"]).output)["budget"] is None
    assert "budget_usd" in CliRunner().invoke(ledger, ["--help"]).output


def test_without_the_watchdog_open_rows_count_until_now_and_it_says_so(month: str) -> None:
    result = ledger_cli(["--month", month, "--no-sync"])
    assert "$8.00 spent of $20.00" in result.output  # the open row's 4 h, priced by the ledger
    assert "no word from the watchdog: 1 open ledger row(s) counted as billing until now" in result.output


def test_no_budget_no_line(month: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUC_MONTHLY_BUDGET")
    result = ledger_cli(["--month", month])
    assert not any(x.startswith("budget ") for x in result.output.splitlines())
