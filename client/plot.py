"""`gpuc ledger --plot`: spend by week and by experiment, as HTML (inline SVG) or PNG.

No plotting library: HTML is bars in SVG plus the numbers in a table; PNG is drawn by a tiny rasteriser
(rectangles into an RGB buffer, zlib + struct into PNG chunks). Bars only, no text in the PNG: the HTML
is the one to read numbers from.
"""

from __future__ import annotations

import html
import json
import struct
import zlib
from datetime import date
from pathlib import Path

from pydantic import BaseModel

from gpuc.core.errors import ConfigError
from gpuc.core.ledger import row_cost
from gpuc.core.models import LedgerRow

Color = tuple[int, int, int]
WEEK_COLOR: Color = (54, 110, 180)
EXPERIMENT_COLOR: Color = (220, 120, 40)
AXIS_COLOR: Color = (120, 120, 120)
BACKGROUND: Color = (255, 255, 255)


class Bar(BaseModel):
    label: str
    cost_usd: float


class PlotData(BaseModel):
    title: str
    weeks: list[Bar]  # ISO weeks ("2026-W37") in order
    experiments: list[Bar]  # most expensive first


def iso_week(day: str) -> str:
    year, week, _ = date.fromisoformat(day).isocalendar()
    return f"{year}-W{week:02d}"


def plot_data(rows: list[LedgerRow], title: str) -> PlotData:
    """Closed rows with a known cost, summed by ISO week of their start and by experiment."""
    weeks: dict[str, float] = {}
    experiments: dict[str, float] = {}
    for row in rows:
        cost = row_cost(row)
        if cost is None or not row.date:
            continue
        week = iso_week(row.date)
        weeks[week] = weeks.get(week, 0.0) + cost
        experiments[row.experiment] = experiments.get(row.experiment, 0.0) + cost
    return PlotData(
        title=title,
        weeks=[Bar(label=k, cost_usd=v) for k, v in sorted(weeks.items())],
        experiments=[Bar(label=k, cost_usd=v) for k, v in sorted(experiments.items(), key=lambda kv: -kv[1])],
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
            f'height="{h:.1f}" fill="{fill}"><title>{label}: ${bar.cost_usd:.2f}</title></rect>'
            f'<text {mid} y="{height + 26}">{label}</text>'
            f'<text {mid} y="{height + 42}">${bar.cost_usd:.2f}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(heading: str, bars: list[Bar]) -> str:
    rows = "".join(f"<tr><td>{html.escape(b.label)}</td><td>${b.cost_usd:.2f}</td></tr>" for b in bars)
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


def _draw_panel(canvas: Canvas, bars: list[Bar], color: Color, x0: int, width: int, margin: int) -> None:
    base = canvas.height - margin
    usable = canvas.height - 2 * margin
    canvas.fill(x0, base, x0 + width, base + 1, AXIS_COLOR)
    top = max((b.cost_usd for b in bars), default=0.0)
    if top <= 0:
        return
    slot = width / len(bars)
    for i, bar in enumerate(bars):
        h = round(bar.cost_usd / top * usable)
        left = x0 + round(i * slot + slot * 0.15)
        right = x0 + round((i + 1) * slot - slot * 0.15)
        canvas.fill(left, base - h, max(left + 1, right), base, color)


def render_png(data: PlotData, width: int = 800, height: int = 400, margin: int = 20) -> bytes:
    """Two panels side by side: spend by week (blue, oldest first), by experiment (orange, largest first)."""
    canvas = Canvas(width, height)
    panel = (width - 3 * margin) // 2
    _draw_panel(canvas, data.weeks, WEEK_COLOR, margin, panel, margin)
    _draw_panel(canvas, data.experiments, EXPERIMENT_COLOR, 2 * margin + panel, panel, margin)
    return canvas.png()


def write_plot(path: Path, data: PlotData) -> Path:
    suffix = path.suffix.lower()
    if suffix not in (".png", ".html", ".htm"):
        raise ConfigError(f"cannot plot to {path.name}", hint="name the file .png or .html")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        path.write_bytes(render_png(data))
    else:
        path.write_text(render_html(data), encoding="utf-8")
    return path
