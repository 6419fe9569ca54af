from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fakes.ctx import answering
from fakes.money import T0, bars, column_heights, read_png

from gpuc.client.context import Ctx
from gpuc.client.money.commands import ledger
from gpuc.client.money.plot import EXPERIMENT_COLOR, WEEK_COLOR
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.errors import ConfigError, WatchdogError
from gpuc.core.ledger.rows import LedgerRow, usd_per_1m_tokens
from gpuc.core.ledger.store import Ledger
from gpuc.core.ledger.summary import summarize
from gpuc.core.settingsload import load_settings

HOUR = 3600.0
DAY = 86400.0


def row(experiment: str, gpu: str, price: str, start: str, end: str = "", cost: str = "", note: str = "") -> LedgerRow:
    return LedgerRow(
        date=start[:10],
        experiment=experiment,
        provider="runpod",
        gpu=gpu,
        price_per_hour=price,
        start=start,
        end=end,
        cost_usd=cost,
        note=note,
    )


SEPTEMBER = [
    row("kv-cache", "RTX 4090", "0.74", "2026-09-01T10:00:00Z", "2026-09-01T12:00:00Z", "1.4800", "on is 1.9x"),
    row("kv-cache", "RTX 3090", "0.50", "2026-09-08T10:00:00Z", "2026-09-08T11:00:00Z", "0.5000", ""),
    row(
        "quant",
        "A100 80GB SXM",
        "1.39",
        "2026-09-09T10:00:00Z",
        "2026-09-09T11:00:00Z",
        "",
        "int4 ok; tok/s=150",
    ),
    row("quant", "RTX 4090", "0.74", "2026-09-10T10:00:00Z"),  # open: preempted or deleted outside gpuc
    row("manual", "L4", "", "2026-09-11T10:00:00Z", "2026-09-11T11:00:00Z", "", "no price"),
    row("august", "RTX 4090", "0.74", "2026-08-30T10:00:00Z", "2026-08-30T11:00:00Z", "0.7400", "old"),
]


def test_it_summarises_a_month_by_experiment_and_gpu() -> None:
    s = summarize(SEPTEMBER, "2026-09")
    assert s.rows == 5 and s.unpriced_rows == 1
    assert s.total_hours == pytest.approx(4.0)
    assert s.total_cost_usd == pytest.approx(1.48 + 0.50 + 1.39)
    assert s.effective_price_per_hour == pytest.approx((1.48 + 0.50 + 1.39) / 4.0)
    assert [(g.name, g.rows, round(g.cost_usd, 2)) for g in s.by_experiment] == [
        ("kv-cache", 2, 1.98),
        ("quant", 1, 1.39),
    ]
    assert {g.name: round(g.hours, 2) for g in s.by_gpu} == {
        "RTX 4090": 2.0,
        "RTX 3090": 1.0,
        "A100 80GB SXM": 1.0,
    }


def test_it_lists_open_rows_and_rows_without_a_conclusion() -> None:
    s = summarize(SEPTEMBER, "2026-09")
    assert [r.start for r in s.open_rows] == ["2026-09-10T10:00:00Z"]
    assert [r.start for r in s.no_note_rows] == ["2026-09-08T10:00:00Z"]


def test_it_prices_a_million_tokens_for_rows_that_carry_a_measured_speed() -> None:
    (cost,) = summarize(SEPTEMBER, "2026-09").token_costs
    assert (cost.experiment, cost.tok_per_s) == ("quant", 150.0)
    assert cost.usd_per_1m_tokens == pytest.approx(2.57, abs=0.01)  # the seeds' A100 figure
    assert usd_per_1m_tokens(0.34, 75) == pytest.approx(1.26, abs=0.01)


def test_all_months_and_bad_months() -> None:
    assert summarize(SEPTEMBER).rows == 6
    with pytest.raises(ConfigError):
        summarize(SEPTEMBER, "2026-9")
    empty = summarize([], "2026-09")
    assert empty.effective_price_per_hour is None and empty.total_cost_usd == 0


# --- the command -------------------------------------------------------------------------------------------


