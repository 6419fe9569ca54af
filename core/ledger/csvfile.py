"""The ledger's CSV text: written as plain UTF-8 with its header line; one a spreadsheet saved with a
byte-order mark reads as well. A cell starting with = + - @ tab or CR is written behind a single quote, so a
spreadsheet shows it instead of running it (OWASP CSV injection), and reads back exactly as written."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from pathlib import Path

from gpuc.core.errors import ConfigError
from gpuc.core.ledger.rows import LEDGER_COLUMNS, LedgerRow

# OWASP CSV injection: a cell starting with one of these is a formula to a spreadsheet.
FORMULA_START = "=+-@\t\r"
_GUARDED = re.compile("^'*[" + re.escape(FORMULA_START) + "]")


def guard_cell(text: str) -> str:
    """A cell a spreadsheet would run as a formula gets a leading single quote. So does one that already
    starts with quotes before such a character, so `unguard_cell` gives back exactly what was written."""
    return "'" + text if _GUARDED.match(text) else text


def unguard_cell(text: str) -> str:
    return text[1:] if text.startswith("'") and _GUARDED.match(text) else text


def render_csv(rows: Iterable[LedgerRow]) -> str:
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    # A bare CR in a cell ends the row for a reader unless the cell is quoted, and the minimal quoting
    # only looks for the line terminator ("\n"): rows holding one are quoted whole.
    quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    writer.writerow(LEDGER_COLUMNS)
    for row in rows:
        cells = [guard_cell(c) for c in row.cells()]
        (quoted if any("\r" in c for c in cells) else writer).writerow(cells)
    return out.getvalue()


def decode_csv(raw: bytes, path: Path) -> str:
    """The ledger's text. A spreadsheet may have saved it with a UTF-8 byte-order mark: read past it."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} line {line} is not UTF-8",
            hint="save it again as 'CSV UTF-8' (a spreadsheet's other CSV flavours are not UTF-8)",
        ) from None


def parse_csv(text: str, path: Path) -> list[LedgerRow]:
    lines = list(csv.reader(io.StringIO(text, newline="")))
    if not lines:
        return []
    if tuple(lines[0]) != LEDGER_COLUMNS:
        raise ConfigError(
            f"{path} does not start with the ledger header",
            hint=f"its first line must be: {','.join(LEDGER_COLUMNS)}",
        )
    rows: list[LedgerRow] = []
    for number, cells in enumerate(lines[1:], start=2):
        if not cells:
            continue
        if len(cells) != len(LEDGER_COLUMNS):
            raise ConfigError(
                f"{path} line {number} has {len(cells)} cells, not {len(LEDGER_COLUMNS)}",
                hint="fix that line by hand (quote a note that contains commas); gpuc will not rewrite it",
            )
        rows.append(LedgerRow(**dict(zip(LEDGER_COLUMNS, map(unguard_cell, cells), strict=True))))
    return rows
