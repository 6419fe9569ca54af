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
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import re
import stat
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from gpuc.core.api import PodRecord
from gpuc.core.clock import iso, parse_iso
from gpuc.core.errors import ConfigError
from gpuc.core.models import LEDGER_COLUMNS, LedgerRow

INDEX_VERSION = 1
TOKS_RE = re.compile(r"tok/s\s*=\s*([0-9]+(?:\.[0-9]+)?)")
MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")
_KEY_COLUMNS = ("date", "experiment", "provider", "gpu", "start")


def format_usd(value: float) -> str:
    return f"{value:.4f}"


def format_price(value: float) -> str:
    return f"{value:.4f}".rstrip("0").rstrip(".") or "0"


def parse_float(text: str) -> float | None:
    try:
        return float(text) if text.strip() else None
    except ValueError:
        return None


def row_hours(row: LedgerRow) -> float | None:
    """Billed hours of a closed row (bootstrap and downloads included: the clock ran), None when open."""
    if not row.end or not row.start:
        return None
    try:
        return max(0.0, parse_iso(row.end) - parse_iso(row.start)) / 3600.0
    except ValueError:
        return None


def row_cost(row: LedgerRow) -> float | None:
    """cost_usd as written, else price x hours; None when it cannot be known."""
    written = parse_float(row.cost_usd)
    if written is not None:
        return written
    price, hours = parse_float(row.price_per_hour), row_hours(row)
    return price * hours if price is not None and hours is not None else None


def row_tok_per_s(row: LedgerRow) -> float | None:
    match = TOKS_RE.search(row.note)
    value = float(match.group(1)) if match else None
    return value if value and value > 0 else None


def usd_per_1m_tokens(price_per_hour: float, tok_per_s: float) -> float:
    return price_per_hour * 1e6 / (tok_per_s * 3600.0)


def check_month(month: str) -> str:
    if not MONTH_RE.match(month):
        raise ConfigError(f"month {month!r} is not YYYY-MM", hint="pass a month like --month 2026-09")
    return month


def _key(row: LedgerRow) -> tuple[str, ...]:
    return tuple(getattr(row, c) for c in _KEY_COLUMNS)


class IndexEntry(BaseModel):
    row: int
    start_row: LedgerRow
    committed: bool = True


