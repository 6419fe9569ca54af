"""Plain-text tables that fit a terminal of 100 columns.

Columns keep their natural width while the table fits. When it does not, the columns named as
shrinkable give up width (in the order given, each down to its floor) and their cells end in "…"; the
others (ids, which commands take back; prices) are never cut, so a table of very long ids may still
run past the width rather than print an id nobody can paste. `--json` always carries the full values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

WIDTH = 100
GAP = "  "
ELLIPSIS = "…"


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


def render(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int = WIDTH,
    shrink: Mapping[int, int] | None = None,
    right: Sequence[int] = (),
    gap: str = GAP,
) -> list[str]:
    """The header line and one line per row; `right` lists the columns aligned right (numbers)."""
    natural = widths(headers, rows, width=width * 10, gap=gap)
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