@pytest.fixture
def filled() -> Ledger:
    book = Ledger(load_settings().ledger)
    spans = [
        ("kv-cache", 0.0, 2.0),
        ("kv-cache", 7 * DAY, 1.0),
        ("quant", 8 * DAY, 3.0),
        ("quant", 15 * DAY, 1.0),
    ]
    for i, (experiment, offset, hours) in enumerate(spans):
        book.start(
            f"pod{i}",
            provider="runpod",
            experiment=experiment,
            gpu="RTX 4090",
            price_per_hour=1.0,
            start_ts=T0 + offset,
        )
        book.end(f"pod{i}", end_ts=T0 + offset + hours * HOUR, note="tok/s=75" if i == 0 else None)
    book.start("pod-open", provider="vast", experiment="quant", gpu="L4", price_per_hour=0.3, start_ts=T0 + DAY)
    return book


UNREACHABLE = WatchdogError("connection refused", hint="gpuc watchdog serve")
# A watchdog that hears no pod running: the open row is not counted "running, so far" (a plot of closed rows).
QUIET = StatusResponse(server_time=T0 + 2 * DAY, reaper_period_s=300)


def ledger_cli(args: list[str], watchdog: StatusResponse | Exception = UNREACHABLE) -> Result:
    """`gpuc ledger ARGS` with a watchdog that answers `watchdog` (by default, one that cannot be reached)."""
    return CliRunner().invoke(ledger, args, obj=Ctx(watchdog=answering(watchdog)))


