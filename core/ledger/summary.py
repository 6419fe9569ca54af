"""A month of the ledger in figures: totals by experiment and GPU, $ per 1M tokens, and the pods still billing
("running, so far"). Totals count closed, priced rows; a row that is not sane is left out with a warning."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpuc.core.ledger.months import check_month
from gpuc.core.ledger.rows import (
    LedgerEntry,
    LedgerRow,
    describe,
    format_price,
    format_usd,
    parse_price,
    parse_time,
    row_cost,
    row_hours,
    row_problems,
    row_tok_per_s,
    usd,
    usd_per_1m_tokens,
)


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
                pod_id=entry.pod_id,
                experiment=row.experiment,
                provider=row.provider,
                gpu=row.gpu,
                date=row.date,
                start=row.start,
                price_per_hour=price or 0.0,
                hours=hours,
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
    return [
        head,
        *(
            f"  {r.start}  {r.experiment}  {r.provider}  {r.gpu}  {r.hours:.2f} h  {usd(r.cost_usd)}"
            for r in summary.running
        ),
    ]


def running_rows(running: Iterable[RunningCost]) -> list[LedgerRow]:
    """The running pods as rows for the plot (client/money/plot.py sums rows by their cost): the cost so far in
    cost_usd, the note RUNNING_SO_FAR. Add them to the rows it is given: an open row counts for nothing
    there, so no pod is counted twice."""
    return [
        LedgerRow(
            date=r.date,
            experiment=r.experiment,
            provider=r.provider,
            gpu=r.gpu,
            price_per_hour=format_price(r.price_per_hour),
            start=r.start,
            cost_usd=format_usd(r.cost_usd),
            note=RUNNING_SO_FAR,
        )
        for r in running
    ]
