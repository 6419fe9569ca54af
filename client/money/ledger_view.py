"""`gpuc ledger`: what was spent (a month's summary, the budget, a plot) and whether the providers' bills
agree (`gpuc ledger reconcile`). The ends the pods or the reaper recorded while this laptop was away are
taken in from the watchdog first (one status call for everything the command asks it)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuc.client.context import Ctx
from gpuc.core.budget import ledger_burns, month_spend, spend_text
from gpuc.core.errors import GpucError
from gpuc.core.ledger.intake import Runs, live_pod_ids, runs_spent
from gpuc.core.ledger.months import check_month, current_month
from gpuc.core.ledger.rows import row_problems
from gpuc.core.ledger.store import Ledger
from gpuc.core.ledger.summary import LedgerSummary, running_rows
from gpuc.core.settings import Settings

if TYPE_CHECKING:
    # Startup: `gpuc ledger` loads no pydantic; the plot, the reconcile and the API models load where used.
    from gpuc.client.money.reconcile import BillingRecord, ReconcileReport
    from gpuc.core.api import RunRecovery, StatusResponse

StatusFn = Callable[[], "StatusResponse"]


def resolve_month(month: str | None) -> str | None:
    """None (the default) is this month; "all" is every row."""
    if month is None:
        return current_month()
    return None if month == "all" else check_month(month)


def take_in_ends(ledger: Ledger, status: StatusFn, runs: Runs | None = None) -> str:
    """Close rows the pods or the reaper ended while this laptop was away. Never fatal: the ledger still
    reads without the watchdog, it just may not know every end yet. A record with an absurd time or price
    is refused with a warning (one line each); a ledger that cannot be read raises its own clear error.
    `runs`: the recovering runs read (client/pods/recovery/runs.py): a run's one row closes when it is done."""
    try:
        records = status().pods
    except GpucError as exc:
        return f"watchdog unreachable ({exc.message}): ends recorded there since the last sync are not in yet"
    try:
        report = ledger.sync_from_functions(records, runs or {})
    except OSError as exc:  # a full disk, say: the ends stay with the watchdog until the next try
        return f"warning: could not write the ends recorded by the watchdog ({exc.strerror or exc})"
    lines = [f"took in {report.closed} end(s) recorded by the pods or the watchdog"] if report.closed else []
    return "\n".join(lines + [f"warning: {w}" for w in report.warnings])


def recovering(ctx: Ctx, status: StatusFn | None) -> dict[str, RunRecovery | None]:
    """The recovering runs whose one row is open (none read when no record names one)."""
    if status is None:
        return {}
    try:
        records = status().pods
    except GpucError:
        return {}
    from gpuc.client.pods.survey import recovering_read

    return recovering_read(ctx, records)


def remembered(status: StatusFn) -> StatusFn:
    """One watchdog call for everything `gpuc ledger` asks it (the ends, the running pods, the budget's live
    pods); an unreachable watchdog is asked once too (each ask may wait for a timeout)."""
    answers: list[StatusResponse] = []
    failures: list[GpucError] = []

    def once() -> StatusResponse:
        if failures:
            raise failures[0]
        if not answers:
            try:
                answers.append(status())
            except GpucError as exc:
                failures.append(exc)
                raise
        return answers[0]

    return once


def live_pods(status: StatusFn | None) -> frozenset[str] | None:
    """The pods the watchdog hears as still billing; None when it was not asked or did not answer (then
    every open row counts as running, core.ledger.summary.running_costs: money shown, not hidden)."""
    if status is None:
        return None
    try:
        return live_pod_ids(status().pods)
    except GpucError:
        return None


@dataclass
class BudgetReport:
    month: str
    budget_usd: float
    spent_usd: float
    closed_usd: float
    running_usd: float
    running_per_hour: float
    unknown: list[str]  # pods with no price (or no sane time): not counted, never taken for $0
    notes: list[str]  # what the figures rest on
    text: str


