from __future__ import annotations

import json
import struct
import zlib
from dataclasses import replace
from itertools import groupby
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes.ctx import answering

from gpuc.client.context import Ctx
from gpuc.client.money.bitfont import GLYPHS, lit_pixels, printable, text_width
from gpuc.client.money.commands import ledger
from gpuc.client.money.plot import (
    EXPERIMENT_COLOR,
    MAX_EXPERIMENTS,
    TEXT_COLOR,
    WEEK_COLOR,
    Bar,
    PlotData,
    fit_all,
    nice_ticks,
    plot_data,
    render_html,
    render_png,
    tick_label,
    write_plot,
)
from gpuc.core.errors import ConfigError, WatchdogError
from gpuc.core.ledger.rows import LedgerRow
from gpuc.core.ledger.store import Ledger
from gpuc.core.settingsload import load_settings

RGB = tuple[int, int, int]


class Pixels:
    """A picture read back by colour: every question the tests ask is about one colour. Rows are kept as runs of
    one colour (read at C speed), and a colour's pixels are spelled out only when asked for."""

    def __init__(self) -> None:
        self.runs: dict[RGB, list[tuple[int, int, int]]] = {}  # colour -> (y, first x, length)
        self.spelled: dict[RGB, set[tuple[int, int]]] = {}

    def of(self, color: RGB) -> set[tuple[int, int]]:
        """Every (x, y) painted exactly `color`."""
        if color not in self.spelled:
            self.spelled[color] = {(x, y) for y, x0, n in self.runs.get(color, []) for x in range(x0, x0 + n)}
        return self.spelled[color]


SWEEP_16 = "lora-sweep-llama-3-8b-rank16-lr3e-4-warmup200"
SWEEP_64 = "lora-sweep-llama-3-8b-rank64-lr1e-4-warmup200"