class LedgerEntry(BaseModel):
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
        self.index[pod_id] = IndexEntry(row=len(self.rows) - 1, start_row=row.model_copy(), committed=False)
        self.rows_dirty = self.index_dirty = True
        return row

    def repair(self) -> None:
        """Finish starts a crash interrupted between the index intent and the CSV write."""
        for entry in self.index.values():
            if entry.committed:
                continue
            if self._find(entry) is None:
                self.rows.append(entry.start_row.model_copy())
                entry.row = len(self.rows) - 1
                self.rows_dirty = True
            else:
                entry.committed = True
            self.index_dirty = True

    def close(self, i: int, end_ts: float, note: str | None) -> LedgerRow:
        row = self.rows[i]
        if not row.end:
            row.end = iso(end_ts)
            price, hours = parse_float(row.price_per_hour), row_hours(row)
            row.cost_usd = format_usd(price * hours) if price is not None and hours is not None else ""
            self.rows_dirty = True
        if note and note not in row.note:
            row.note = f"{row.note}; {note}" if row.note else note
            self.rows_dirty = True
        return row


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace `path` whole: readers see the old file or the new one, never half of either."""
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def render_csv(rows: Iterable[LedgerRow]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(LEDGER_COLUMNS)
    for row in rows:
        writer.writerow(row.cells())
    return out.getvalue()


def parse_csv(text: str, path: Path) -> list[LedgerRow]:
    lines = list(csv.reader(io.StringIO(text)))
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
        rows.append(LedgerRow(**dict(zip(LEDGER_COLUMNS, cells, strict=True))))
    return rows


class GroupTotal(BaseModel):
    name: str
    rows: int
    hours: float
    cost_usd: float


class TokenCost(BaseModel):
    experiment: str
    gpu: str
    start: str
    price_per_hour: float
    tok_per_s: float
    usd_per_1m_tokens: float


class LedgerSummary(BaseModel):
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
    price, toks = parse_float(row.price_per_hour), row_tok_per_s(row)
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
    for row in rows:
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
    )


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
        with self._transaction() as book:
            i = book.locate(pod_id)
            if i is not None:
                return book.rows[i].model_copy()
            row = LedgerRow(
                date=iso(start_ts)[:10],
                experiment=experiment,
                provider=provider,
                gpu=gpu,
                price_per_hour=format_price(price_per_hour) if price_per_hour is not None else "",
                start=iso(start_ts),
            )
            return book.append(pod_id, row).model_copy()

    def end(self, pod_id: str, *, end_ts: float, note: str | None = None) -> LedgerRow | None:
        """Fill end, cost_usd (price x hours) and note. A closed row keeps its end; a note may be added."""
        with self._transaction() as book:
            i = book.locate(pod_id)
            return None if i is None else book.close(i, end_ts, note).model_copy()

    def sync_from_functions(self, records: Iterable[PodRecord]) -> int:
        """Take in what the functions know: close rows whose pod ended (the reaper or the pod itself may have
        ended it while this laptop slept), and add the row of a registered pod the ledger never saw (the
        laptop died between register and the ledger start). Returns how many rows this call closed."""
        closed = 0
        with self._transaction() as book:
            for record in records:
                i = book.locate(record.pod_id)
                if i is None:
                    book.append(record.pod_id, _row_from_record(record))
                    i = len(book.rows) - 1
                if record.end_at is not None and not book.rows[i].end:
                    book.close(i, record.end_at, record.note)
                    closed += 1
        return closed

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

    def summary(self, month: str | None = None) -> LedgerSummary:
        return summarize(self.rows(), month)

    # --- files ---------------------------------------------------------------------------------------

    @contextmanager
    def _locked(self, how: int = fcntl.LOCK_EX) -> Iterator[None]:
        # flock, not lockf: flock locks belong to the open file, so two threads of one process exclude each
        # other too (POSIX record locks are per process and would let a second thread in).
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
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
        rows = parse_csv(self.path.read_text(encoding="utf-8"), self.path) if self.path.exists() else []
        return _Book(rows=rows, index=self._read_index())

    def _read_index(self) -> dict[str, IndexEntry]:
        if not self.index_path.exists():
            return {}
        try:
            raw = json.loads(self.index_path.read_text(encoding="utf-8"))
            return {k: IndexEntry.model_validate(v) for k, v in raw["pods"].items()}
        except (ValueError, KeyError, TypeError, AttributeError, ValidationError):
            raise ConfigError(
                f"{self.index_path} is not a gpuc ledger index",
                hint=f"move it aside (mv {self.index_path} {self.index_path}.bad); the CSV itself is intact, "
                "but gpuc then cannot close the rows it listed",
            ) from None

    def _write_index(self, book: _Book) -> None:
        body = {"version": INDEX_VERSION, "pods": {k: v.model_dump() for k, v in book.index.items()}}
        atomic_write(self.index_path, json.dumps(body, indent=1, sort_keys=True))

    def _persist(self, book: _Book) -> None:
        pending = [e for e in book.index.values() if not e.committed]
        if book.rows_dirty or pending:
            if pending:
                # The intent first: a crash after the CSV write is then completed, not written twice.
                self._write_index(book)
            atomic_write(self.path, render_csv(book.rows))
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


def _row_from_record(record: PodRecord) -> LedgerRow:
    started = record.started_at if record.started_at is not None else record.registered_at
    return LedgerRow(
        date=iso(started)[:10],
        experiment=record.experiment,
        provider=record.provider,
        gpu=record.gpu or "",
        price_per_hour=format_price(record.price_per_hour) if record.price_per_hour is not None else "",
        start=iso(started),
    )
