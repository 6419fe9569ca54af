"""A month's spend across providers, against the user's budget (GPUC_MONTHLY_BUDGET, GPUC_EXPERIMENT_BUDGET).

One piece of arithmetic for three readers: `up` (refuses a pod whose worst case, added to the worst case of
every pod still running or kept, would cross the budget: `Outlook.crosses`),
`gpuc ledger` (shows the month against it) and the reaper (alerts; pulls running pods' deadlines in once the
same rule says the month would cross it).
The laptop counts its ledger completed by the watchdog's records; the watchdog, which has no ledger, counts
its records alone. Both through `month_spend`.

A pod's part of a month is price x the hours of [start, end or now] inside the UTC calendar month
(core.ledger.months.month_window); a ledger row's own cost, when written, is prorated the same way. A pod whose
price (or time) is not known is never counted as $0: it is listed as unknown, and every message says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuc.core.clock import hours_text
from gpuc.core.ledger.intake import LIVE, WatchdogRecord, later_attempt, run_of
from gpuc.core.ledger.months import current_month, month_window, overlap_hours
from gpuc.core.ledger.rows import (
    LedgerEntry,
    describe,
    parse_cost,
    parse_price,
    parse_time,
    row_problems,
    sane_price,
    sane_ts,
)
from gpuc.core.ledger.rows import usd as usd  # re-exported: the money words' one formatter, where budgets are
from gpuc.core.pod import Pod

if TYPE_CHECKING:  # `gpuc ls` and `gpuc ledger` load no pydantic (tests/client/test_startup_imports.py)
    from gpuc.core.api import AttemptRecord


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
    closed = {e.pod_id for e in entries if e.pod_id and e.row.end}
    # A recovering run's one row, once closed, holds every attempt's cost: its later pods are not counted again.
    done_runs = {run for r in by_id.values() for run, attempt in [run_of(r)] if attempt == 1 and r.pod_id in closed}
    for counted in [r for r in by_id.values() if later_attempt(r) and run_of(r)[0] in done_runs]:
        del by_id[counted.pod_id]
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


# -- the month ahead: what the pods still running or kept may yet cost ------------------------
# A budget counted at what pods have spent so far lets pod after pod in while each is young: three pods of
# $5.28 worst case each passed an $8 budget one after another. One rule, for `up` (client/pods/plan.py) and
# the watchdog's pull-in (functions/reaper/budget.py): the month's spend plus the WORST CASE of every pod still
# running or kept. The two readers build their `Ahead`s from what each holds (the laptop: the watchdog's
# status; the watchdog: its store and this pass's provider reading), through `ahead_of`.
@dataclass(frozen=True)
class Ahead:
    """A pod still running or kept, and what it may yet cost: its price until `until` (its deadline: the
    pod's agent and the reaper end it then; a stopped kept pod: now), and, kept for its results, its disk
    from then to the month's end (a kept pod is never destroyed unasked: nothing else ends its disk's bill)."""

    name: str
    experiment: str
    price_per_hour: float | None
    until: float
    disk_per_hour: float | None = None
    kept: bool = False
    movable: bool = False  # the watchdog may pull its deadline in (a running pod it can read, not kept)

    def worst(self, now: float) -> float | None:
        """Its worst case from `now`, or None when a price it needs is unknown (never taken for $0)."""
        gpu_hours = max(0.0, self.until - now) / 3600.0
        if gpu_hours > 0 and self.price_per_hour is None:
            return None
        usd = (self.price_per_hour or 0.0) * gpu_hours
        if self.kept:
            if self.disk_per_hour is None:
                return None
            month_end = month_window(current_month(now))[1]
            usd += self.disk_per_hour * max(0.0, month_end - max(now, self.until)) / 3600.0
        return usd

    def known(self, now: float) -> float:
        """The part of its worst case that is known when the whole is not: its GPU to `until` at a known price.
        A kept pod whose provider was not read (no disk price; recovery's budget check reads none) still counts
        its GPU to its deadline: its reading missing is no evidence it stopped."""
        return (self.price_per_hour or 0.0) * max(0.0, self.until - now) / 3600.0

    def why(self, now: float) -> str:
        gpu = f"{_rate(self.price_per_hour)} x {max(0.0, self.until - now) / 3600:.1f} h to its deadline"
        if not self.kept:
            return gpu
        disk = f"disk {_rate(self.disk_per_hour)} to the month's end (kept for its results)"
        return disk if self.until <= now else f"{gpu}, then {disk}"


def _rate(price: float | None) -> str:
    return "unknown $/h" if price is None else f"${price:.3f}/h"


def disk_per_hour(pod: Pod | None) -> float | None:
    """What a stopped pod's disk bills per hour, where the provider says (RunPod's volume, Vast's storage_cost)."""
    if pod is None or pod.disk_gb is None or pod.disk_usd_gb_month is None:
        return None
    return pod.disk_gb * pod.disk_usd_gb_month / (30 * 24)


def ahead_of(
    rec: WatchdogRecord, *, deadline: float, kept: bool, pod: Pod | None, now: float, movable: bool = False
) -> Ahead | None:
    """What the watchdog's record of a pod (and the provider's reading of it, None when unread) says it may
    yet cost; None when it bills no more (ended, destroyed, gone). A pod the provider cannot be asked about
    counts as running to its deadline: its reading missing is no evidence it stopped."""
    if rec.end_at is not None or rec.state not in LIVE:
        return None
    if pod is not None and pod.status == "terminated":
        return None
    stopped = pod is not None and pod.status == "stopped"
    if kept:
        until = now if stopped else deadline
        return Ahead(rec.pod_id, rec.experiment, rec.price_per_hour, until, disk_per_hour(pod), kept=True)
    return Ahead(rec.pod_id, rec.experiment, rec.price_per_hour, deadline, movable=movable and not stopped)


@dataclass(frozen=True)
class Outlook:
    """The month against a budget: what it has cost (`spend`) plus the worst case of each pod ahead."""

    spend: MonthSpend
    ahead: tuple[tuple[Ahead, float | None], ...]  # each with its worst case (None: unknown, not counted)
    now: float

    @property
    def worst_usd(self) -> float:
        """Every pod ahead at its worst as far as it is known: an unknown part is listed (`unknown`), never
        counted, and never hides the part that is known."""
        return sum(w if w is not None else a.known(self.now) for a, w in self.ahead)

    @property
    def total_usd(self) -> float:
        return self.spend.total_usd + self.worst_usd

    @property
    def unknown(self) -> tuple[str, ...]:
        return tuple(f"{a.name} ({a.why(self.now)})" for a, w in self.ahead if w is None)

    def crosses(self, limit: float, extra_usd: float | None = 0.0) -> bool:
        """THE rule: the month's spend, plus every pod ahead at its worst, plus `extra_usd` (a pod `up` would
        add; None: its worst case has no bound), crosses `limit`."""
        return extra_usd is None or self.total_usd + extra_usd > limit

    def runs_out_at(self, limit: float) -> float | None:
        """When the month reaches `limit` if every movable pod runs to its deadline and the rest cost their
        worst case; None when it never does. The watchdog pulls the movable pods' deadlines in to then."""
        if not self.crosses(limit):
            return None
        moving = sorted((a.until, a.price_per_hour or 0.0) for a, w in self.ahead if a.movable and w is not None)
        fixed = self.total_usd - sum(w or 0.0 for a, w in self.ahead if a.movable)
        left, at = limit - fixed, self.now
        rate = sum(price for until, price in moving if until > at)
        for until, price in moving:
            if until <= at:
                continue
            cost = rate * (until - at) / 3600.0
            if rate > 0 and cost >= left:
                return at + max(0.0, left) / rate * 3600.0
            left, at, rate = left - cost, until, rate - price
        return at  # the fixed part alone crosses it (or rounding: then the last deadline)

    def text(self, limit: float | None = None) -> str:
        """The spend line, then the pods ahead with their worst case."""
        line = spend_text(self.spend, limit)
        known = [(a, w) for a, w in self.ahead if w is not None]
        if known:
            each = ", ".join(f"{a.name} {usd(w)} ({a.why(self.now)})" for a, w in known[:5])
            line += f"; {len(known)} pod(s) running or kept may cost {usd(self.worst_usd)} more: {each}"
            line += " ..." if len(known) > 5 else ""
        if self.unknown:
            line += f"; {len(self.unknown)} pod(s) ahead with a price UNKNOWN, that part not counted: "
            line += ", ".join(self.unknown[:5])
        if limit is not None:
            line += f"; at worst {usd(self.total_usd)} of {usd(limit)}"
        return line


def outlook(burns: Iterable[Burn], ahead: Iterable[Ahead], now: float, *, experiment: str | None = None) -> Outlook:
    spend = month_spend(burns, now, experiment=experiment)
    rows = tuple((a, a.worst(now)) for a in ahead if experiment is None or a.experiment == experiment)
    return Outlook(spend, rows, now)


# ---- one envelope per interruptible run, across its attempts ----------------------------------
# A recovered run is ONE run: its deadline counts wall time from the first attempt, and its money is every
# attempt's GPU hours x price plus the disk of every instance (a paused one bills its disk only) against one
# cap. Peers reset the clock per attempt (dstack's max_duration, SkyPilot's retry-forever); this does not.
# An attempt is the wire's own core.api.AttemptRecord (one declaration, its cost its `cost`), never a copy of it.


@dataclass(frozen=True)
class Envelope:
    """The run's bound, fixed at `up`: its deadline from the first attempt and its money cap."""

    first_start: float
    max_hours: float
    cap_usd: float

    @property
    def deadline(self) -> float:
        return self.first_start + self.max_hours * 3600

    def hours_left(self, now: float) -> float:
        return max(0.0, self.deadline - now) / 3600


def run_envelope_usd(price_cap: float, disk_per_hour: float, max_hours: float) -> float:
    """The worst case `up` checks against the budget for a run that may recover: recovery destroys the
    paused instance before it rents the next, so at most one instance bills GPU and one bills disk at a
    time, and the deadline spans attempts. Every re-rent is held to `price_cap`, so N recoveries cost no
    more than one pod run to the deadline; what a recovery can add (a paused instance's disk while a new
    one boots) is inside the disk term because the paused one is destroyed first."""
    return (price_cap + disk_per_hour) * max_hours


@dataclass(frozen=True)
class RunEnvelope:
    """A run's bound as `up --recover` fixes it (client/pods/recovery/prepare.py), shown before the rent and
    checked against the budget for every attempt of the run together."""

    price_cap: float  # per hour for the whole pod: bid x GPUs; no re-rent above it
    disk_per_hour: float
    max_hours: float

    @property
    def usd(self) -> float:
        return run_envelope_usd(self.price_cap, self.disk_per_hour, self.max_hours)

    def line(self, recover: int) -> str:
        return (
            f"recovery: up to {recover} re-rent(s) after an outbid, all inside ONE envelope of ${self.usd:.2f} "
            f"(${self.price_cap:.3f}/h GPU cap + ${self.disk_per_hour:.4f}/h disk x {hours_text(self.max_hours)} from "
            "the first start): the bound across every attempt, not per attempt"
        )


def run_spent(attempts: Iterable[AttemptRecord], now: float) -> float:
    return sum(a.cost(now) for a in attempts)


def next_attempt_worst(price_per_hour: float, disk_per_hour: float, envelope: Envelope, now: float) -> float:
    """A new attempt's worst case: its price and disk until the run's deadline (never a fresh clock)."""
    return (price_per_hour + disk_per_hour) * envelope.hours_left(now)


def attempt_fits(
    attempts: Sequence[AttemptRecord], price_per_hour: float, disk_per_hour: float, envelope: Envelope, now: float
) -> bool:
    """Whether what the run spent plus the next attempt's worst case stays inside the envelope."""
    worst = run_spent(attempts, now) + next_attempt_worst(price_per_hour, disk_per_hour, envelope, now)
    return worst <= envelope.cap_usd + 1e-9
