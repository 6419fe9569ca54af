"""The cost ledger: `gpu-ledger.csv`, one row per pod, the nine SPEC columns in order, nothing else.

Files, side by side:

    gpu-ledger.csv             the ledger the user reads, edits and plots (LEDGER_COLUMNS, a header line)
    gpu-ledger.csv.index.json  pod id -> its row: {"version": 1, "pods": {pod_id: {"row": i,
                               "start_row": {the first six columns}, "committed": bool}}}
    gpu-ledger.csv.lock        the fcntl lock every writer holds

The pod id cannot live in the CSV (nine columns, exactly), so the index maps it to a row. `row` is a position
hint; the row is confirmed by its first five columns (date, experiment, provider, gpu, start), so a user who
deletes or reorders rows by hand does not make gpuc close the wrong one.

Crash safety: every file is replaced whole (temp file, fsync, os.replace, fsync of the directory), under
an exclusive fcntl.flock. A new row is written in three steps: the index entry as `committed: false` (the
intent), then the CSV with the row, then the index with `committed: true`. Whoever next takes the lock
completes an interrupted start: a pending entry whose row is missing gets it appended, one whose row is
present is marked committed. So a crash never leaves a broken row, never loses a started row, and never
writes one twice.

A row carries a measured decode speed as `tok/s=<number>` anywhere in its note (e.g.
"kv cache on is 1.9x faster; tok/s=74.2"); the summary turns it into $ per 1M tokens.

What comes in is checked, what is read is not trusted: a time outside 2000-2200 or a price or cost that is
not a sane amount (NaN, inf, negative, beyond MAX_*) is refused at the intake from the watchdog and left
out of every total by the readers, each with a warning that names the row (a signed end_at of 1e300 once
made every `gpuc ls` and `gpuc ledger` fail with OverflowError). The file is written as plain UTF-8; one a
spreadsheet saved with a byte-order mark reads as well. A cell starting with = + - @ tab or CR is written
behind a single quote, so a spreadsheet shows it instead of running it (OWASP CSV injection), and reads
back exactly as written.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
import re
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from gpuc.core.atomicfile import atomic_write as atomic_write  # re-exported: the hook's writer too
from gpuc.core.clock import iso, parse_iso
from gpuc.core.errors import ConfigError

# Startup: no pydantic here. `gpuc ledger` and `gpuc ls` read this file on every run, and every value in it
# is a string from the CSV or a row gpuc builds itself; the one thing read from outside gpuc's own code
# path, the index, is checked by hand (`_index_entry`), as strictly as the pydantic models it replaced.
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


class WatchdogRecord(Protocol):
    """What the ledger and the budget read of the watchdog's record of a pod (api.PodRecord)."""

    @property
    def pod_id(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def experiment(self) -> str: ...
    @property
    def gpu(self) -> str | None: ...
    @property
    def price_per_hour(self) -> float | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def registered_at(self) -> float: ...
    @property
    def last_seen(self) -> float | None: ...
    @property
    def state(self) -> str: ...
    @property
    def end_at(self) -> float | None: ...
    @property
    def note(self) -> str | None: ...


class AttemptView(Protocol):
    """One attempt of a recovering run, as the ledger reads it (api.AttemptRecord)."""

    @property
    def pod_id(self) -> str: ...
    @property
    def end(self) -> float | None: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def paused_at(self) -> float | None: ...


class RunView(Protocol):
    """A recovering run (`up --recover`) as the ledger reads the watchdog's record of it (api.RunRecovery):
    ONE row, the first pod's, whatever the number of attempts."""

    @property
    def run_id(self) -> str: ...
    @property
    def done(self) -> bool: ...
    @property
    def spent_usd(self) -> float: ...
    @property
    def stopped_why(self) -> str | None: ...
    @property
    def attempts(self) -> Sequence[AttemptView]: ...


# What the intake knows of the recovering runs its records name: run id -> the watchdog's record of the run, or
# None when the watchdog holds no such run (then its first pod's row is a pod's like any other). A run missing
# from the mapping was not read: its row stays open (never closed at one attempt's end, a part of the run).
Runs = Mapping[str, "RunView | None"]


def run_of(record: object) -> tuple[str | None, int | None]:
    """(run id, attempt) of a watchdog record of a pod of a recovering run; (None, None) for any other pod.
    Read by name: a watchdog's own store record may predate the fields."""
    run_id, attempt = getattr(record, "run_id", None), getattr(record, "attempt", None)
    if not isinstance(run_id, str) or not run_id:
        return None, None
    return run_id, attempt if isinstance(attempt, int) else 1


# ended_by of an attempt the watchdog's recovery destroyed to rent the next (functions/recovery/rerent.py):
# never its run's end
RECOVERY_ENDED_BY = "recovery"


def later_attempt(record: object) -> bool:
    """A pod the watchdog rented to recover a run (attempt 2 and on): its cost is on the run's one row."""
    _run, attempt = run_of(record)
    return attempt is not None and attempt > 1


def run_note(run: RunView) -> str:
    """The run's attempts in words, for its one row: "interruptible, 3 attempts (2 outbids): 31000000 $0.07,
    31000001 $0.11, 31000002 $0.05"; and why recovery stopped, when it did."""
    count = len(run.attempts)
    each = ", ".join(f"{a.pod_id} {usd(a.cost_usd)}" for a in run.attempts)
    # Every re-rent followed an outbid; the last attempt may have been outbid too (a stop during its wait, or
    # the last recovery used up).
    outbid = count - 1 + (count > 0 and run.attempts[-1].paused_at is not None)
    outbids = f" ({outbid} outbid{'s' if outbid != 1 else ''})" if outbid else ""
    note = f"interruptible, {count} attempt{'s' if count != 1 else ''}{outbids}: {each}"
    return f"{note}; recovery stopped: {run.stopped_why}" if run.stopped_why else note


def usd(value: float) -> str:
    """Dollars as people read them: cents ($1,234.56), and an amount under a cent to a hundredth of a cent
    ($0.0021, a 3-minute run), never $0.00 for money that was spent."""
    if 0 < abs(value) < 0.0001:
        return "<$0.0001"
    return f"${value:.4f}" if abs(value) < 0.01 else f"${value:,.2f}"


def run_end(run: RunView) -> float | None:
    """The run's end: its last attempt's, once every attempt has ended; None while one still bills (a stopped
    recovery leaves its pod running). Never its first pod's end: that is the first outbid, not the run's."""
    ends = [a.end for a in run.attempts]
    if not ends or any(e is None for e in ends):
        return None
    return max(e for e in ends if e is not None)


@dataclass
class LedgerRow:
    """One pod, one row; the nine columns in SPEC order. Times are ISO-8601 UTC strings."""

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

INDEX_VERSION = 1
TOKS_RE = re.compile(r"tok/s\s*=\s*([0-9]+(?:\.[0-9]+)?)")
MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_KEY_COLUMNS = ("date", "experiment", "provider", "gpu", "start")
# Sane bounds. No pod of this tool starts before 2000 or after 2200, rents at more than 1000 $/h or costs
# more than a million dollars: beyond them a number is a corrupt record or a slip of the hand.
MIN_TS = 946_684_800.0  # 2000-01-01T00:00:00Z
MAX_TS = 7_258_118_400.0  # 2200-01-01T00:00:00Z
MAX_PRICE_PER_HOUR = 1_000.0
MAX_COST_USD = 1_000_000.0
# OWASP CSV injection: a cell starting with one of these is a formula to a spreadsheet.
FORMULA_START = "=+-@\t\r"
_GUARDED = re.compile("^'*[" + re.escape(FORMULA_START) + "]")


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


def check_month(month: str) -> str:
    if not MONTH_RE.match(month):
        raise ConfigError(f"month {month!r} is not YYYY-MM", hint="pass a month like --month 2026-09")
    return month


def current_month(now: float | None = None) -> str:
    """YYYY-MM of `now` (default: the wall clock), UTC: the months gpuc counts are UTC calendar months."""
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return moment.strftime("%Y-%m")


def month_window(month: str) -> tuple[float, float]:
    """[first second of the month, first second of the next), UTC."""
    year, number = (int(x) for x in check_month(month).split("-"))
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + (number == 12), number % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp()


def overlap_hours(start: float, end: float, window: tuple[float, float]) -> float:
    """Hours of [start, end] that fall inside the window (0 when they do not meet)."""
    return max(0.0, min(end, window[1]) - max(start, window[0])) / 3600.0


def _key(row: LedgerRow) -> tuple[str, ...]:
    return tuple(getattr(row, c) for c in _KEY_COLUMNS)


@dataclass
class IndexEntry:
    """Where a pod's row is in the ledger file, and what it held when written."""

    row: int
    start_row: LedgerRow
    committed: bool = True


def _index_entry(raw: Any) -> IndexEntry:
    """One entry of the index file, checked as the pydantic model it replaced did: an int `row`, a bool
    `committed` (default true), a `start_row` of exactly the ledger's columns, each a string (the last three
    may be missing: LedgerRow's constructor refuses an unknown or a missing one with a TypeError). Unknown
    keys of the entry itself are ignored (a newer gpuc may add some). Anything else raises ValueError,
    TypeError, KeyError or AttributeError: the caller's "not a gpuc ledger index"."""
    row, start, committed = raw.get("row"), raw["start_row"], raw.get("committed", True)
    if not isinstance(row, int) or isinstance(row, bool):
        raise ValueError("an index entry's row is not an integer")
    if not isinstance(committed, bool):
        raise ValueError("an index entry's committed is not true or false")
    if not all(isinstance(value, str) for value in start.values()):
        raise ValueError("an index entry's start_row has a cell that is not text")
    return IndexEntry(row=row, start_row=LedgerRow(**start), committed=committed)


@dataclass
class LedgerEntry:
    """A row and the pod id that owns it (None for rows gpuc did not write, e.g. typed in by hand)."""

    pod_id: str | None
    row: LedgerRow


@dataclass
class _Book:
    """The ledger in memory during one locked transaction."""

    rows: list[LedgerRow]
    index: dict[str, IndexEntry]
    rows_dirty: bool = False
    index_dirty: bool = False

    def locate(self, pod_id: str) -> int | None:
        entry = self.index.get(pod_id)
        if entry is None:
            return None
        return self._find(entry)

    def _find(self, entry: IndexEntry) -> int | None:
        key = _key(entry.start_row)
        hint = entry.row
        if 0 <= hint < len(self.rows) and _key(self.rows[hint]) == key:
            return hint
        for i, row in enumerate(self.rows):
            if _key(row) == key:
                entry.row = i
                self.index_dirty = True
                return i
        return None

    def append(self, pod_id: str, row: LedgerRow) -> LedgerRow:
        self.rows.append(row)
        self.index[pod_id] = IndexEntry(row=len(self.rows) - 1, start_row=replace(row), committed=False)
        self.rows_dirty = self.index_dirty = True
        return row

    def repair(self) -> None:
        """Finish starts a crash interrupted between the index intent and the CSV write."""
        for entry in self.index.values():
            if entry.committed:
                continue
            if self._find(entry) is None:
                self.rows.append(replace(entry.start_row))
                entry.row = len(self.rows) - 1
                self.rows_dirty = True
            else:
                entry.committed = True
            self.index_dirty = True

    def close(self, i: int, end_ts: float, note: str | None, cost_usd: float | None = None) -> LedgerRow:
        """Fill the end and the cost: `cost_usd` when known (a recovering run's, across its attempts),
        else price x hours."""
        row = self.rows[i]
        if not row.end:
            row.end = iso(end_ts)
            price, hours = parse_price(row.price_per_hour), row_hours(row)
            if cost_usd is not None:
                row.cost_usd = format_usd(cost_usd)
            else:
                row.cost_usd = format_usd(price * hours) if price is not None and hours is not None else ""
            self.rows_dirty = True
        return self.add_note(i, note)

    def add_note(self, i: int, note: str | None) -> LedgerRow:
        row = self.rows[i]
        if note and note not in row.note:
            row.note = f"{row.note}; {note}" if row.note else note
            self.rows_dirty = True
        return row


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


@dataclass
class GroupTotal:
    """The closed rows of one experiment or one GPU in a month."""

    name: str
    rows: int
    hours: float
    cost_usd: float


@dataclass
class TokenCost:
    """An experiment's cost per million tokens, where its rows say how many it made."""

    experiment: str
    gpu: str
    start: str
    price_per_hour: float
    tok_per_s: float
    usd_per_1m_tokens: float


@dataclass(frozen=True)
class RunningCost:
    """An open row whose pod is still billing: its cost up to now (price x hours since its start), shown
    as "running, so far". Never a closed row: once it has an end, the row's own cost counts instead."""

    pod_id: str | None
    experiment: str
    provider: str
    gpu: str
    date: str
    start: str
    price_per_hour: float
    hours: float
    cost_usd: float


@dataclass
class LedgerSummary:
    """A month of the ledger. Totals count closed, priced rows; open rows are listed, not guessed at."""

    month: str | None
    rows: int
    total_hours: float
    total_cost_usd: float
    effective_price_per_hour: float | None  # total cost / total hours
    unpriced_rows: int  # closed rows with neither cost_usd nor price: missing from the totals
    by_experiment: list[GroupTotal]
    by_gpu: list[GroupTotal]
    open_rows: list[LedgerRow]  # empty `end`: still running, preempted, or deleted outside gpuc
    no_note_rows: list[LedgerRow]  # closed with an empty `note`: runs that produced no conclusion
    token_costs: list[TokenCost]
    # rows with a time or an amount that is not sane: left out of the totals
    warnings: list[str] = field(default_factory=list)
    # Pods still billing, only when asked with a `now` (Ledger.summary): "running, so far".
    running: list[RunningCost] = field(default_factory=list)
    running_usd: float = 0.0  # their cost up to now; total_cost_usd stays the closed rows' alone
    month_total_usd: float = 0.0  # total_cost_usd + running_usd: what the month has cost so far


def _group(rows: list[tuple[LedgerRow, float, float]], column: str) -> list[GroupTotal]:
    groups: dict[str, GroupTotal] = {}
    for row, hours, cost in rows:
        name = getattr(row, column) or "?"
        total = groups.setdefault(name, GroupTotal(name=name, rows=0, hours=0.0, cost_usd=0.0))
        total.rows += 1
        total.hours += hours
        total.cost_usd += cost
    return sorted(groups.values(), key=lambda g: (-g.cost_usd, g.name))


def _token_cost(row: LedgerRow) -> TokenCost | None:
    price, toks = parse_price(row.price_per_hour), row_tok_per_s(row)
    if price is None or toks is None:
        return None
    return TokenCost(
        experiment=row.experiment,
        gpu=row.gpu,
        start=row.start,
        price_per_hour=price,
        tok_per_s=toks,
        usd_per_1m_tokens=usd_per_1m_tokens(price, toks),
    )


def summarize(rows: list[LedgerRow], month: str | None = None) -> LedgerSummary:
    if month is not None:
        rows = [r for r in rows if r.date.startswith(check_month(month))]
    priced: list[tuple[LedgerRow, float, float]] = []
    unpriced = 0
    warnings: list[str] = []
    for row in rows:
        problems = row_problems(row)
        if problems:
            warnings.append(f"{describe(row)}: {'; '.join(problems)}: left out of the totals (fix it by hand)")
            continue
        hours, cost = row_hours(row), row_cost(row)
        if hours is None:
            continue
        if cost is None:
            unpriced += 1
        else:
            priced.append((row, hours, cost))
    total_hours = sum(h for _, h, _ in priced)
    total_cost = sum(c for _, _, c in priced)
    return LedgerSummary(
        month=month,
        rows=len(rows),
        total_hours=total_hours,
        total_cost_usd=total_cost,
        effective_price_per_hour=total_cost / total_hours if total_hours > 0 else None,
        unpriced_rows=unpriced,
        by_experiment=_group(priced, "experiment"),
        by_gpu=_group(priced, "gpu"),
        open_rows=[r for r in rows if not r.end],
        no_note_rows=[r for r in rows if r.end and not r.note.strip()],
        token_costs=[t for t in map(_token_cost, rows) if t is not None],
        warnings=warnings,
    )


# -- running pods in the month's figures ----------------------------------------------------
RUNNING_SO_FAR = "running, so far"
LIVE = ("ok", "late", "down")  # a watchdog record without an end that is still billing
NOTE_MAX_CHARS = 500


def runs_spent(records: Iterable[WatchdogRecord], runs: Runs) -> dict[str, float]:
    """The first pod's id -> its run's spent so far, for each recovering run still going (running_costs)."""
    out: dict[str, float] = {}
    for record in records:
        run_id, attempt = run_of(record)
        run = runs.get(run_id) if run_id is not None and attempt == 1 else None
        if run is not None and (not run.done or run_end(run) is None) and sane_cost(run.spent_usd):
            out[record.pod_id] = run.spent_usd
    return out


def recovering_runs(records: Iterable[WatchdogRecord]) -> list[str]:
    """The run ids of the recovering runs the records name (each once, in order)."""
    return list(dict.fromkeys(r for r, _a in map(run_of, records) if r is not None))


def live_pod_ids(records: Iterable[WatchdogRecord]) -> frozenset[str]:
    """The pods the watchdog hears as still billing (no end, a live state)."""
    return frozenset(r.pod_id for r in records if r.end_at is None and r.state in LIVE)


def running_costs(
    entries: Iterable[LedgerEntry],
    now: float,
    live: Collection[str] | None = None,
    runs_spent: Mapping[str, float] | None = None,
) -> tuple[list[RunningCost], list[str]]:
    """Each open row still billing, with its cost up to `now`; and notes on the open rows not counted.

    `live`: the pod ids the watchdog hears (live_pod_ids); an open row it does not hear is listed as open,
    not counted (preempted or deleted outside gpuc: the provider's bill says). None: the watchdog was not
    asked, and every open row counts (the safe side: money shown, not hidden), said in a note. A row with
    an end is never here: its own cost counts, once. An open row with a cost written by hand is that cost
    (the plot counts it already), and one with no price or no sane start cannot be counted (a note says).
    `runs_spent`: the open row of a recovering run (its first pod's id) -> what the run has spent so far across
    its attempts (the watchdog's RunRecovery): that, not the first pod's price x the time since it started
    (the first pod may be long gone, a later attempt billing)."""
    running: list[RunningCost] = []
    notes: list[str] = []
    unpriced = 0
    spent = runs_spent or {}
    for entry in entries:
        row = entry.row
        if row.end or row.cost_usd.strip() or row_problems(row):
            continue
        run_spent = spent.get(entry.pod_id) if entry.pod_id else None
        if run_spent is None and live is not None and entry.pod_id not in live:
            continue
        start, price = parse_time(row.start), parse_price(row.price_per_hour)
        if start is None or (price is None and run_spent is None):
            unpriced += 1
            continue
        hours = max(0.0, now - start) / 3600.0
        running.append(
            RunningCost(
                pod_id=entry.pod_id, experiment=row.experiment, provider=row.provider, gpu=row.gpu,
                date=row.date, start=row.start, price_per_hour=price or 0.0, hours=hours,
                cost_usd=run_spent if run_spent is not None else (price or 0.0) * hours,
            )
        )
    if unpriced:
        notes.append(f"{unpriced} running pod(s) have no price in the ledger: their cost so far is not counted")
    if live is None and running:
        notes.append(f"no word from the watchdog: {len(running)} open row(s) counted as {RUNNING_SO_FAR}")
    return running, notes


def with_running(
    summary: LedgerSummary,
    entries: Iterable[LedgerEntry],
    now: float,
    live: Collection[str] | None = None,
    runs_spent: Mapping[str, float] | None = None,
) -> LedgerSummary:
    """The summary with its month's running pods added as RUNNING_SO_FAR (the same month rule: a row
    belongs to the month of its start); a recovering run's row at what the run has spent (running_costs)."""
    month = summary.month
    chosen = [e for e in entries if month is None or e.row.date.startswith(month)]
    running, notes = running_costs(chosen, now, live, runs_spent)
    spent = sum(r.cost_usd for r in running)
    return replace(
        summary,
        running=running,
        running_usd=spent,
        month_total_usd=summary.total_cost_usd + spent,
        warnings=[*summary.warnings, *notes],
    )


def running_lines(summary: LedgerSummary) -> list[str]:
    """What `gpuc ledger` prints for the running pods; nothing when there are none."""
    if not summary.running:
        return []
    rate = sum(r.price_per_hour for r in summary.running)
    head = (
        f"{RUNNING_SO_FAR}: {usd(summary.running_usd)} ({len(summary.running)} pod(s), {usd(rate)}/h); "
        f"with the closed rows {usd(summary.month_total_usd)}"
    )
    return [head, *(f"  {r.start}  {r.experiment}  {r.provider}  {r.gpu}  {r.hours:.2f} h  {usd(r.cost_usd)}"
                    for r in summary.running)]


def running_rows(running: Iterable[RunningCost]) -> list[LedgerRow]:
    """The running pods as rows for the plot (client/plot.py sums rows by their cost): the cost so far in
    cost_usd, the note RUNNING_SO_FAR. Add them to the rows it is given: an open row counts for nothing
    there, so no pod is counted twice."""
    return [
        LedgerRow(
            date=r.date, experiment=r.experiment, provider=r.provider, gpu=r.gpu,
            price_per_hour=format_price(r.price_per_hour), start=r.start, cost_usd=format_usd(r.cost_usd),
            note=RUNNING_SO_FAR,
        )
        for r in running
    ]


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


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.index_path = self.path.with_name(self.path.name + ".index.json")
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    # --- the API the rest of gpuc calls -------------------------------------------------------------

    def start(
        self,
        pod_id: str,
        *,
        provider: str,
        experiment: str,
        gpu: str,
        price_per_hour: float | None,
        start_ts: float,
    ) -> LedgerRow:
        """Write the first six columns. Idempotent: a pod already on record keeps its row."""
        if not sane_ts(start_ts):
            raise ConfigError(f"start time {start_ts!r} of pod {pod_id} is not a time between 2000 and 2200")
        if price_per_hour is not None and not sane_price(price_per_hour):
            raise ConfigError(
                f"price {price_per_hour!r}/h of pod {pod_id} is not an amount from 0 to {MAX_PRICE_PER_HOUR:g} $/h"
            )
        with self._transaction() as book:
            i = book.locate(pod_id)
            if i is not None:
                return replace(book.rows[i])
            row = LedgerRow(
                date=iso(start_ts)[:10],
                experiment=experiment,
                provider=provider,
                gpu=gpu,
                price_per_hour=format_price(price_per_hour) if price_per_hour is not None else "",
                start=iso(start_ts),
            )
            return replace(book.append(pod_id, row))

    def end(self, pod_id: str, *, end_ts: float, note: str | None = None) -> LedgerRow | None:
        """Fill end, cost_usd (price x hours) and note. A closed row keeps its end; a note may be added."""
        if not sane_ts(end_ts):
            raise ConfigError(f"end time {end_ts!r} of pod {pod_id} is not a time between 2000 and 2200")
        with self._transaction() as book:
            i = book.locate(pod_id)
            return None if i is None else replace(book.close(i, end_ts, note))

    def sync_from_functions(self, records: Iterable[WatchdogRecord], runs: Runs | None = None) -> SyncReport:
        """Take in what the functions know: close rows whose pod ended (the reaper or the pod itself may have
        ended it while this laptop slept), and add the row of a registered pod the ledger never saw (the
        laptop died between register and the ledger start). A time or a price that is not sane is refused
        with a warning, never written: the row stays open (or is not added) rather than wrong.

        A recovering run (`up --recover`) is ONE row, its first pod's: the pods rented to recover it never
        make rows of their own, and the row closes when the run is done (`runs`), at its last attempt's end,
        with the run's cost across every attempt and the attempts in its note."""
        report = SyncReport()
        with self._transaction() as book:
            for record in records:
                if later_attempt(record):
                    continue
                i = book.locate(record.pod_id)
                if i is None:
                    row, problems = _row_from_record(record)
                    report.warnings.extend(f"watchdog record of pod {record.pod_id}: {p}" for p in problems)
                    if row is None:
                        continue
                    book.append(record.pod_id, row)
                    i = len(book.rows) - 1
                run_id, _attempt = run_of(record)
                if run_id is not None and (runs is None or run_id not in runs or runs[run_id] is not None):
                    if self._close_run(book, i, record, None if runs is None else runs.get(run_id), report):
                        report.closed += 1
                    continue
                if record.end_at is None or book.rows[i].end:
                    continue
                if not sane_ts(record.end_at):
                    report.warnings.append(
                        f"watchdog record of pod {record.pod_id}: end {record.end_at!r} is not a time between "
                        "2000 and 2200: ignored, the row stays open (gpuc down closes it, or fill `end` by hand)"
                    )
                    continue
                book.close(i, record.end_at, record.note)
                report.closed += 1
        return report

    @staticmethod
    def _close_run(book: _Book, i: int, record: WatchdogRecord, run: RunView | None, report: SyncReport) -> bool:
        """The first pod's row of a recovering run: closed once the run is done, never at one attempt's end
        (the first pod ends at its outbid while the run goes on). True when it closed now."""
        if run is None or not run.done or book.rows[i].end:
            return False
        end = run_end(run)
        if end is None:
            return False  # recovery is over but its latest pod still bills: closed when it ends
        if not sane_ts(end) or not sane_cost(run.spent_usd):
            report.warnings.append(
                f"watchdog record of run {run.run_id}: its end or cost is not sane: ignored, the row stays open "
                "(fill `end` and `cost_usd` by hand)"
            )
            return False
        note = "; ".join(n for n in (run_note(run), record.note) if n)
        book.close(i, end, note[:NOTE_MAX_CHARS], cost_usd=run.spent_usd)
        return True

    def close_run(self, pod_id: str, run: RunView, note: str | None = None) -> LedgerRow | None:
        """`gpuc down` of a recovering run that the watchdog says is done: its one row (the first pod's) closed
        with the run's end, cost and attempts. None: no row, or the run is not done (the row stays open)."""
        end = run_end(run)
        if not run.done or end is None or not sane_ts(end) or not sane_cost(run.spent_usd):
            return None
        text = "; ".join(n for n in (run_note(run), note) if n)[:NOTE_MAX_CHARS]
        with self._transaction() as book:
            i = book.locate(pod_id)
            return None if i is None else replace(book.close(i, end, text, cost_usd=run.spent_usd))

    def check(self) -> None:
        """Raise ConfigError unless the ledger reads and can be written: `up` asks before the create, since
        a ledger that fails after it costs a pod (created, then destroyed)."""
        with self._locked(fcntl.LOCK_SH):
            self._read()
        probe = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.check.tmp")
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            probe.unlink(missing_ok=True)  # a writer clearing stale temps may have taken it already
        except OSError as exc:
            raise ConfigError(
                f"cannot write the ledger's folder {self.path.parent}: {exc.strerror or type(exc).__name__}",
                hint=f"make {self.path.parent} writable by you, or point GPUC_LEDGER_PATH elsewhere",
            ) from None

    def rows(self) -> list[LedgerRow]:
        with self._locked(fcntl.LOCK_SH):
            return self._read().rows

    def entries(self) -> list[LedgerEntry]:
        with self._locked(fcntl.LOCK_SH):
            book = self._read()
        owners: dict[int, str] = {}
        for pod_id in book.index:
            i = book.locate(pod_id)
            if i is not None:
                owners[i] = pod_id
        return [LedgerEntry(pod_id=owners.get(i), row=row) for i, row in enumerate(book.rows)]

    def summary(
        self,
        month: str | None = None,
        *,
        now: float | None = None,
        live: Collection[str] | None = None,
        runs_spent: Mapping[str, float] | None = None,
    ) -> LedgerSummary:
        """The month's summary; with `now`, its running pods too (with_running: `live`, `runs_spent` as there)."""
        if now is None:
            return summarize(self.rows(), month)
        entries = self.entries()
        return with_running(summarize([e.row for e in entries], month), entries, now, live, runs_spent)

    def note(self, pod_id: str, text: str) -> LedgerRow | None:
        """Add a note to a pod's row, open or closed (`gpuc ledger note RUN`, `up --note`): appended after
        what the row says, as `down --note` does; the same note twice is written once. None: no row."""
        note = check_note(text)
        with self._transaction() as book:
            i = book.locate(pod_id)
            return None if i is None else replace(book.add_note(i, note))

    # --- files ---------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self, how: int = fcntl.LOCK_EX) -> Iterator[None]:
        # flock, not lockf: flock locks belong to the open file, so two threads of one process exclude each
        # other too (POSIX record locks are per process and would let a second thread in).
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(
                f"cannot open the ledger's lock {self.lock_path}: {exc.strerror or type(exc).__name__}",
                hint=f"make {self.path.parent} writable by you, or point GPUC_LEDGER_PATH elsewhere",
            ) from None
        try:
            fcntl.flock(fd, how)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def _transaction(self) -> Iterator[_Book]:
        with self._locked():
            self._remove_stale_temps()
            book = self._read()
            book.repair()
            yield book
            self._persist(book)

    def _read(self) -> _Book:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        except OSError as exc:
            raise ConfigError(
                f"cannot read the ledger {self.path}: {exc.strerror or type(exc).__name__}",
                hint=f"make it a readable file (or move it aside: mv {self.path} {self.path}.bad)",
            ) from None
        rows = parse_csv(decode_csv(raw, self.path), self.path) if raw else []
        return _Book(rows=rows, index=self._read_index())

    def _read_index(self) -> dict[str, IndexEntry]:
        if not self.index_path.exists():
            return {}
        try:
            raw = json.loads(self.index_path.read_text(encoding="utf-8"))
            return {k: _index_entry(v) for k, v in raw["pods"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"{self.index_path} is not a gpuc ledger index",
                hint=f"move it aside (mv {self.index_path} {self.index_path}.bad); the CSV itself is intact, "
                "but gpuc then cannot close the rows it listed",
            ) from None

    def _write_index(self, book: _Book) -> None:
        body = {"version": INDEX_VERSION, "pods": {k: asdict(v) for k, v in book.index.items()}}
        atomic_write(self.index_path, json.dumps(body, indent=1, sort_keys=True), keep_mode=True)

    def _persist(self, book: _Book) -> None:
        pending = [e for e in book.index.values() if not e.committed]
        if book.rows_dirty or pending:
            if pending:
                # The intent first: a crash after the CSV write is then completed, not written twice.
                self._write_index(book)
            atomic_write(self.path, render_csv(book.rows), keep_mode=True)
            for entry in pending:
                entry.committed = True
            self._write_index(book)
        elif book.index_dirty:
            self._write_index(book)

    def _remove_stale_temps(self) -> None:
        # Only a writer holding the lock creates temp files, and we hold it: any left over belong to a
        # writer that died mid-write.
        for tmp in self.path.parent.glob(f".{self.path.name}*.tmp"):
            tmp.unlink(missing_ok=True)


@dataclass
class SyncReport:
    """What one intake from the functions did: rows closed, records (or parts of them) refused."""

    closed: int = 0
    warnings: list[str] = field(default_factory=list)


def _row_from_record(record: WatchdogRecord) -> tuple[LedgerRow | None, list[str]]:
    """The row of a pod the ledger never saw; None when its start is not a sane time (no row beats a
    wrong one). A price that is not sane is left empty."""
    started = record.started_at if record.started_at is not None else record.registered_at
    if not sane_ts(started):
        return None, [f"start {started!r} is not a time between 2000 and 2200: no row added (add it by hand)"]
    problems = []
    price = record.price_per_hour
    if price is not None and not sane_price(price):
        problems.append(f"price {price!r}/h is not an amount from 0 to {MAX_PRICE_PER_HOUR:g} $/h: left empty")
        price = None
    row = LedgerRow(
        date=iso(started)[:10],
        experiment=record.experiment,
        provider=record.provider,
        gpu=record.gpu or "",
        price_per_hour=format_price(price) if price is not None else "",
        start=iso(started),
    )
    return row, problems