def test_the_cli_prints_the_month_as_json(filled: Ledger) -> None:
    result = ledger_cli(["--month", "2026-09", "--json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["total_cost_usd"] == pytest.approx(7.0) and body["total_hours"] == pytest.approx(7.0)
    assert body["effective_price_per_hour"] == pytest.approx(1.0)
    assert [g["name"] for g in body["by_experiment"]] == ["quant", "kv-cache"]
    assert len(body["open_rows"]) == 1 and len(body["no_note_rows"]) == 3
    assert body["token_costs"][0]["usd_per_1m_tokens"] == pytest.approx(1e6 / (75 * 3600))
    assert "watchdog unreachable" in body["sync"]
    documented = CliRunner().invoke(ledger, ["--help"]).output
    for field in ("effective_price_per_hour", "open_rows", "no_note_rows", "token_costs", "by_gpu"):
        assert field in documented and field in body


def test_the_cli_takes_in_ends_recorded_while_away(filled: Ledger) -> None:
    record = PodRecord(
        pod_id="pod-open",
        provider="vast",
        name="gpuc-open1",
        experiment="quant",
        registered_at=T0 + DAY,
        end_at=T0 + DAY + 2 * HOUR,
        ended_by="idle",
        note="idle destroy",
    )
    status = StatusResponse(server_time=T0 + 2 * DAY, reaper_period_s=300, pods=[record])
    result = ledger_cli(["--month", "2026-09"], status)
    assert result.exit_code == 0, result.output
    assert "took in 1 end(s)" in result.output
    assert "open rows" not in result.output
    assert filled.rows()[-1].cost_usd == "0.6000"


def test_no_sync_leaves_the_watchdog_alone(filled: Ledger) -> None:
    result = ledger_cli(["--month", "all", "--no-sync"], AssertionError("asked the watchdog"))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("all months: 5 row(s), 7.00 h, $7.00")
    assert "rows with no note (runs with no conclusion): 3" in result.output


def test_the_cli_plots_a_png_of_the_right_data(filled: Ledger, tmp_path: Path) -> None:
    target = tmp_path / "spend.png"
    result = ledger_cli(["--month", "2026-09", "--plot", str(target)], QUIET)
    assert result.exit_code == 0, result.output
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, _, rows = read_png(data)
    assert width == 1000
    # Weeks: 2 h, 1 h + 3 h, 1 h at $1/h -> $2, $4, $1 on a $0-$4 axis 240 px high.
    assert bars(column_heights(rows, WEEK_COLOR)) == [120, 240, 60]
    # Experiments are horizontal bars, largest first: quant $4, kv-cache $3.
    across = [bytes(b"".join(r[x * 3 : x * 3 + 3] for r in rows)) for x in range(width)]  # transposed
    experiment_bars = bars(column_heights(across, EXPERIMENT_COLOR))
    assert len(experiment_bars) == 2 and round(experiment_bars[1] / experiment_bars[0] * 4) == 3


def test_the_cli_plots_html_with_the_numbers(filled: Ledger, tmp_path: Path) -> None:
    target = tmp_path / "spend.html"
    result = ledger_cli(["--month", "2026-09", "--plot", str(target), "--json"], QUIET)
    assert result.exit_code == 0, result.output
    page = target.read_text()
    assert page.startswith("<!doctype html>") and page.count("<svg") == 2
    for text in ("2026-W36", "2026-W37", "2026-W38", "kv-cache", "quant", "$4.00", "$3.00", "$2.00"):
        assert text in page
    payload = page.split('id="gpuc-plot-data">')[1].split("</script>")[0]
    data = json.loads(payload)
    assert [(b["label"], b["cost_usd"]) for b in data["weeks"]] == [
        ("2026-W36", 2.0),
        ("2026-W37", 4.0),
        ("2026-W38", 1.0),
    ]
    assert json.loads(result.output)["plot"] == str(target)


def test_the_cli_refuses_a_plot_format_it_cannot_write(filled: Ledger, tmp_path: Path) -> None:
    result = ledger_cli(["--no-sync", "--plot", str(tmp_path / "spend.gif")])
    assert isinstance(result.exception, ConfigError)
    assert not (tmp_path / "spend.gif").exists()


def test_the_cli_warns_about_absurd_rows_and_records_instead_of_crashing(filled: Ledger, tmp_path: Path) -> None:
    with filled.path.open("a", encoding="utf-8") as fh:
        fh.write("2026-09-20,typo,vast,L4,0.3,2026-09-20T10:00:00Z,2026-09-20T11:00:00Z,1e999,oops\n")
        fh.write("21/09/2026,bad-day,vast,L4,0.3,2026-09-21T10:00:00Z,2026-09-21T11:00:00Z,,\n")
    record = PodRecord(
        pod_id="pod-open",
        provider="vast",
        name="gpuc-open1",
        experiment="quant",
        registered_at=T0 + DAY,
        end_at=1e300,  # signed by the pod, range-checked by nobody
    )
    status = StatusResponse(server_time=T0 + 2 * DAY, reaper_period_s=300, pods=[record])
    result = ledger_cli(["--month", "all", "--plot", str(tmp_path / "spend.html")], status)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("all months: 7 row(s), 7.00 h, $7.00")
    assert "warning: watchdog record of pod pod-open: end 1e+300 is not a time" in result.output
    assert "warning: row typo started 2026-09-20T10:00:00Z: cost_usd '1e999'" in result.output
    assert "warning: row bad-day" in result.output and "left out of the totals" in result.output
    as_json = ledger_cli(["--month", "all", "--json"], QUIET)
    body = json.loads(as_json.output)
    assert len(body["warnings"]) == 2 and body["total_cost_usd"] == pytest.approx(7.0)
    assert "warnings" in CliRunner().invoke(ledger, ["--help"]).output


def test_a_run_under_a_cent_shows_what_it_cost_not_zero() -> None:
    # 3 minutes at $0.042/h: the `--wait` line says $0.0021; the ledger must not say $0.00.
    book = Ledger(load_settings().ledger)
    book.start("tiny", provider="runpod", experiment="smoke", gpu="RTX 4090", price_per_hour=0.042, start_ts=T0)
    book.end("tiny", end_ts=T0 + 180)
    result = ledger_cli(["--month", "2026-09"], QUIET)
    assert result.exit_code == 0, result.output
    assert "$0.0021" in result.output and "$0.00 " not in result.output and "$0.00," not in result.output
    lines = [line for line in result.output.splitlines() if "smoke" in line]
    assert lines and all("$0.0021" in line for line in lines), lines
