"""`gpuc balance`, `gpuc ledger [reconcile|note]`, `gpuc offers`, `gpuc pick`: click only, one call each.

Startup: `gpuc ledger` (and every TAB) loads this module; each command imports its own code inside
itself, and the choices come from money/choices.py (no pydantic).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx, talk
from gpuc.client.money.choices import DTYPE_BYTES, FILTER_NAMES, OFFER_PROVIDERS, PRICED_PROVIDERS


@click.command("balance")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (fields below).")
@pass_ctx
def balance(ctx: Ctx, as_json: bool) -> None:
    """Provider balances, spend per hour, hours left, and warnings against the cap and the low mark.

    The providers in use are listed: GPUC_PROVIDER's and each one with an API key (GPUC_PROVIDER's without
    a key is "not configured", not an error). Warnings:
    balance above the cap (GPUC_BALANCE_CAP_USD, default 20) or below the low mark
    (GPUC_BALANCE_LOW_USD, default 5).

    The account's own limits are shown where the provider has them: RunPod's spend limit and spend per
    hour (its own figures) and its notification emails (warned when the stale-pod or low-balance one is
    off); Vast has neither, its spend per hour is the sum of the instances' dph_total. A provider that
    answers "too many requests" (RunPod's balance is on its GraphQL API, rate-limited since 2026-09) is
    shown as not read now: try again later; it says nothing against the key.

    \b
    --json fields: cap_usd, low_usd, advice, providers[]: provider, configured, balance_usd,
    spend_per_hour, hours_left (null when nothing is running), spend_limit, spend_rate_source
    (provider|computed), notify {name: on}, warnings[], error, hint, later (rate limited: not read now).
    """
    from gpuc.client.money.balance import check_balances, provider_factories, providers_in_use
    from gpuc.client.money.render import render_balance

    report = check_balances(ctx.settings, provider_factories(ctx, providers_in_use(ctx.settings)))
    click.echo(json.dumps(report.model_dump(), indent=2) if as_json else render_balance(report))


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
def ledger(command: click.Context, month: str | None, plot_path: Path | None, no_sync: bool, as_json: bool) -> None:
    """What was spent: a month of gpu-ledger.csv by experiment and by GPU, the effective price per hour
    (total cost / total hours, bootstrap and downloads included), rows with no end, rows with no note,
    and $ per 1M tokens for rows whose note carries `tok/s=<number>`. Pods still billing are counted
    "running, so far" (price x hours since their start; the watchdog says which are live) in the month's
    total with them; the closed rows' total stays apart.

    \b
    --json fields: month (null = all), rows, total_hours, total_cost_usd,
    effective_price_per_hour, unpriced_rows, by_experiment[] and by_gpu[] {name, rows, hours,
    cost_usd}, open_rows[] and no_note_rows[] (ledger rows: date, experiment, provider, gpu,
    price_per_hour, start, end, cost_usd, note), token_costs[] {experiment, gpu, start,
    price_per_hour, tok_per_s, usd_per_1m_tokens}, warnings[] (rows left out of the totals: a time or
    an amount that is not sane, and notes on running pods not counted), running[] {pod_id,
    experiment, provider, gpu, date, start, price_per_hour, hours, cost_usd}, running_usd,
    month_total_usd (closed + running so far), sync (what the watchdog sync did), plot (path), budget (null unless
    GPUC_MONTHLY_BUDGET is set and one month is shown: month, budget_usd, spent_usd, closed_usd,
    running_usd, running_per_hour, unknown[] (pods with no price: not counted), notes[], text).
    """
    if command.invoked_subcommand is not None:
        return
    from gpuc.client.money.ledger_view import ledger_report
    from gpuc.client.money.render import ledger_json, ledger_text

    ctx = command.ensure_object(Ctx)
    report = ledger_report(ctx, month, plot_path, sync=not no_sync)
    click.echo(ledger_json(report) if as_json else ledger_text(report))


@ledger.command("reconcile")
@click.option("--month", default=None, help="YYYY-MM [this month, UTC].")
@click.option("--provider", "providers", multiple=True, help="Only this provider (repeatable) [all configured].")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (fields below).")
@pass_ctx
def reconcile_command(ctx: Ctx, month: str | None, providers: tuple[str, ...], as_json: bool) -> None:
    """Compare each ledger row with the provider's own billing records: rows that differ by more than
    10 %, charges with no ledger row, disk billed while a pod was stopped. Exits 1 when anything differs.
    A RunPod row billed BELOW its ledger cost is listed, not flagged: RunPod's pod `cost` (what the ledger
    is priced with) leaves out savings plans.

    \b
    --json fields: month, providers[], rows_checked, rows_ok, unlinked_rows, ledger_total_usd,
    billed_total_usd, mismatches[] {pod_id, provider, experiment, gpu, start, end, ledger_usd,
    billed_usd, diff_pct, reason: amount|no_charges|open_row_billed|unpriced_row},
    unmatched[] {provider, pod_id, amount_usd, kinds, first, last},
    disk_while_stopped[] {provider, pod_id, amount_usd, first, last, records},
    below_ledger[] {pod_id, provider, experiment, gpu, start, end, ledger_usd, billed_usd, diff_pct,
    reason: amount|no_charges} (billed below the ledger where the provider's pod price leaves a discount out:
    RunPod's savings plans), notes[].
    """
    from gpuc.client.money.ledger_view import reconcile_month
    from gpuc.client.money.render import render_reconcile

    report = reconcile_month(ctx, month, providers)
    click.echo(json.dumps(report.model_dump(), indent=2) if as_json else render_reconcile(report))
    if not report.clean:
        click.get_current_context().exit(1)


@ledger.command("note")
@click.argument("run")
@click.argument("text")
@pass_ctx
def note_command(ctx: Ctx, run: str, text: str) -> None:
    """Add TEXT (what the run concluded) to RUN's ledger row, open or closed: a run that ended itself too.

    RUN: as in every command (pod id, run id, pod name, or experiment: its open run, else its latest),
    or a pod id or an experiment with one run in the ledger. The note is appended after what the row
    says (as `down --note` does); the same note twice is written once. One line, at most 500 characters.
    """
    from gpuc.client.money.notes import add_note

    talk(add_note(ctx, run, text))


@click.command("offers")
@click.option("--gpu", default=None, help='A card: "4090", "RTX 4090", "NVIDIA A100 80GB PCIe", "h100".')
@click.option("--interruptible", is_flag=True, help="Interruptible (bid) offers, Vast only (RunPod has none).")
@click.option("--provider", "providers", multiple=True, type=click.Choice(OFFER_PROVIDERS), help="[all]")
@click.option("--loosen", multiple=True, type=click.Choice(FILTER_NAMES), help="Drop a filter by name.")
@click.option("--no-verified", is_flag=True, help="Include Vast hosts that are not verified.")
@click.option("--min-reliability", type=float, default=None, help="Vast host reliability above [0.98].")
@click.option("--min-inet-down", type=float, default=None, help="Download Mb/s above [200].")
@click.option("--max-inet-down-cost", type=float, default=None, help="Download $/GB below [0.01].")
@click.option("--max-storage-cost", type=float, default=None, help="Storage $/GB/month below [0.3].")
@click.option("--num-gpus", type=int, default=None, help="GPUs per offer [1].")
@click.option("--min-cuda", type=float, default=None, help="Host's max CUDA at least [12.4].")
@click.option("--limit", type=int, default=20, show_default=True, help="Show the cheapest N (0 = all).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (fields below).")
@pass_ctx
def offers(
    ctx: Ctx,
    gpu: str | None,
    interruptible: bool,
    providers: tuple[str, ...],
    loosen: tuple[str, ...],
    no_verified: bool,
    min_reliability: float | None,
    min_inet_down: float | None,
    max_inet_down_cost: float | None,
    max_storage_cost: float | None,
    num_gpus: int | None,
    min_cuda: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """Live offers from Vast.ai and RunPod, filtered, sorted by total $/h, with bid advice (Vast only:
    RunPod spot pods are no longer rentable through its public API, so no RunPod spot price is shown).

    Vast offers pass five filters by default: verified, reliability > 0.98, download > 200 Mb/s,
    download < $0.01/GB, storage < $0.30/GB/month (plus 1 GPU, CUDA >= 12.4). Loosen one by name
    (--loosen reliability, --no-verified) or move its bound (--min-reliability 0.95).
    Bid advice: bid min_bid x 1.10 when on-demand costs >= 30 % more than min_bid; under 10 %
    take on-demand; between, on-demand unless the job is short and checkpoints.

    \b
    --json fields: gpu, interruptible, filters {verified, min_reliability, min_inet_down,
    max_inet_down_cost, max_storage_cost, num_gpus, min_cuda}, seen, dropped {filter: count},
    failures[] {provider, error, hint}, offers[] (cheapest first): provider, id, gpu, gpu_count,
    price_per_hour (Vast dph_total / RunPod secure), community_price, interruptible_price,
    min_bid, reliability, inet_down_mbps, cuda_max, stock, location, bandwidth_gbps,
    bandwidth_source ("offer" or "catalog"), gb_s_per_dollar_hour (per GPU),
    bid {action: bid|on_demand|on_demand_unless_short, bid_per_hour, gap_pct, reason} or null.
    """
    from gpuc.client.money.offers import build_filters, collect, offer_providers, provider_factories
    from gpuc.client.money.render import render_offers

    filters = build_filters(
        loosen, no_verified, min_reliability, min_inet_down, max_inet_down_cost, max_storage_cost, num_gpus, min_cuda
    )
    factories = provider_factories(ctx, offer_providers(providers, interruptible))
    report = collect(factories, gpu, interruptible, filters, limit or None)
    click.echo(json.dumps(report.model_dump(), indent=2) if as_json else render_offers(report))


@click.command("pick")
@click.argument("model", required=False)
@click.option(
    "--model",
    "model_name",
    default=None,
    help="A known model (below), 7b, 1.1b, or a parameter count (13b: KV estimated). [7b]",
)
@click.option("--dtype", type=click.Choice(sorted(DTYPE_BYTES)), default="fp16", show_default=True)
@click.option("--seq", type=int, default=2048, show_default=True, help="Tokens per sequence (in + out).")
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences in the KV cache at once.")
@click.option("--kv-kb", type=float, default=None, help="The model's KV cache KB per token (fp16), if known.")
@click.option("--provider", type=click.Choice(PRICED_PROVIDERS), default=None, help="Whose prices [runpod].")
@click.option("--offline", is_flag=True, help="Use the built-in dated price table; do not ask the provider.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (fields below).")
@pass_ctx
def pick(
    ctx: Ctx,
    model: str | None,
    model_name: str | None,
    dtype: str,
    seq: int,
    batch: int,
    kv_kb: float | None,
    provider: str | None,
    offline: bool,
    as_json: bool,
) -> None:
    """Choose a GPU for MODEL (`gpuc pick 7b`, or --model 7b): does it fit, how fast can it decode, what
    does a token cost.

    Memory first (weights + 1.5 GB overhead + KV cache for seq x batch tokens), then bandwidth (batch-1
    decode tok/s <= bandwidth / weight bytes), then price. Cards that fit rank first, then by tok/s per
    dollar-hour. Prices are live when the provider answers, else from the built-in table (dated, marked).

    \b
    --json fields: model, params, dtype, seq, batch, needed_tokens, weights_gb,
    kv_bytes_per_token, kv_estimated, top (the pick, or null), why (one line), price_note,
    rows[]: rank, gpu, memory_gb, bandwidth_gbps, tflops_fp16, ridge_flop_per_byte (FLOP/byte),
    dtype_supported, weights_gb, needed_gb, fits, kv_capacity_tokens, max_batch_at_seq,
    decode_tok_s (batch-1 upper bound), price_per_hour, price_source ("live <provider>" or
    "table <provider> <date>"), tok_s_per_dollar_hour, usd_per_1m_tokens, why_not;
    architecture (known models: the KV arithmetic), multi_gpu[] (only when no single card
    fits: gpu, count, memory_gb, needed_gb, decode_tok_s, price_per_hour of all the cards,
    price_source).

    \b
    Known models (case, - _ . and hub ids like meta-llama/Meta-Llama-3-8B-Instruct forgiven):
    llama-2-7b, llama-2-13b, llama-3-8b (llama-3.1-8b), llama-3-70b (llama-3.1-70b),
    mistral-7b, mixtral-8x7b, qwen2.5-7b, qwen2.5-14b, qwen2.5-32b, qwen2.5-72b,
    gemma-2-9b, phi-3-mini, tinyllama-1.1b; presets 7b (13.5 GB, 512 KB/token), 1.1b.
    """
    from gpuc.client.money.livepick import pick_for
    from gpuc.client.money.render import render_pick, result_json

    if model and model_name and model != model_name:
        raise click.UsageError(f"two models named ({model} and --model {model_name}): name one")
    chosen = model or model_name or "7b"
    result = pick_for(ctx, chosen, dtype, seq, batch, kv_kb=kv_kb, provider=provider, offline=offline)
    click.echo(result_json(result) if as_json else render_pick(result))
