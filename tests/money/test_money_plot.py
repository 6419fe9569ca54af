from __future__ import annotations

from fakes.money import bars, column_heights, read_png

from gpuc.client.money.plot import (
    EXPERIMENT_COLOR,
    WEEK_COLOR,
    Bar,
    PlotData,
    iso_week,
    plot_data,
    render_html,
    render_png,
)
from gpuc.core.ledger.rows import LedgerRow


def test_weeks_are_iso_weeks() -> None:
    assert iso_week("2026-09-01") == "2026-W36"
    assert iso_week("2027-01-01") == "2026-W53"


def test_open_and_unpriced_rows_are_not_plotted() -> None:
    rows = [
        LedgerRow(
            date="2026-09-01",
            experiment="a",
            provider="vast",
            gpu="L4",
            price_per_hour="0.5",
            start="2026-09-01T10:00:00Z",
            end="2026-09-01T12:00:00Z",
        ),
        LedgerRow(
            date="2026-09-02",
            experiment="b",
            provider="vast",
            gpu="L4",
            price_per_hour="0.5",
            start="2026-09-02T10:00:00Z",
        ),
        LedgerRow(
            date="2026-09-02",
            experiment="c",
            provider="vast",
            gpu="L4",
            price_per_hour="",
            start="2026-09-02T10:00:00Z",
            end="2026-09-02T11:00:00Z",
        ),
    ]
    data = plot_data(rows, "t")
    assert [(b.label, b.cost_usd) for b in data.experiments] == [("a", 1.0)]
    assert [(b.label, b.cost_usd) for b in data.weeks] == [("2026-W36", 1.0)]


def test_the_png_draws_one_bar_per_value_in_proportion() -> None:
    data = PlotData(
        title="t",
        weeks=[Bar(label="w1", cost_usd=1.0), Bar(label="w2", cost_usd=3.0)],
        experiments=[Bar(label="e", cost_usd=0.5)],
    )
    width, _, rows = read_png(render_png(data, width=600))
    assert width == 600
    assert bars(column_heights(rows, WEEK_COLOR)) == [80, 240]  # $1 and $3 on a $0-$3 axis, 240 px high
    across = [bytes(b"".join(r[x * 3 : x * 3 + 3] for r in rows)) for x in range(width)]  # transposed
    assert len(bars(column_heights(across, EXPERIMENT_COLOR))) == 1  # one horizontal bar


def test_an_empty_month_still_makes_a_valid_png_and_page() -> None:
    data = PlotData(title="nothing", weeks=[], experiments=[])
    _, _, rows = read_png(render_png(data))
    assert bars(column_heights(rows, WEEK_COLOR)) == []
    assert "<svg" in render_html(data)


def test_the_html_escapes_experiment_names() -> None:
    data = PlotData(title="<b>", weeks=[], experiments=[Bar(label="</script><img src=x>", cost_usd=1.0)])
    page = render_html(data)
    assert "<img" not in page and "&lt;img src=x&gt;" in page
    assert "</script><img" not in page
