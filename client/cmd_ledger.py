"""`gpuc ledger`: what was spent (a month's summary, a plot) and whether the providers' bills agree."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import click
from pydantic import BaseModel

from gpuc.client.plot import plot_data, write_plot
from gpuc.client.reconcile import BillingRecord, ReconcileReport, billing_sources, reconcile
from gpuc.core.api import StatusResponse
from gpuc.core.budget import ledger_burns, month_spend, spend_text
from gpuc.core.errors import GpucError
from gpuc.core.ledger import Ledger, LedgerSummary, check_month, current_month, row_cost, row_problems
from gpuc.core.settings import Settings, load_settings
from gpuc.core.termsafe import clean

StatusFn = Callable[[], StatusResponse]


def resolve_month(month: str | None) -> str | None:
    """None (the default) is this month; "all" is every row."""
    if month is None:
        return current_month()
    return None if month == "all" else check_month(month)


def functions_status(settings: Settings) -> StatusFn:
    # Lazy: `gpuc ledger --help` and every TAB load this module; httpx (~50 ms) loads only to ask the watchdog.
    from gpuc.client.functions_client import FunctionsClient

    return FunctionsClient(settings).status


def take_in_ends(ledger: Ledger, status: StatusFn) -> str:
    """Close rows the pods or the reaper ended while this laptop was away. Never fatal: the ledger still
    reads without the watchdog, it just may not know every end yet. A record with an absurd time or price
    is refused with a warning (one line each); a ledger that cannot be read raises its own clear error."""
    try:
        records = status().pods
    except GpucError as exc:
        return f"watchdog unreachable ({exc.message}): ends recorded there since the last sync are not in yet"
    try:
        report = ledger.sync_from_functions(records)
    except OSError as exc:  # a full disk, say: the ends stay with the watchdog until the next try
        return f"warning: could not write the ends recorded by the watchdog ({exc.strerror or exc})"
    lines = [f"took in {report.closed} end(s) recorded by the pods or the watchdog"] if report.closed else []
    return "\n".join(lines + [f"warning: {w}" for w in report.warnings])


def remembered(status: StatusFn) -> StatusFn:
    """One watchdog call for everything `gpuc ledger` asks it (the ends, the budget's live pods)."""
    answers: list[StatusResponse] = []

    def once() -> StatusResponse:
        if not answers:
            answers.append(status())
        return answers[0]

    return once


class BudgetReport(BaseModel):
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


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def render_summary(summary: LedgerSummary, path: Path) -> str:
    title = summary.month or "all months"
    lines = [
        f"{title}: {summary.rows} row(s), {summary.total_hours:.2f} h, {_money(summary.total_cost_usd)}, "
        f"effective {_money(summary.effective_price_per_hour)}/h  ({path})"
    ]
    for heading, groups in (("by experiment", summary.by_experiment), ("by gpu", summary.by_gpu)):
        lines.append(heading + ":")
        lines.extend(
            f"  {g.name:<28} {g.rows:>3} run(s) {g.hours:>8.2f} h {_money(g.cost_usd):>10}" for g in groups
        )
    if summary.unpriced_rows:
        lines.append(f"{summary.unpriced_rows} closed row(s) have no price: not in the totals")
    if summary.open_rows:
        lines.append(
            f"open rows (no end: running, preempted, or deleted outside gpuc): {len(summary.open_rows)}"
        )
        lines.extend(f"  {r.start}  {r.experiment}  {r.provider}  {r.gpu}" for r in summary.open_rows)
    if summary.no_note_rows:
        lines.append(f"rows with no note (runs with no conclusion): {len(summary.no_note_rows)}")
        lines.extend(f"  {r.start}  {r.experiment}  {_money(row_cost(r))}" for r in summary.no_note_rows)
    for t in summary.token_costs:
        lines.append(
            f"$ per 1M tokens: {t.experiment} on {t.gpu}: {t.tok_per_s:g} tok/s at ${t.price_per_hour:g}/h "
            f"= ${t.usd_per_1m_tokens:.2f}"
        )
    lines.extend(f"warning: {w}" for w in summary.warnings)
    return "\n".join(lines)


@click.group("ledger", invoke_without_command=True)
@click.option("--month", default=None, help="YYYY-MM, or 'all' [this month, UTC].")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw spend by week and by experiment into FILE.png (labelled; a bare FILE gets .png) or FILE.html.",
)
@click.option("--no-sync", is_flag=True, help="Do not ask the watchdog for ends recorded while away.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (fields below).")
@click.pass_context
def ledger(
    ctx: click.Context, month: str | None, plot_path: Path | None, no_sync: bool, as_json: bool
) -> None:
    """What was spent: a month of gpu-ledger.csv by experiment and by GPU, the effective price per hour
    (total cost / total hours, bootstrap and downloads included), rows with no end, rows with no note,
    and $ per 1M tokens for rows whose note carries `tok/s=<number>`.

    \b
    --json fields: month (null = all), rows, total_hours, total_cost_usd,
    effective_price_per_hour, unpriced_rows, by_experiment[] and by_gpu[] {name, rows, hours,
    cost_usd}, open_rows[] and no_note_rows[] (ledger rows: date, experiment, provider, gpu,
    price_per_hour, start, end, cost_usd, note), token_costs[] {experiment, gpu, start,
    price_per_hour, tok_per_s, usd_per_1m_tokens}, warnings[] (rows left out of the totals: a time or
    an amount that is not sane), sync (what the watchdog sync did), plot (path), budget (null unless
    GPUC_MONTHLY_BUDGET is set and one month is shown: month, budget_usd, spent_usd, closed_usd,
    running_usd, running_per_hour, unknown[] (pods with no price: not counted), notes[], text).
    """
    if ctx.invoked_subcommand is not None:
        return
    settings = load_settings()
    book = Ledger(settings.ledger)
    status = None if no_sync else remembered(functions_status(settings))
    sync = "" if status is None else take_in_ends(book, status)
    chosen = resolve_month(month)
    summary = book.summary(chosen)
    budget = budget_report(settings, book, chosen, status, time.time())
    if plot_path is not None:
        # Rows the summary left out (an absurd time or amount, listed in its warnings) stay out of the plot.
        rows = [r for r in book.rows() if (chosen is None or r.date.startswith(chosen)) and not row_problems(r)]
        plot_path = write_plot(plot_path, plot_data(rows, f"gpuc spend, {chosen or 'all months'}"))
    if as_json:
        body = {**summary.model_dump(), "sync": sync, "plot": str(plot_path) if plot_path else None}
        click.echo(json.dumps({**body, "budget": budget.model_dump() if budget else None}, indent=2))
        return
    click.echo(clean(render_summary(summary, settings.ledger)))  # experiment names and notes: the pods' words
    if budget is not None:
        click.echo("\n".join([budget.text, *(f"  {note}" for note in budget.notes)]))
    for line in (sync, f"plot written to {plot_path}" if plot_path else ""):
        if line:
            click.echo(line)


