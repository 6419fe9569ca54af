"""Text for the terminal: times and durations the way a person reads them ("1h05m" in a table, "2 h" in a
sentence, "14:05 UTC"), and plain-text tables that fit a terminal (100 columns at least, its own width when
wider).

Table columns keep their natural width while the table fits. When it does not, the columns named as
shrinkable give up width (in the order given, each down to its floor) and their cells end in "…"; the
others (ids, which commands take back; prices) are never cut, so a table of very long ids may still
run past the width rather than print an id nobody can paste. Only a terminal cuts: when stdout is a pipe
or a file (a script, `| less -S`, a cron mail), every cell is printed whole (`table_width()` is None).
`--json` always carries the full values.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

WIDTH = 100
GAP = "  "
ELLIPSIS = "…"


def short_span(seconds: float) -> str:
    """Compact, for table cells: 45s, 12m, 1h05m, 2d03h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def span_words(seconds: float) -> str:
    """For sentences: 45 s, 30 min, 2 h, 1 h 30 min, 1 d 2 h (rounded to the minute)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    minutes = round(s / 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{mins} min" if mins and not days else ""]
    return " ".join(p for p in parts if p) or "0 min"


def clock_utc(ts: float, now: float) -> str:
    """14:05 UTC today; 2026-12-02 14:05 UTC on another day (a lease across midnight must not read as today)."""
    when = datetime.fromtimestamp(ts, UTC)
    if when.date() == datetime.fromtimestamp(now, UTC).date():
        return when.strftime("%H:%M UTC")
    return when.strftime("%Y-%m-%d %H:%M UTC")


# -- tables -----------------------------------------------------------------------------------------
def table_width() -> int | None:
    """The width a table may take: a terminal's (at least WIDTH); None, no limit, when stdout is not one."""
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stdout
        terminal = False
    if not terminal:
        return None
    return max(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns)


def fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def widths(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int = WIDTH,
    shrink: Mapping[int, int] | None = None,
    gap: str = GAP,
) -> list[int]:
    """Each column's width. `shrink` maps a column index to its floor, in the order to shrink them."""
    sizes = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    over = sum(sizes) + len(gap) * (len(sizes) - 1) - width
    for index, floor in (shrink or {}).items():
        if over <= 0:
            break
        give = min(over, max(0, sizes[index] - max(floor, 1)))
        sizes[index] -= give
        over -= give
    return sizes


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None = WIDTH,
    shrink: Mapping[int, int] | None = None,
    right: Sequence[int] = (),
    gap: str = GAP,
) -> list[str]:
    """The header line and one line per row; `right` lists the columns aligned right (numbers). `width` None:
    no limit, every cell whole (not a terminal: table_width())."""
    natural = widths(headers, rows, width=sys.maxsize, gap=gap)
    if width is None:
        sizes = natural
    else:
        if sum(natural) + len(gap) * (len(natural) - 1) > width:
            gap = " "  # tighter columns before any cell is cut
        sizes = widths(headers, rows, width=width, shrink=shrink, gap=gap)
    lines = []
    for cells in [list(headers), *(list(r) for r in rows)]:
        parts = [
            fit(cell, size).rjust(size) if i in right else fit(cell, size).ljust(size)
            for i, (cell, size) in enumerate(zip(cells, sizes, strict=True))
        ]
        lines.append(gap.join(parts).rstrip())
    return lines


def drop_empty(
    headers: Sequence[str], rows: Sequence[Sequence[str]], optional: Sequence[int], empty: str = "-"
) -> tuple[list[str], list[list[str]], list[int]]:
    """Leave out the `optional` columns that hold nothing in any row; the kept columns' old indexes."""
    keep = [i for i in range(len(headers)) if i not in optional or any(r[i] != empty for r in rows)]
    return [headers[i] for i in keep], [[r[i] for i in keep] for r in rows], keep


def fmt_duration(seconds: float | None) -> str:
    """A run's length in a sentence: 45s, 3m07s, 1h05m; "?" when not known."""
    if seconds is None:
        return "?"
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
