"""`gpuc ledger --plot`: spend by week and by experiment, as HTML (inline SVG) or PNG.

No plotting library: HTML is bars in SVG plus the numbers in a table; PNG is drawn by a tiny rasteriser
(rectangles and a 5 x 7 bitmap font into an RGB buffer, zlib + struct into PNG chunks; see bitfont.py for
why not matplotlib). The PNG is labelled: title and total, $ axes, the value on every bar, week and
experiment names. Bar colours are used by the bars alone, so a test can read the bars back.
"""

from __future__ import annotations

import html
import json
import math
import struct
import zlib
from datetime import date, timedelta
from pathlib import Path

from pydantic import BaseModel

from gpuc.client.money.bitfont import ADVANCE, GLYPH_HEIGHT, LINE_HEIGHT, lit_pixels, printable, text_width
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.rows import LedgerRow, row_cost
from gpuc.core.ledger.rows import usd as cents
from gpuc.core.ledger.summary import RUNNING_SO_FAR

Color = tuple[int, int, int]
WEEK_COLOR: Color = (54, 110, 180)
EXPERIMENT_COLOR: Color = (220, 120, 40)
AXIS_COLOR: Color = (120, 120, 120)
GRID_COLOR: Color = (228, 228, 228)
TEXT_COLOR: Color = (30, 30, 30)
MUTED_COLOR: Color = (95, 95, 95)
BACKGROUND: Color = (255, 255, 255)


class Bar(BaseModel):
    label: str
    cost_usd: float


class PlotData(BaseModel):
    title: str
    weeks: list[Bar]  # ISO weeks ("2026-W37") in order
    experiments: list[Bar]  # most expensive first
    running: int = 0  # running pods whose cost so far is in the bars (core.ledger.summary.running_rows)


def iso_week(day: str) -> str:
    year, week, _ = date.fromisoformat(day).isocalendar()
    return f"{year}-W{week:02d}"


def _every_week(weeks: dict[str, float]) -> dict[str, float]:
    """Weeks with no spend between the first and the last, as $0: a time axis must not skip time."""
    if not weeks:
        return {}
    first, last = min(weeks), max(weeks)
    monday = date.fromisocalendar(int(first[:4]), int(first[6:]), 1)
    filled: dict[str, float] = {}
    while (week := iso_week(monday.isoformat())) <= last:
        filled[week] = weeks.get(week, 0.0)
        monday += timedelta(days=7)
    return filled


def plot_data(rows: list[LedgerRow], title: str) -> PlotData:
    """Closed rows with a known cost, summed by ISO week of their start (every week from the first to the
    last, $0 included) and by experiment."""
    weeks: dict[str, float] = {}
    experiments: dict[str, float] = {}
    running = 0
    for row in rows:
        cost = row_cost(row)
        if cost is None or not row.date:
            continue
        running += row.note == RUNNING_SO_FAR
        week = iso_week(row.date)
        weeks[week] = weeks.get(week, 0.0) + cost
        experiments[row.experiment] = experiments.get(row.experiment, 0.0) + cost
    return PlotData(
        title=title,
        weeks=[Bar(label=k, cost_usd=v) for k, v in sorted(_every_week(weeks).items())],
        experiments=[Bar(label=k, cost_usd=v) for k, v in sorted(experiments.items(), key=lambda kv: -kv[1])],
        running=running,
    )


# --- HTML ------------------------------------------------------------------------------------------------


