"""The ledger in memory during one locked transaction: its rows, and the index from pod id to row.

The pod id cannot live in the CSV (nine columns, exactly), so the index maps it to a row. `row` is a position
hint; the row is confirmed by its first five columns (date, experiment, provider, gpu, start), so a user who
deletes or reorders rows by hand does not make gpuc close the wrong one."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gpuc.core.clock import iso
from gpuc.core.ledger.rows import LedgerRow, format_usd, parse_price, row_hours

_KEY_COLUMNS = ("date", "experiment", "provider", "gpu", "start")


def _key(row: LedgerRow) -> tuple[str, ...]:
    return tuple(getattr(row, c) for c in _KEY_COLUMNS)


@dataclass
class IndexEntry:
    """Where a pod's row is in the ledger file, and what it held when written."""

    row: int
    start_row: LedgerRow
    committed: bool = True


def index_entry(raw: Any) -> IndexEntry:
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
class Book:
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
