"""A ledger row: `gpu-ledger.csv`'s nine columns in order, nothing else, and its cells read as numbers and times
that can be trusted. What is read is not trusted: a time outside 2000-2200 or a price or cost that is not a
sane amount (NaN, inf, negative, beyond MAX_*) reads as None, and the readers leave it out of every total
with a warning that names the row (a signed end_at of 1e300 once made every `gpuc ls` and `gpuc ledger` fail
with OverflowError).

A row carries a measured decode speed as `tok/s=<number>` anywhere in its note (e.g.
"kv cache on is 1.9x faster; tok/s=74.2"); the summary turns it into $ per 1M tokens.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpuc.core.clock import parse_iso
from gpuc.core.errors import ConfigError

# Startup: no pydantic here. `gpuc ledger` and `gpuc ls` read this file on every run, and every value in it
# is a string from the CSV or a row gpuc builds itself; the one thing read from outside gpuc's own code
# path, the index, is checked by hand (book.py `index_entry`), as strictly as the pydantic models it replaced.
LEDGER_COLUMNS: tuple[str, ...] = (
    "date",
    "experiment",
    "provider",
    "gpu",
    "price_per_hour",
    "start",
    "end",
    "cost_usd",
    "note",
)


@dataclass
class LedgerRow:
    """One pod, one row; the nine columns in docs/money.md's order. Times are ISO-8601 UTC strings."""

    date: str
    experiment: str
    provider: str
    gpu: str
    price_per_hour: str
    start: str
    end: str = ""
    cost_usd: str = ""
    note: str = ""

    def cells(self) -> list[str]:
        return [getattr(self, c) for c in LEDGER_COLUMNS]


@dataclass
class LedgerEntry:
    """A row and the pod id that owns it (None for rows gpuc did not write, e.g. typed in by hand)."""

    pod_id: str | None
    row: LedgerRow


TOKS_RE = re.compile(r"tok/s\s*=\s*([0-9]+(?:\.[0-9]+)?)")
# Sane bounds. No pod of this tool starts before 2000 or after 2200, rents at more than 1000 $/h or costs
# more than a million dollars: beyond them a number is a corrupt record or a slip of the hand.
MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z
MAX_TS = 7_258_118_400.0  # 2200-01-01T00:00:00Z
MAX_PRICE_PER_HOUR = 1_000.0
MAX_COST_USD = 1_000_000.0
NOTE_MAX_CHARS = 500


def usd(value: float) -> str:
    """Dollars as people read them: cents ($1,234.56), and an amount under a cent to a hundredth of a cent
    ($0.0021, a 3-minute run), never $0.00 for money that was spent."""
    if 0 < abs(value) < 0.0001:
        return "<$0.0001"
    return f"${value:.4f}" if abs(value) < 0.01 else f"${value:,.2f}"


def sane_ts(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and MIN_TS <= value <= MAX_TS


def sane_price(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and 0.0 <= value <= MAX_PRICE_PER_HOUR


def sane_cost(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and 0.0 <= value <= MAX_COST_USD


def format_usd(value: float) -> str:
    return f"{value:.4f}"


def money(usd: float) -> str:
    """An amount in a sentence: $0.0021, $0.48, $12.34. Under a dollar it keeps four decimals: a 30-second
    pod costs $0.0021, and "$0.00" reads as "free"."""
    return f"${usd:.4f}" if abs(usd) < 1 else f"${usd:,.2f}"


def format_price(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def parse_float(text: str) -> float | None:
    """A finite number, or None (empty, not a number, NaN, inf)."""
    try:
        value = float(text) if text.strip() else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def parse_price(text: str) -> float | None:
    value = parse_float(text)
    return value if sane_price(value) else None


def parse_cost(text: str) -> float | None:
    value = parse_float(text)
    return value if sane_cost(value) else None


def parse_time(text: str) -> float | None:
    """An ISO-8601 time between MIN_TS and MAX_TS, else None."""
    try:
        value = parse_iso(text) if text.strip() else None
    except (ValueError, OverflowError):
        return None
    return value if sane_ts(value) else None


def row_problems(row: LedgerRow) -> list[str]:
    """What in this row cannot be trusted (a filled cell that is not a sane time or amount)."""
    problems = []
    if row.date and parse_time(f"{row.date}T00:00:00Z") is None:
        problems.append(f"date {row.date[:40]!r} is not a YYYY-MM-DD day between 2000 and 2200")
    for column in ("start", "end"):
        text = getattr(row, column)
        if text and parse_time(text) is None:
            problems.append(f"{column} {text[:40]!r} is not an ISO time between 2000 and 2200")
    if row.price_per_hour and parse_price(row.price_per_hour) is None:
        problems.append(
            f"price_per_hour {row.price_per_hour[:40]!r} is not an amount from 0 to {MAX_PRICE_PER_HOUR:g} $/h"
        )
    if row.cost_usd and parse_cost(row.cost_usd) is None:
        problems.append(f"cost_usd {row.cost_usd[:40]!r} is not an amount from 0 to {MAX_COST_USD:g} $")
    return problems


def describe(row: LedgerRow) -> str:
    return f"row {row.experiment[:40] or '?'} started {row.start[:40] or '?'}"


def row_hours(row: LedgerRow) -> float | None:
    """Billed hours of a closed row (bootstrap and downloads included: the clock ran), None when open
    or when a time is not sane."""
    start, end = parse_time(row.start), parse_time(row.end)
    if start is None or end is None:
        return None
    return max(0.0, end - start) / 3600.0


def row_cost(row: LedgerRow) -> float | None:
    """cost_usd as written, else price x hours; None when it cannot be known (or is not sane)."""
    if row.cost_usd.strip():
        return parse_cost(row.cost_usd)
    price, hours = parse_price(row.price_per_hour), row_hours(row)
    return price * hours if price is not None and hours is not None else None


def row_tok_per_s(row: LedgerRow) -> float | None:
    match = TOKS_RE.search(row.note)
    value = parse_float(match.group(1)) if match else None
    return value if value and value > 0 else None


def usd_per_1m_tokens(price_per_hour: float, tok_per_s: float) -> float:
    return price_per_hour * 1e6 / (tok_per_s * 3600.0)


def check_note(text: str) -> str:
    """A note as the ledger takes it: one line of text (stripped), refused with the fix otherwise. `up
    --note` checks it before renting anything."""
    note = text.strip()
    if not note:
        raise ConfigError("the note is empty", hint='give the text: gpuc ledger note RUN "lr 3e-4 wins"')
    if len(note) > NOTE_MAX_CHARS:
        raise ConfigError(
            f"the note is {len(note)} characters; the ledger takes at most {NOTE_MAX_CHARS}",
            hint="keep the conclusion short; put the details in the run's results",
        )
    bad = next((ch for ch in note if ord(ch) < 32 or ord(ch) == 127), None)
    if bad is not None:
        raise ConfigError(
            f"the note holds a control character ({bad!r}): a ledger cell is one line of text",
            hint="write it on one line, without tabs or newlines",
        )
    return note
