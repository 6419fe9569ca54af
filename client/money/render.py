"""The terminal text of the money reports: balance, offers, pick, the ledger's summary and its
reconciliation. Each takes its report (the same one `--json` prints) and returns the text."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from gpuc.client.text import WIDTH, drop_empty, render_table
from gpuc.core.ledger.rows import row_cost, usd
from gpuc.core.ledger.summary import LedgerSummary, running_lines
from gpuc.core.termsafe import clean

if TYPE_CHECKING:
    # Startup: `gpuc ledger` renders through this module; the other reports' modules (pydantic) are theirs.
    from gpuc.client.money.balance import BalanceReport
    from gpuc.client.money.ledger_view import LedgerReport
    from gpuc.client.money.offers import OffersReport, OfferView
    from gpuc.client.money.picker import MultiGpuRow, PickResult
    from gpuc.client.money.reconcile import ReconcileReport


# -- balance ----------------------------------------------------------------------------------------
def render_balance(report: BalanceReport) -> str:
    from gpuc.client.money.balance import limits_text

    lines = [f"{'provider':<8} {'balance':>9} {'spend/h':>8} {'hours left':>10}"]
    for line in report.providers:
        if not line.configured:
            lines.append(f"{line.provider:<8} not configured" + (f" ({line.hint})" if line.hint else ""))
        elif line.error:
            said = line.error if line.later else f"error: {line.error}"  # a 429 is "later", not an error
            lines.append(f"{line.provider:<8} {said}" + (f" ({line.hint})" if line.hint else ""))
        else:
            left = f"{line.hours_left:.1f}" if line.hours_left is not None else "-"
            lines.append(f"{line.provider:<8} {line.balance_usd:>9.2f} {line.spend_per_hour:>8.3f} {left:>10}")
    lines.extend(text for line in report.providers if line.configured and (text := limits_text(line)))
    lines.extend(f"warning: {w}" for w in report.warnings)
    lines.append(f"note: {report.advice}")
    return "\n".join(lines)


# -- offers -----------------------------------------------------------------------------------------
def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


# The bid advice in a few words (the help text and --json carry the rule and the reason).
ADVICE = {"bid": "bid", "on_demand": "on-demand", "on_demand_unless_short": "bid if short"}
OFFER_HEADERS = ("PROVIDER", "ID", "GPU", "$/H", "COMM.", "BID", "ADVICE", "GB/s/$H", "REL", "DOWN", "STOCK")
# Columns that only some offers fill (RunPod: community price; Vast: bids, reliability, download).
OFFER_OPTIONAL = (4, 5, 6, 8, 9, 10)
# Ids are what `gpuc up --offer ID` takes: never cut; the GPU, stock and advice give way first.
OFFER_SHRINK = {2: 8, 10: 5, 6: 9}


def offer_cells(o: OfferView) -> list[str]:
    return [
        o.provider,
        o.id,
        o.gpu,
        f"{o.price_per_hour:.3f}",
        _num(o.community_price, ".3f"),
        _num(o.bid.bid_per_hour if o.bid else None, ".3f"),
        ADVICE.get(o.bid.action, o.bid.action) if o.bid else "-",
        _num(o.gb_s_per_dollar_hour, ",.0f"),
        _num(o.reliability, ".3f"),
        _num(o.inet_down_mbps, ".0f"),
        o.stock or "-",
    ]


def render_offers(report: OffersReport) -> str:
    lines: list[str] = []
    if report.offers:
        rows = [offer_cells(o) for o in report.offers]
        headers, rows, kept = drop_empty(OFFER_HEADERS, rows, OFFER_OPTIONAL)
        shrink = {kept.index(i): floor for i, floor in OFFER_SHRINK.items() if i in kept}
        right = [kept.index(i) for i in (3, 4, 5, 7, 8, 9) if i in kept]
        lines = render_table(headers, rows, shrink=shrink, right=right)
    else:
        lines.append("no offer passed the filters")
    if report.dropped:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(report.dropped.items()))
        lines.append(f"{report.seen} seen; dropped by filter: {dropped} (loosen one with --loosen NAME)")
    lines.extend(f"{f.provider}: {f.error}" + (f" ({f.hint})" if f.hint else "") for f in report.failures)
    return "\n".join(lines)


# -- pick -------------------------------------------------------------------------------------------
PICK_HEADERS = (
    *("#", "GPU", "GB", "FITS", "KV ROOM TOK", "TOK/S", "RIDGE"),
    *("$/H", "PRICE SOURCE", "TOK/S/$H", "$/1M TOK"),
)


def render_pick(result: PickResult) -> str:
    kv = f"{result.kv_bytes_per_token / 1e3:.1f} KB/token" + (" (estimated)" if result.kv_estimated else "")
    head = (
        f"{result.model} {result.dtype}: batch {result.batch} x seq {result.seq} = "
        f"{result.needed_tokens:,} tokens; weights {result.weights_gb:.2f} GB, KV {kv}, overhead 1.5 GB"
    )
    rows = [
        [
            str(r.rank),
            r.gpu,
            f"{r.memory_gb:g}",
            "yes" if r.fits else "no",
            f"{r.kv_capacity_tokens:,}",
            f"{r.decode_tok_s:.0f}",
            f"{r.ridge_flop_per_byte:.0f}",
            f"{r.price_per_hour:.2f}" if r.price_per_hour is not None else "-",
            r.price_source or "-",
            f"{r.tok_s_per_dollar_hour:.0f}" if r.tok_s_per_dollar_hour is not None else "-",
            f"{r.usd_per_1m_tokens:.2f}" if r.usd_per_1m_tokens is not None else "-",
        ]
        for r in result.rows
    ]
    lines = textwrap.wrap(head, WIDTH, subsequent_indent="  ")
    if result.architecture:
        lines += textwrap.wrap(f"KV per token = {result.architecture}", WIDTH, subsequent_indent="  ")
    body = render_table(PICK_HEADERS, rows, shrink={8: 12}, right=(0, 2, 4, 5, 6, 7, 9, 10))
    lines.append(body[0])
    for r, line in zip(result.rows, body[1:], strict=True):
        # Why a card is out goes on its own line under the row: the table keeps its width.
        lines += [line, *([f"{'':>4}{r.gpu}: {r.why_not}"] if r.why_not else [])]
    lines.extend(render_multi_gpu(result.multi_gpu))
    if result.price_note:
        lines += textwrap.wrap(f"note: {result.price_note}", WIDTH, subsequent_indent="  ")
    lines += textwrap.wrap(result.why, WIDTH, subsequent_indent="  ")
    return "\n".join(lines)


def render_multi_gpu(options: list[MultiGpuRow]) -> list[str]:
    if not options:
        return []
    stocked = any(o.stock is not None for o in options)  # read live for each count (RunPod)
    lines = [
        "no single card holds it; split across cards (tensor parallel, overhead on every card):",
        f"    {'cards':<22}{'GB':>5}{'needs':>7}{'tok/s':>7}{'$/h':>8}  price source"
        + ("; stock for that many" if stocked else ""),
    ]
    for o in options:
        price = f"{o.price_per_hour:.2f}" if o.price_per_hour is not None else "-"
        lines.append(
            f"    {f'{o.count} x {o.gpu}':<22}{o.memory_gb:>5g}{o.needed_gb:>7.1f}{o.decode_tok_s:>7.0f}"
            f"{price:>8}  {o.price_source or '-'}" + (f"; {o.stock or '-'}" if stocked else "")
        )
    lines.append(f"    rent one with: gpuc up NAME --gpu '{options[0].gpu}' --gpus {options[0].count}")
    return lines


def result_json(result: PickResult) -> str:
    body = result.model_dump()
    for optional in ("architecture", "multi_gpu"):  # present only when they say something
        if not body[optional]:
            del body[optional]
    return json.dumps(body, indent=2)


# -- ledger -----------------------------------------------------------------------------------------
def _money(value: float | None) -> str:
    return "-" if value is None else usd(value)


def _price(value: float | None) -> str:
    return "-/h" if value is None else f"${value:,.3f}/h"  # as the price line says it


def render_summary(summary: LedgerSummary, path: Path) -> str:
    title = summary.month or "all months"
    lines = [
        f"{title}: {summary.rows} row(s), {summary.total_hours:.2f} h, {_money(summary.total_cost_usd)}, "
        f"effective {_price(summary.effective_price_per_hour)}  ({path})"
    ]
    lines += running_lines(summary)  # pods still billing: "running, so far", and the month with them
    for heading, groups in (("by experiment", summary.by_experiment), ("by gpu", summary.by_gpu)):
        lines.append(heading + ":")
        lines.extend(f"  {g.name:<28} {g.rows:>3} run(s) {g.hours:>8.2f} h {_money(g.cost_usd):>10}" for g in groups)
    if summary.unpriced_rows:
        lines.append(f"{summary.unpriced_rows} closed row(s) have no price: not in the totals")
    if summary.open_rows:
        lines.append(f"open rows (no end: running, preempted, or deleted outside gpuc): {len(summary.open_rows)}")
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
        lines.append(f"  no ledger row: {u.provider} {u.pod_id} billed {_money(u.amount_usd)} ({', '.join(u.kinds)})")
    for d in report.disk_while_stopped:
        lines.append(f"  disk billed while stopped: {d.provider} {d.pod_id} {_money(d.amount_usd)} (destroy it)")
    for b in report.below_ledger:
        pct = f" ({b.diff_pct:+.0f} %)" if b.diff_pct is not None else ""
        lines.append(
            f"  billed below the ledger: {b.provider} {b.pod_id} {b.experiment}: ledger {_money(b.ledger_usd)}, "
            f"billed {_money(b.billed_usd)}{pct}"
        )
    lines.extend(f"  note: {note}" for note in report.notes)
    if report.unlinked_rows:
        lines.append(f"  {report.unlinked_rows} row(s) have no pod id (added by hand): not compared")
    if report.clean:
        lines.append("the ledger matches the bill")
    return "\n".join(lines)


def ledger_text(report: LedgerReport) -> str:
    # Experiment names and notes are the pods' words: cleaned.
    lines = [clean(render_summary(report.summary, report.path))]
    if report.budget is not None:
        lines.append("\n".join([report.budget.text, *(f"  {note}" for note in report.budget.notes)]))
    lines += [line for line in (report.sync, f"plot written to {report.plot}" if report.plot else "") if line]
    return "\n".join(lines)


def ledger_json(report: LedgerReport) -> str:
    body = {**asdict(report.summary), "sync": report.sync, "plot": str(report.plot) if report.plot else None}
    return json.dumps({**body, "budget": asdict(report.budget) if report.budget else None}, indent=2)