def _svg_bars(bars: list[Bar], color: Color, width: int = 460, height: int = 260) -> str:
    top = max((b.cost_usd for b in bars), default=0.0)
    slot = (width - 20) / max(1, len(bars))
    fill = "rgb({},{},{})".format(*color)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 60}">']
    for i, bar in enumerate(bars):
        h = 0.0 if top <= 0 else bar.cost_usd / top * height
        x, label = 10 + i * slot, html.escape(bar.label)
        mid = f'x="{x + slot / 2:.1f}" font-size="11" text-anchor="middle"'
        parts.append(
            f'<rect x="{x + slot * 0.1:.1f}" y="{10 + height - h:.1f}" width="{slot * 0.8:.1f}" '
            f'height="{h:.1f}" fill="{fill}"><title>{label}: {usd(bar.cost_usd)}</title></rect>'
            f'<text {mid} y="{height + 26}">{label}</text>'
            f'<text {mid} y="{height + 42}">{usd(bar.cost_usd)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(heading: str, bars: list[Bar]) -> str:
    rows = "".join(f"<tr><td>{html.escape(b.label)}</td><td>{usd(b.cost_usd)}</td></tr>" for b in bars)
    return f"<table><tr><th>{html.escape(heading)}</th><th>spend</th></tr>{rows}</table>"


def render_html(data: PlotData) -> str:
    payload = json.dumps(data.model_dump()).replace("<", "\\u003c")  # no markup inside the script
    title = html.escape(data.title)
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>{title}</title><style>body{{font-family:sans-serif}}section{{display:inline-block;"
        "vertical-align:top;margin:1em}td,th{padding:2px 8px;text-align:left}</style></head><body>"
        f"<h1>{title}</h1>"
        f"<section><h2>Spend by week</h2>{_svg_bars(data.weeks, WEEK_COLOR)}"
        f"{_table('week', data.weeks)}</section>"
        f"<section><h2>Spend by experiment</h2>{_svg_bars(data.experiments, EXPERIMENT_COLOR)}"
        f"{_table('experiment', data.experiments)}</section>"
        f'<script type="application/json" id="gpuc-plot-data">{payload}</script>'
        "</body></html>\n"
    )


# --- PNG -------------------------------------------------------------------------------------------------


class Canvas:
    def __init__(self, width: int, height: int, background: Color = BACKGROUND) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def fill(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """Fill [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, x0), min(self.width, x1)
        y0, y1 = max(0, y0), min(self.height, y1)
        if x0 >= x1:
            return
        line = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start : start + len(line)] = line

    def text(self, x: int, y: int, text: str, color: Color = TEXT_COLOR, scale: int = 2) -> None:
        """`text` with the top of its capitals at y."""
        for px, py in lit_pixels(text):
            self.fill(x + px * scale, y + py * scale, x + (px + 1) * scale, y + (py + 1) * scale, color)

    def png(self) -> bytes:
        stride = self.width * 3
        # Filter type 0 (None) on every scanline: simple, and zlib still squeezes the flat colours.
        raw = b"".join(b"\x00" + self.pixels[y * stride : (y + 1) * stride] for y in range(self.height))
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)  # 8-bit RGB
        body = _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(raw, 9)) + _chunk(b"IEND", b"")
        return b"\x89PNG\r\n\x1a\n" + body


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


# Layout, in pixels. Text is the 5 x 7 font at 2x (12 px a letter); the title at 3x.
PAD = 24
SCALE = 2
CHAR = ADVANCE * SCALE
TEXT_HEIGHT = GLYPH_HEIGHT * SCALE
LINE = LINE_HEIGHT * SCALE + 6
WEEK_PLOT_HEIGHT = 240
EXPERIMENT_ROW = 30  # one horizontal bar per experiment
MAX_EXPERIMENTS = 15  # the rest are summed into one "(N more)" bar
MAX_NAME_CHARS = 30


def usd(value: float) -> str:
    """Cents below $100 (a run under a cent to a hundredth of one), whole dollars above: the label must fit
    over its bar."""
    return cents(value) if abs(value) < 100 else f"${value:,.0f}"


def fit(text: str, max_chars: int) -> str:
    """Long experiment names keep their start and end ("lora-sweep-...-lr3e-4"): both tell runs apart."""
    text = printable(text)
    if len(text) <= max_chars:
        return text
    head = (max_chars - 3) * 2 // 3
    return text[:head] + "..." + text[len(text) - (max_chars - 3 - head) :]


def _shared_prefix(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def fit_all(names: list[str], max_chars: int) -> list[str]:
    """`fit` each name, and where two shortened names collide (sweeps differ in the middle:
    "...-rank16-lr3e-4-..." vs "...-rank64-lr1e-4-..."), show the part where they start to differ."""
    full = [printable(n) for n in names]
    first = [fit(n, max_chars) for n in full]
    short = list(first)
    for i, label in enumerate(first):
        twins = [j for j, other in enumerate(first) if other == label and full[j] != full[i]]
        if not twins:
            continue
        common = min(_shared_prefix(full[i], full[j]) for j in twins)
        start = max(8, common - 4)
        middle = full[i][start : start + max_chars - 14]
        tail = "..." if start + len(middle) < len(full[i]) else ""
        short[i] = full[i][:8] + "..." + middle + tail
    seen: dict[str, int] = {}
    for i, label in enumerate(short):  # still equal after that: number them rather than mislead
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            short[i] = f"{label[: max_chars - 3]} #{seen[label]}"
    return short


def nice_ticks(top: float, intervals: int = 5) -> tuple[float, list[float]]:
    """A round axis maximum >= top and the ticks up to it: steps of 1, 2, 2.5 or 5 x 10^k dollars."""
    if top <= 0:
        return 1.0, [0.0, 1.0]
    raw = top / intervals
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    count = math.ceil(top / step - 1e-9)
    return count * step, [i * step for i in range(count + 1)]


def tick_label(value: float, step: float) -> str:
    """As many decimals as the step has ($2.5 steps: $7.5, never $8; $0.0005 steps: never $0.00 for all)."""
    decimals = len(f"{step:.8f}".rstrip("0").partition(".")[2])
    return f"${value:,.{decimals}f}"


def _tick_labels(top: float) -> list[str]:
    _, ticks = nice_ticks(top)
    return [tick_label(t, ticks[1] - ticks[0]) for t in ticks]


def _week_labels(weeks: list[Bar]) -> tuple[list[str], str]:
    """'W36' under the bars and the year in the axis title when one year covers them all."""
    years = {b.label.split("-W")[0] for b in weeks}
    if len(years) == 1 and all("-W" in b.label for b in weeks):
        return [b.label.split("-")[1] for b in weeks], f"ISO week of {years.pop()} (Monday to Sunday)"
    return [b.label for b in weeks], "ISO week (Monday to Sunday)"


def _every(labels: list[str], slot: float, scale: int) -> int:
    """Label every k-th bar so neighbours never overlap."""
    widest = max((text_width(t, scale) for t in labels), default=0) + 8
    return max(1, math.ceil(widest / max(slot, 1.0)))


def _heading(canvas: Canvas, y: int, text: str) -> int:
    canvas.text(PAD, y, text, TEXT_COLOR, SCALE)
    return y + LINE


def _y_axis(canvas: Canvas, left: int, right: int, base: int, height: int, top: float) -> float:
    """Gridlines and $ labels up the left; returns the axis maximum the bars scale to."""
    axis_max, ticks = nice_ticks(top)
    step = ticks[1] - ticks[0]
    for tick in ticks:
        y = base - round(tick / axis_max * height)
        canvas.fill(left, y, right, y + 1, GRID_COLOR if tick else AXIS_COLOR)
        label = tick_label(tick, step)
        canvas.text(left - 8 - text_width(label, SCALE), y - TEXT_HEIGHT // 2, label, MUTED_COLOR, SCALE)
    canvas.fill(left, base - height, left + 1, base + 1, AXIS_COLOR)
    return axis_max


def _week_panel(canvas: Canvas, weeks: list[Bar], y: int, left: int) -> int:
    y = _heading(canvas, y, "Spend per week ($)")
    right = canvas.width - PAD
    top_y = y + LINE  # room for the tallest bar's value
    base = top_y + WEEK_PLOT_HEIGHT
    axis_max = _y_axis(canvas, left, right, base, WEEK_PLOT_HEIGHT, max((b.cost_usd for b in weeks), default=0))
    labels, axis_title = _week_labels(weeks)
    slot = (right - left) / max(1, len(weeks))
    values = [usd(b.cost_usd) for b in weeks]
    value_scale = SCALE if _every(values, slot, SCALE) == 1 else 1
    every = _every(labels, slot, SCALE)
    drawn_to = left - 8  # where the last week label ended
    for i, bar in enumerate(weeks):
        h = round(bar.cost_usd / axis_max * WEEK_PLOT_HEIGHT)
        x0, x1 = left + round(i * slot + slot * 0.2), left + round((i + 1) * slot - slot * 0.2)
        mid = (x0 + x1) // 2
        canvas.fill(x0, base - h, max(x0 + 1, x1), base, WEEK_COLOR)
        if _every(values, slot, value_scale) == 1:
            width = text_width(values[i], value_scale)
            canvas.text(mid - width // 2, base - h - 6 - GLYPH_HEIGHT * value_scale, values[i], TEXT_COLOR, value_scale)
        width = text_width(labels[i], SCALE)
        # Centred under its bar when labels fit; else starting at its bar, so every k-th one fits evenly.
        x = min(max(mid - width // 2 if every == 1 else x0, left), right - width)
        if i % every == 0 and x >= drawn_to + 8:
            canvas.text(x, base + 8, labels[i], TEXT_COLOR, SCALE)
            drawn_to = x + width
    if not weeks:
        canvas.text(left + 16, base - WEEK_PLOT_HEIGHT // 2, "no closed, priced runs", MUTED_COLOR, SCALE)
    x_title = left + (right - left - text_width(axis_title, SCALE)) // 2
    canvas.text(x_title, base + 8 + LINE, axis_title, MUTED_COLOR, SCALE)
    return base + 8 + 2 * LINE


def _top_experiments(experiments: list[Bar]) -> tuple[list[Bar], list[Bar]]:
    """The largest MAX_EXPERIMENTS get bars; the rest are summed in a line of text, not in a bar that
    would dwarf the named ones."""
    return experiments[:MAX_EXPERIMENTS], experiments[MAX_EXPERIMENTS:]


def _experiment_panel(canvas: Canvas, experiments: list[Bar], y: int, running: int = 0) -> int:
    """Horizontal bars, largest first: long names read left to right instead of being squeezed."""
    y = _heading(canvas, y, "Spend per experiment ($), largest first")
    shown, rest = _top_experiments(experiments)
    names = fit_all([b.label for b in shown], MAX_NAME_CHARS)
    values = [usd(b.cost_usd) for b in shown]
    left = PAD + max((text_width(n, SCALE) for n in names), default=0) + 12
    right = canvas.width - PAD - max((text_width(v, SCALE) for v in values), default=0) - 12
    axis_max, ticks = nice_ticks(max((b.cost_usd for b in shown), default=0))
    rows_height = max(1, len(shown)) * EXPERIMENT_ROW
    base = y + rows_height
    step = ticks[1] - ticks[0]
    for tick in ticks:
        x = left + round(tick / axis_max * (right - left))
        canvas.fill(x, y, x + 1, base, GRID_COLOR if tick else AXIS_COLOR)
        label = tick_label(tick, step)
        canvas.text(x - text_width(label, SCALE) // 2, base + 8, label, MUTED_COLOR, SCALE)
    canvas.fill(left, base, right + 1, base + 1, AXIS_COLOR)
    for i, bar in enumerate(shown):
        row_top = y + i * EXPERIMENT_ROW
        w = round(bar.cost_usd / axis_max * (right - left))
        canvas.fill(left + 1, row_top + 5, left + 1 + w, row_top + EXPERIMENT_ROW - 5, EXPERIMENT_COLOR)
        text_y = row_top + (EXPERIMENT_ROW - TEXT_HEIGHT) // 2
        canvas.text(left - 12 - text_width(names[i], SCALE), text_y, names[i], TEXT_COLOR, SCALE)
        canvas.text(left + w + 8, text_y, values[i], TEXT_COLOR, SCALE)
    if not shown:
        canvas.text(left + 16, y + 8, "no closed, priced runs", MUTED_COLOR, SCALE)
    so_far = f"; {running} running pod{'s' if running != 1 else ''} so far" if running else ""
    axis_title = f"$ spent (closed runs with a known price{so_far})"
    canvas.text(left + (right - left - text_width(axis_title, SCALE)) // 2, base + 8 + LINE, axis_title, MUTED_COLOR)
    if rest:
        more = f"and {len(rest)} smaller experiment(s): {usd(sum(b.cost_usd for b in rest))} together"
        canvas.text(PAD, base + 8 + 2 * LINE, more, MUTED_COLOR, SCALE)
    return base + 8 + 3 * LINE


def png_height(data: PlotData) -> int:
    title = GLYPH_HEIGHT * 3 + 2 * LINE
    weeks = 2 * LINE + WEEK_PLOT_HEIGHT + 8 + 2 * LINE
    shown, rest = _top_experiments(data.experiments)
    experiments = LINE + max(1, len(shown)) * EXPERIMENT_ROW + 8 + (3 if rest else 2) * LINE
    return PAD + title + weeks + LINE + experiments + PAD


def render_png(data: PlotData, width: int = 1000) -> bytes:
    """Title and total, then spend per ISO week (vertical bars, $ axis, values on the bars), then spend per
    experiment (horizontal bars, names on the left, values at the bar ends). Height follows the data."""
    canvas = Canvas(width, png_height(data))
    total = sum(b.cost_usd for b in data.weeks)
    canvas.text(PAD, PAD, printable(data.title), TEXT_COLOR, 3)
    y = PAD + GLYPH_HEIGHT * 3 + LINE // 2
    canvas.text(PAD, y, f"total {usd(total)} in {len(data.experiments)} experiment(s)", MUTED_COLOR, SCALE)
    y += LINE + LINE // 2
    left = PAD + max(text_width(t, SCALE) for t in _tick_labels(max((b.cost_usd for b in data.weeks), default=0)))
    left += 12
    y = _week_panel(canvas, data.weeks, y, left)
    _experiment_panel(canvas, data.experiments, y + LINE, data.running)
    return canvas.png()


def plot_path(path: Path) -> Path:
    """`--plot spend` writes spend.png: a bare name gets the PNG, as `sky`/`gh` default their formats."""
    return path if path.suffix else path.with_name(path.name + ".png")


def write_plot(path: Path, data: PlotData) -> Path:
    """Write the plot and return where it went (a bare name gains .png)."""
    path = plot_path(path)
    suffix = path.suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise ConfigError(f"cannot plot to {path.name}", hint="name the file .png or .html")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        path.write_bytes(render_png(data))
    else:
        path.write_text(render_html(data), encoding="utf-8")
    return path