def fetch_billing(
    settings: Settings, month: str, only: tuple[str, ...]
) -> tuple[list[BillingRecord], list[str]]:
    sources = billing_sources(settings, only or None)
    records = [record for source in sources.values() for record in source.billing(month)]
    return records, sorted(sources)


def render_reconcile(report: ReconcileReport) -> str:
    lines = [
        f"{report.month} ({', '.join(report.providers)}): ledger {_money(report.ledger_total_usd)}, "
        f"billed {_money(report.billed_total_usd)}; {report.rows_ok}/{report.rows_checked} row(s) match"
    ]
    for m in report.mismatches:
        pct = f" ({m.diff_pct:+.0f} %)" if m.diff_pct is not None else ""
        lines.append(
            f"  mismatch [{m.reason}] {m.provider} {m.pod_id} {m.experiment}: ledger {_money(m.ledger_usd)}, "
            f"billed {_money(m.billed_usd)}{pct}"
        )
    for u in report.unmatched:
        lines.append(
            f"  no ledger row: {u.provider} {u.pod_id} billed {_money(u.amount_usd)} ({', '.join(u.kinds)})"
        )
    for d in report.disk_while_stopped:
        lines.append(
            f"  disk billed while stopped: {d.provider} {d.pod_id} {_money(d.amount_usd)} (destroy it)"
        )
    if report.unlinked_rows:
        lines.append(f"  {report.unlinked_rows} row(s) have no pod id (added by hand): not compared")
    if report.clean:
        lines.append("the ledger matches the bill")
    return "\n".join(lines)


@ledger.command("reconcile")
@click.option("--month", default=None, help="YYYY-MM [this month, UTC].")
@click.option(
    "--provider", "providers", multiple=True, help="Only this provider (repeatable) [all configured]."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (fields below).")
def reconcile_command(month: str | None, providers: tuple[str, ...], as_json: bool) -> None:
    """Compare each ledger row with the provider's own billing records: rows that differ by more than
    10 %, charges with no ledger row, disk billed while a pod was stopped. Exits 1 when anything differs.

    \b
    --json fields: month, providers[], rows_checked, rows_ok, unlinked_rows, ledger_total_usd,
    billed_total_usd, mismatches[] {pod_id, provider, experiment, gpu, start, end, ledger_usd,
    billed_usd, diff_pct, reason: amount|no_charges|open_row_billed|unpriced_row},
    unmatched[] {provider, pod_id, amount_usd, kinds, first, last},
    disk_while_stopped[] {provider, pod_id, amount_usd, first, last, records}.
    """
    settings = load_settings()
    chosen = check_month(month) if month else current_month()
    book = Ledger(settings.ledger)
    take_in_ends(book, functions_status(settings))
    records, names = fetch_billing(settings, chosen, providers)
    report = reconcile(book.entries(), records, chosen, names)
    click.echo(json.dumps(report.model_dump(), indent=2) if as_json else render_reconcile(report))
    if not report.clean:
        click.get_current_context().exit(1)
