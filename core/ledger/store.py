"""The cost ledger's store: `gpu-ledger.csv` (rows.py), its index and its lock, read and written safely.

Files, side by side:

    gpu-ledger.csv             the ledger the user reads, edits and plots (LEDGER_COLUMNS, a header line)
    gpu-ledger.csv.index.json  pod id -> its row: {"version": 1, "pods": {pod_id: {"row": i,
                               "start_row": {the first six columns}, "committed": bool}}}
    gpu-ledger.csv.lock        the fcntl lock every writer holds

The pod id lives in the index (book.py), not in the CSV.

Crash safety: every file is replaced whole (temp file, fsync, os.replace, fsync of the directory), under
an exclusive fcntl.flock. A new row is written in three steps: the index entry as `committed: false` (the
intent), then the CSV with the row, then the index with `committed: true`. Whoever next takes the lock
completes an interrupted start: a pending entry whose row is missing gets it appended, one whose row is
present is marked committed. So a crash never leaves a broken row, never loses a started row, and never
writes one twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuc.core.atomicfile import atomic_write
from gpuc.core.clock import iso
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.book import Book, IndexEntry, index_entry
from gpuc.core.ledger.csvfile import decode_csv, parse_csv, render_csv
from gpuc.core.ledger.intake import Runs, SyncReport, WatchdogRecord, run_end, run_note, take_in
from gpuc.core.ledger.rows import (
    MAX_PRICE_PER_HOUR,
    NOTE_MAX_CHARS,
    LedgerEntry,
    LedgerRow,
    check_note,
    format_price,
    sane_cost,
    sane_price,
    sane_ts,
)
from gpuc.core.ledger.summary import LedgerSummary, summarize, with_running

if TYPE_CHECKING:  # `gpuc ls` and `gpuc ledger` load no pydantic (tests/client/test_startup_imports.py)
    from gpuc.core.api import RunRecovery

INDEX_VERSION = 1


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
        """Take in what the watchdog knows: close rows whose pod ended (the reaper or the pod itself may have
        ended it while this laptop slept), and add the row of a registered pod the ledger never saw (the
        laptop died between register and the ledger start). A time or a price that is not sane is refused
        with a warning, never written: the row stays open (or is not added) rather than wrong.

        A recovering run (`up --recover`) is ONE row, its first pod's: the pods rented to recover it never
        make rows of their own, and the row closes when the run is done (`runs`), at its last attempt's end,
        with the run's cost across every attempt and the attempts in its note."""
        with self._transaction() as book:
            return take_in(book, records, runs)

    def close_run(self, pod_id: str, run: RunRecovery, note: str | None = None) -> LedgerRow | None:
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
    def _transaction(self) -> Iterator[Book]:
        with self._locked():
            self._remove_stale_temps()
            book = self._read()
            book.repair()
            yield book
            self._persist(book)

    def _read(self) -> Book:
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
        return Book(rows=rows, index=self._read_index())

    def _read_index(self) -> dict[str, IndexEntry]:
        if not self.index_path.exists():
            return {}
        try:
            raw = json.loads(self.index_path.read_text(encoding="utf-8"))
            return {k: index_entry(v) for k, v in raw["pods"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"{self.index_path} is not a gpuc ledger index",
                hint=f"move it aside (mv {self.index_path} {self.index_path}.bad); the CSV itself is intact, "
                "but gpuc then cannot close the rows it listed",
            ) from None

    def _write_index(self, book: Book) -> None:
        body = {"version": INDEX_VERSION, "pods": {k: asdict(v) for k, v in book.index.items()}}
        atomic_write(self.index_path, json.dumps(body, indent=1, sort_keys=True), keep_mode=True)

    def _persist(self, book: Book) -> None:
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