def decode(png: bytes) -> tuple[int, int, Pixels]:
    """An 8-bit RGB, filter-0 PNG back into pixels (what Canvas.png writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, width, height, idat = 8, 0, 0, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    pixels = Pixels()
    for y in range(height):
        line = raw[y * stride + 1 : (y + 1) * stride]
        x = 0
        for colour, run in groupby(zip(line[0::3], line[1::3], line[2::3], strict=True)):
            n = len(list(run))
            pixels.runs.setdefault(colour, []).append((y, x, n))
            x += n
    return width, height, pixels


def has_text(pixels: Pixels, text: str, scale: int = 2, color: RGB = TEXT_COLOR) -> bool:
    """Is `text` drawn somewhere, pixel for pixel (lit where the font is lit, not lit in between)?"""
    lit = {(x * scale + dx, y * scale + dy) for x, y in lit_pixels(text) for dx in range(scale) for dy in range(scale)}
    width, height = text_width(text, scale), 9 * scale
    dark = {(x, y) for x in range(width) for y in range(height) if (x, y) not in lit}
    ax, ay = min(lit, key=lambda p: (p[1], p[0]))
    inked = pixels.of(color)
    for px, py in inked:
        ox, oy = px - ax, py - ay
        if all((ox + x, oy + y) in inked for x, y in lit) and not any((ox + x, oy + y) in inked for x, y in dark):
            return True
    return False


def bar_heights(pixels: Pixels, color: RGB) -> list[int]:
    """Vertical bars read back: the height of each run of equal, non-empty columns, left to right."""
    columns: dict[int, int] = {}
    for x, _ in pixels.of(color):
        columns[x] = columns.get(x, 0) + 1
    heights, previous = [], 0
    for x in range(max(columns, default=-1) + 2):
        h = columns.get(x, 0)
        if h and h != previous:
            heights.append(h)
        previous = h
    return heights


def bar_widths(pixels: Pixels, color: RGB) -> list[int]:
    """Horizontal bars read back, top to bottom."""
    rows: dict[int, int] = {}
    for _, y in pixels.of(color):
        rows[y] = rows.get(y, 0) + 1
    widths, previous = [], 0
    for y in range(max(rows, default=-1) + 2):
        w = rows.get(y, 0)
        if w and w != previous:
            widths.append(w)
        previous = w
    return widths


def row(experiment: str, day: str, hours: float, price: float) -> LedgerRow:
    minutes = round(hours * 60)
    return LedgerRow(
        date=day,
        experiment=experiment,
        provider="runpod",
        gpu="RTX 4090",
        price_per_hour=str(price),
        start=f"{day}T08:00:00Z",
        end=f"{day}T{8 + minutes // 60:02d}:{minutes % 60:02d}:00Z",
    )


SEPTEMBER = [
    row(SWEEP_16, "2026-09-01", 6.5, 0.74),
    row(SWEEP_64, "2026-09-09", 7.0, 0.74),
    row("kv-cache-bench", "2026-09-02", 2.0, 3.29),
    row("tinyllama-pretrain-smoke", "2026-09-16", 9.0, 1.39),
    row("réglage-fin", "2026-09-23", 3.0, 0.50),
]


@pytest.fixture(scope="module")
def september() -> Pixels:
    return decode(render_png(plot_data(SEPTEMBER, "gpuc spend, 2026-09")))[2]


def test_every_printable_ascii_character_has_its_own_glyph() -> None:
    assert set(GLYPHS) == {chr(c) for c in range(32, 127)}
    for char, rows in GLYPHS.items():
        assert len(rows) == (9 if char in "gjpqy" else 7), char
        assert all(len(r) == 5 and set(r) <= {"#", "."} for r in rows), char
    shapes = [rows for char, rows in GLYPHS.items() if char != " "]
    assert len(set(shapes)) == len(shapes)  # a typo that copies one glyph onto another shows here


def test_text_outside_ascii_loses_accents_or_becomes_a_question_mark() -> None:
    assert printable("réglage-fin") == "reglage-fin"
    assert printable("实验 1") == "?? 1"


def test_the_picture_has_a_title_and_a_total(september: Pixels) -> None:
    assert has_text(september, "gpuc spend, 2026-09", scale=3)
    total = 6.5 * 0.74 + 7.0 * 0.74 + 2.0 * 3.29 + 9.0 * 1.39 + 3.0 * 0.5
    assert has_text(september, f"total ${total:.2f} in 5 experiment(s)", color=(95, 95, 95))


def test_the_axes_carry_dollar_units(september: Pixels) -> None:
    muted = (95, 95, 95)
    assert has_text(september, "Spend per week ($)")
    assert has_text(september, "Spend per experiment ($), largest first")
    for tick in ("$0", "$5", "$10", "$15"):
        assert has_text(september, tick, color=muted)
    assert has_text(september, "ISO week of 2026 (Monday to Sunday)", color=muted)


def test_every_bar_carries_its_value_and_its_name(september: Pixels) -> None:
    for week in ("W36", "W37", "W38", "W39"):
        assert has_text(september, week)
    for value in ("$11.39", "$5.18", "$12.51", "$1.50"):  # weeks 36..39
        assert has_text(september, value)
    for name in ("kv-cache-bench", "tinyllama-pretrain-smoke", "reglage-fin"):
        assert has_text(september, name)


def test_long_names_that_differ_in_the_middle_stay_apart(september: Pixels) -> None:
    short16, short64 = fit_all([SWEEP_16, SWEEP_64], 30)
    assert short16 != short64 and "rank16" in short16 and "rank64" in short64
    assert has_text(september, short16) and has_text(september, short64)


def test_the_bars_are_in_proportion_and_only_bars_use_bar_colours() -> None:
    data = PlotData(
        title="t",
        weeks=[Bar(label="2026-W36", cost_usd=1.0), Bar(label="2026-W37", cost_usd=3.0)],
        experiments=[Bar(label="a", cost_usd=4.0), Bar(label="b", cost_usd=1.0)],
    )
    _, _, pixels = decode(render_png(data))
    low, high = bar_heights(pixels, WEEK_COLOR)
    axis_max, _ = nice_ticks(3.0)
    assert high == round(3.0 / axis_max * 240) and low == round(1.0 / axis_max * 240)
    wide, narrow = bar_widths(pixels, EXPERIMENT_COLOR)
    assert round(wide / narrow) == 4


def test_weeks_without_spend_are_shown_as_zero() -> None:
    data = plot_data([row("a", "2026-09-01", 1, 1.0), row("a", "2026-09-22", 1, 1.0)], "t")
    assert [(b.label, b.cost_usd) for b in data.weeks] == [
        ("2026-W36", 1.0),
        ("2026-W37", 0.0),
        ("2026-W38", 0.0),
        ("2026-W39", 1.0),
    ]


def test_many_experiments_show_the_largest_and_sum_the_rest() -> None:
    experiments = [Bar(label=f"exp-{i:02d}", cost_usd=100.0 - i) for i in range(20)]
    _, _, pixels = decode(render_png(PlotData(title="t", weeks=[], experiments=experiments)))
    assert len(bar_widths(pixels, EXPERIMENT_COLOR)) == MAX_EXPERIMENTS
    rest = sum(100.0 - i for i in range(MAX_EXPERIMENTS, 20))
    assert has_text(pixels, f"and 5 smaller experiment(s): ${rest:,.0f} together", color=(95, 95, 95))


def test_an_empty_period_says_so() -> None:
    _, _, pixels = decode(render_png(PlotData(title="nothing", weeks=[], experiments=[])))
    assert has_text(pixels, "no closed, priced runs", color=(95, 95, 95))
    assert bar_heights(pixels, WEEK_COLOR) == [] and bar_widths(pixels, EXPERIMENT_COLOR) == []


def test_nice_ticks_are_round_and_cover_the_top() -> None:
    assert nice_ticks(18.14) == (20.0, [0.0, 5.0, 10.0, 15.0, 20.0])
    assert nice_ticks(0.06)[0] >= 0.06
    assert nice_ticks(0.0) == (1.0, [0.0, 1.0])


def test_a_bare_name_gets_png(tmp_path: Path) -> None:
    written = write_plot(tmp_path / "spend", plot_data(SEPTEMBER, "t"))
    assert written == tmp_path / "spend.png" and written.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ConfigError):
        write_plot(tmp_path / "spend.gif", plot_data(SEPTEMBER, "t"))


@pytest.fixture
def ledger_with_runs() -> Ledger:
    book = Ledger(load_settings().ledger)
    t0 = 1_788_300_000.0  # 2026-09-01T22:00:00Z
    for i, (name, day, hours) in enumerate([(SWEEP_16, 0, 2.0), ("kv-cache-bench", 7, 1.0)]):
        start = t0 + day * 86400
        book.start(f"pod{i}", provider="runpod", experiment=name, gpu="RTX 4090", price_per_hour=1.0, start_ts=start)
        book.end(f"pod{i}", end_ts=start + hours * 3600)
    return book


def unreachable() -> Ctx:
    return Ctx(watchdog=answering(WatchdogError("connection refused", hint="gpuc watchdog serve")))


def test_the_cli_writes_a_bare_plot_name_as_png(ledger_with_runs: Ledger, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(ledger, ["--month", "2026-09", "--plot", str(tmp_path / "spend")], obj=unreachable())
    assert result.exit_code == 0, result.output
    assert f"plot written to {tmp_path / 'spend.png'}" in result.output
    _, _, pixels = decode((tmp_path / "spend.png").read_bytes())
    assert has_text(pixels, "gpuc spend, 2026-09", scale=3) and has_text(pixels, "kv-cache-bench")
    body = runner.invoke(ledger, ["--month", "2026-09", "--plot", str(tmp_path / "b"), "--json"], obj=unreachable())
    assert json.loads(body.output)["plot"] == str(tmp_path / "b.png")


# -- labels that match their data, however small the money ------------------------------------------
TINY = [row("smoke", "2026-09-01", 0.05, 0.042)]  # 3 minutes at $0.042/h: $0.0021


def dollars(label: str) -> float:
    return float(label.removeprefix("$").replace(",", ""))


@pytest.mark.parametrize("top", [0.0021, 0.013, 0.37, 3.3, 12.0, 18.14, 240.0, 1234.0])
def test_every_tick_label_reads_back_as_its_tick(top: float) -> None:
    _, ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    labels = [tick_label(t, step) for t in ticks]
    assert [dollars(label) for label in labels] == pytest.approx(ticks), labels
    assert len(set(labels)) == len(labels), labels


def test_a_run_under_a_cent_is_drawn_with_its_value_not_zero() -> None:
    data = plot_data(TINY, "gpuc spend, 2026-09")
    assert [b.cost_usd for b in data.weeks] == pytest.approx([0.0021])
    _, _, pixels = decode(render_png(data))
    assert has_text(pixels, "$0.0021"), "the bar's value"
    assert has_text(pixels, "total $0.0021 in 1 experiment(s)", color=(95, 95, 95))
    assert not has_text(pixels, "$0.00 "), "no bar or total says nothing was spent"
    page = render_html(data)
    assert "$0.0021" in page and "$0.00<" not in page


def test_the_axis_title_says_running_pods_are_in_the_bars_when_they_are() -> None:
    from gpuc.core.ledger.summary import RUNNING_SO_FAR

    running = replace(row("live", "2026-09-02", 1.0, 0.5), end="", cost_usd="0.5000", note=RUNNING_SO_FAR)
    closed_only = decode(render_png(plot_data(TINY, "t")))[2]
    assert has_text(closed_only, "$ spent (closed runs with a known price)", color=(95, 95, 95))
    both = decode(render_png(plot_data([*TINY, running], "t")))[2]
    assert not has_text(both, "$ spent (closed runs with a known price)", color=(95, 95, 95))
    assert has_text(both, "$ spent (closed runs with a known price; 1 running pod so far)", color=(95, 95, 95))
