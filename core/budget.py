"""A month's spend across providers, against the user's budget (GPUC_MONTHLY_BUDGET, GPUC_EXPERIMENT_BUDGET).

One piece of arithmetic for three readers: `up` (refuses a pod whose worst case would cross the budget),
`gpuc ledger` (shows the month against it) and the reaper (alerts, then pulls running pods' deadlines in).
The laptop counts its ledger completed by the watchdog's records; the watchdog, which has no ledger, counts
its records alone. Both through `month_spend`.

A pod's part of a month is price x the hours of [start, end or now] inside the UTC calendar month
(core.ledger.month_window); a ledger row's own cost, when written, is prorated the same way. A pod whose
price (or time) is not known is never counted as $0: it is listed as unknown, and every message says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuc.core.ledger import (
    LIVE,
    LedgerEntry,
    WatchdogRecord,
    current_month,
    describe,
    month_window,
    overlap_hours,
    parse_cost,
    parse_price,
    parse_time,
    row_problems,
    sane_price,
    sane_ts,
)


@dataclass(frozen=True)
class Burn:
    """One pod's billed interval, as far as it is known."""

    name: str  # the pod id, or the ledger row in words
    experiment: str
    start: float | None
    end: float | None  # None: still billing, counted up to now
    price_per_hour: float | None
    cost_usd: float | None = None  # the ledger's own figure for the whole interval: wins over price x hours
    unknown: str | None = None  # why it cannot be counted (set: never counted, always listed)


@dataclass(frozen=True)
class MonthSpend:
    month: str
    closed_usd: float  # pods that ended: their part of this month
    running_usd: float  # pods still billing: so far this month
    running_per_hour: float
    running: tuple[str, ...]
    unknown: tuple[str, ...]  # "name (why)": not counted, never taken for $0

    @property
    def total_usd(self) -> float:
        return self.closed_usd + self.running_usd


def month_spend(
    burns: Iterable[Burn], now: float, *, month: str | None = None, experiment: str | None = None
) -> MonthSpend:
    """The month's spend (default: the month of `now`), of one experiment or of all."""
    month = month or current_month(now)
    window = month_window(month)
    closed = running = rate = 0.0
    names: list[str] = []
    unknown: list[str] = []
    for burn in burns:
        if experiment is not None and burn.experiment != experiment:
            continue
        end = now if burn.end is None else burn.end
        if burn.start is not None and overlap_hours(burn.start, end, window) <= 0:
            continue  # another month's
        usd = None if burn.unknown else _part(burn, end, window)
        if usd is None:
            unknown.append(f"{burn.name} ({burn.unknown or 'no price'})")
        elif burn.end is None:
            running += usd
            rate += burn.price_per_hour or 0.0
            names.append(burn.name)
        else:
            closed += usd
    return MonthSpend(month, closed, running, rate, tuple(names), tuple(unknown))


def _part(burn: Burn, end: float, window: tuple[float, float]) -> float | None:
    if burn.start is None:
        return None
    hours = overlap_hours(burn.start, end, window)
    if burn.cost_usd is not None:
        whole = max(0.0, end - burn.start) / 3600.0
        return burn.cost_usd * (hours / whole if whole > 0 else 1.0)
    return None if burn.price_per_hour is None else burn.price_per_hour * hours


def record_burn(rec: WatchdogRecord, price: float | None = None) -> Burn:
    """What the watchdog's record says: billing until its end, or until now while it is live. `price`
    stands in when the record has none (the ledger row may know it)."""
    start = rec.started_at if rec.started_at is not None else rec.registered_at
    price = rec.price_per_hour if rec.price_per_hour is not None else price
    name, unknown = rec.pod_id, None
    end = rec.end_at
    if end is None and rec.state not in LIVE:
        end = rec.last_seen  # gone outside gpuc: billed at least until its last ping
        unknown = None if end is not None else "gone, end unknown"
    if price is not None and not sane_price(price):
        unknown = "a price that is not sane"
    if not sane_ts(start) or (end is not None and not sane_ts(end)):
        # No month to place it in: listed in every month's figures rather than in none.
        return Burn(name, rec.experiment, None, None, price, unknown="a time that is not sane")
    return Burn(name, rec.experiment, start, end, price, unknown=unknown)


def records_burns(records: Iterable[WatchdogRecord]) -> list[Burn]:
    return [record_burn(rec) for rec in records]


def row_burn(entry: LedgerEntry) -> Burn:
    row = entry.row
    name = entry.pod_id or describe(row)
    if row_problems(row):
        return Burn(name, row.experiment, None, None, None, unknown="a time or amount that is not sane")
    cost = parse_cost(row.cost_usd) if row.cost_usd.strip() else None
    start, end = parse_time(row.start), parse_time(row.end) if row.end else None
    return Burn(name, row.experiment, start, end, parse_price(row.price_per_hour), cost)


@dataclass(frozen=True)
class LaptopView:
    burns: list[Burn]
    notes: list[str]  # what the figures rest on, in words (the watchdog unreachable, rows it does not know)


def ledger_burns(entries: Sequence[LedgerEntry], records: Sequence[WatchdogRecord] | None) -> LaptopView:
    """The ledger's rows, each open one completed by the watchdog's record of it, plus the watchdog's pods
    the ledger never saw (the laptop died between register and the ledger start). `records` None: the
    watchdog could not be asked, and open rows count as billing until now (the safe side)."""
    by_id = {r.pod_id: r for r in records or ()}
    burns: list[Burn] = []
    guessed = strangers = 0
    for entry in entries:
        rec = by_id.pop(entry.pod_id, None) if entry.pod_id else None
        burn = row_burn(entry)
        if entry.row.end or burn.unknown:
            burns.append(burn)
        elif rec is not None:
            burns.append(record_burn(rec, price=burn.price_per_hour))
        elif records is None:
            guessed += 1
            burns.append(burn)  # open: billing until now
        else:
            strangers += 1
            why = "open row the watchdog does not know"
            burns.append(Burn(burn.name, burn.experiment, burn.start, None, None, unknown=why))
    burns += records_burns(by_id.values())
    notes = []
    if guessed:
        notes.append(f"no word from the watchdog: {guessed} open ledger row(s) counted as billing until now")
    if strangers:
        notes.append(f"{strangers} open ledger row(s) unknown to the watchdog: fill their end in the ledger")
    return LaptopView(burns, notes)


def usd(value: float) -> str:
    return f"${value:,.2f}"


def spend_text(spend: MonthSpend, budget: float | None = None) -> str:
    """One line: what the month has cost so far, of what budget, and what is not counted."""
    head = f"{spend.month}: {usd(spend.total_usd)} spent"
    if budget is not None:
        head += f" of {usd(budget)} ({100 * spend.total_usd / budget:.0f} %)"
    parts = [f"{usd(spend.closed_usd)} ended"]
    if spend.running:
        parts.append(
            f"{usd(spend.running_usd)} running now ({len(spend.running)} pod(s), {usd(spend.running_per_hour)}/h)"
        )
    text = f"{head}: {', '.join(parts)}"
    if spend.unknown:
        text += f"; {len(spend.unknown)} pod(s) UNKNOWN, not counted: {', '.join(spend.unknown[:5])}"
        text += " ..." if len(spend.unknown) > 5 else ""
    return text