def budget_report(
    settings: Settings, book: Ledger, month: str | None, status: StatusFn | None, now: float
) -> BudgetReport | None:
    """The month against GPUC_MONTHLY_BUDGET (core/budget.py, the arithmetic `up` refuses by); None
    without a budget or for "all" months. `status` None: the watchdog is not asked."""
    budget = settings.monthly_budget
    if budget is None or month is None:
        return None
    records = None
    if status is not None:
        with contextlib.suppress(GpucError):
            records = status().pods
    view = ledger_burns(book.entries(), records)
    spend = month_spend(view.burns, now, month=month)
    return BudgetReport(
        month=month,
        budget_usd=budget,
        spent_usd=spend.total_usd,
        closed_usd=spend.closed_usd,
        running_usd=spend.running_usd,
        running_per_hour=spend.running_per_hour,
        unknown=list(spend.unknown),
        notes=view.notes,
        text=f"budget {spend_text(spend, budget)}",
    )


def fetch_billing(settings: Settings, month: str, only: tuple[str, ...]) -> tuple[list[BillingRecord], list[str]]:
    from gpuc.client.money.reconcile import billing_sources
    from gpuc.core.together import read_together

    sources = billing_sources(settings, only or None)
    reads = read_together({name: partial(source.billing, month) for name, source in sources.items()})
    records = [record for outcome in reads.values() for record in outcome.get()]
    return records, sorted(sources)


@dataclass
class LedgerReport:
    """What `gpuc ledger` shows: the month's summary, its budget, what the watchdog sync did, the plot."""

    summary: LedgerSummary
    path: Path
    budget: BudgetReport | None
    sync: str  # "" when not asked
    plot: Path | None


def ledger_report(ctx: Ctx, month: str | None, plot_path: Path | None, *, sync: bool = True) -> LedgerReport:
    book = ctx.ledger()
    status = remembered(ctx.watchdog.status) if sync else None
    runs = recovering(ctx, status)
    said = "" if status is None else take_in_ends(book, status, runs)
    chosen = resolve_month(month)
    now = ctx.clock.now()
    # Running pods count "so far": they often cost more than every closed row of the week; a recovering run's
    # row at what the run has spent across its attempts.
    spent = runs_spent(status().pods, runs) if status is not None and runs else None
    summary = book.summary(chosen, now=now, live=live_pods(status), runs_spent=spent)
    budget = budget_report(ctx.settings, book, chosen, status, now)
    if plot_path is not None:
        from gpuc.client.money.plot import plot_data, write_plot

        # Rows the summary left out (an absurd time or amount, listed in its warnings) stay out of the plot;
        # a running pod's open row counts for nothing there, its cost so far comes in as its own row.
        rows = [r for r in book.rows() if (chosen is None or r.date.startswith(chosen)) and not row_problems(r)]
        rows += running_rows(summary.running)
        plot_path = write_plot(plot_path, plot_data(rows, f"gpuc spend, {chosen or 'all months'}"))
    return LedgerReport(summary, ctx.settings.ledger, budget, said, plot_path)


def reconcile_month(ctx: Ctx, month: str | None, only: tuple[str, ...]) -> ReconcileReport:
    """The month's rows against the providers' billing records (the watchdog's ends taken in first)."""
    from gpuc.client.money.reconcile import reconcile

    chosen = check_month(month) if month else current_month()
    from gpuc.core.together import read_together

    book = ctx.ledger()
    # The watchdog and the providers' bills read at once (core/together.py).
    jobs: dict[str, Callable[[], Any]] = {
        "status": ctx.watchdog.status,
        "billing": partial(fetch_billing, ctx.settings, chosen, only),
    }
    reads = read_together(jobs)
    status = remembered(reads["status"].get)
    take_in_ends(book, status, recovering(ctx, status))
    records, names = reads["billing"].get()
    # A live pod's open row is billed more each hour: compared once it ends. Without the watchdog's word
    # no pod is taken for live, and an open row billed stays a mismatch (the safe side).
    return reconcile(book.entries(), records, chosen, names, live=live_pods(status) or ())
