"""What the watchdog knows, taken into the ledger: its records of pods and of recovering runs (`up --recover`).

The intake closes rows whose pod ended (the reaper or the pod itself may have ended it while this laptop
slept) and adds the row of a registered pod the ledger never saw. What comes in is checked: a time or a price
that is not sane is refused with a warning, never written. A recovering run is ONE row, its first pod's,
whatever the number of attempts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gpuc.core.clock import iso
from gpuc.core.ledger.book import Book
from gpuc.core.ledger.rows import (
    MAX_PRICE_PER_HOUR,
    NOTE_MAX_CHARS,
    LedgerRow,
    format_price,
    sane_cost,
    sane_price,
    sane_ts,
    usd,
)

if TYPE_CHECKING:  # `gpuc ls` and `gpuc ledger` load no pydantic (tests/client/test_startup_imports.py)
    from gpuc.core.api import RunRecovery


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


# What the intake knows of the recovering runs its records name: run id -> the watchdog's record of the run, or
# None when the watchdog holds no such run (then its first pod's row is a pod's like any other). A run missing
# from the mapping was not read: its row stays open (never closed at one attempt's end, a part of the run).
Runs = Mapping[str, "RunRecovery | None"]


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


def run_note(run: RunRecovery) -> str:
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


def run_end(run: RunRecovery) -> float | None:
    """The run's end: its last attempt's, once every attempt has ended; None while one still bills (a stopped
    recovery leaves its pod running). Never its first pod's end: that is the first outbid, not the run's."""
    ends = [a.end for a in run.attempts]
    if not ends or any(e is None for e in ends):
        return None
    return max(e for e in ends if e is not None)


LIVE = ("ok", "late", "down")  # a watchdog record without an end that is still billing


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


@dataclass
class SyncReport:
    """What one intake from the watchdog did: rows closed, records (or parts of them) refused."""

    closed: int = 0
    warnings: list[str] = field(default_factory=list)


def take_in(book: Book, records: Iterable[WatchdogRecord], runs: Runs | None = None) -> SyncReport:
    """Ledger.sync_from_functions within its transaction: each record closes its pod's row or adds it."""
    report = SyncReport()
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
            if _close_run(book, i, record, None if runs is None else runs.get(run_id), report):
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


def _close_run(book: Book, i: int, record: WatchdogRecord, run: RunRecovery | None, report: SyncReport) -> bool:
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
