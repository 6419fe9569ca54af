"""`gpuc pick`: which card for this model, with the arithmetic shown."""

from __future__ import annotations

import json
import textwrap

import click

from gpuc.client import picker, table
from gpuc.client.offers import OfferFilters, filter_offers
from gpuc.client.picker import (
    DTYPE_BYTES,
    MultiGpuRow,
    PickResult,
    PriceQuote,
    live_quotes,
    parse_model,
    price_quotes,
)
from gpuc.core.errors import ConfigError, ProviderError
from gpuc.core.providers.registry import get_provider
from gpuc.core.settings import Settings, load_settings

PRICED_PROVIDERS = ("runpod", "vast")


def fetch_live_quotes(provider_name: str, settings: Settings) -> tuple[dict[str, PriceQuote], str | None]:
    """Live on-demand prices from one provider, or ({}, why not) when it cannot be reached."""
    try:
        provider = get_provider(provider_name, settings)
        try:
            offers = provider.offers(None, False)
        finally:
            provider.close()
    except (ProviderError, ConfigError) as exc:
        return {}, f"live prices unavailable ({exc.message}): using the built-in table"
    trusted, _ = filter_offers(offers, OfferFilters())
    quotes = live_quotes(provider_name, trusted)
    return quotes, None if quotes else "no live offer matched a catalog card: using the built-in table"


PICK_HEADERS = (
    *("#", "GPU", "GB", "FITS", "KV ROOM TOK", "TOK/S", "RIDGE"),
    *("$/H", "PRICE SOURCE", "TOK/S/$H", "$/1M TOK"),
)


def render(result: PickResult) -> str:

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
    lines = textwrap.wrap(head, table.WIDTH, subsequent_indent="  ")
    if result.architecture:
        lines += textwrap.wrap(f"KV per token = {result.architecture}", table.WIDTH, subsequent_indent="  ")
    body = table.render(PICK_HEADERS, rows, shrink={8: 12}, right=(0, 2, 4, 5, 6, 7, 9, 10))
    lines.append(body[0])
    for r, line in zip(result.rows, body[1:], strict=True):
        # Why a card is out goes on its own line under the row: the table keeps its width.
        lines += [line, *([f"{'':>4}{r.gpu}: {r.why_not}"] if r.why_not else [])]
    lines.extend(render_multi_gpu(result.multi_gpu))
    if result.price_note:
        lines += textwrap.wrap(f"note: {result.price_note}", table.WIDTH, subsequent_indent="  ")
    lines += textwrap.wrap(result.why, table.WIDTH, subsequent_indent="  ")
    return "\n".join(lines)


def render_multi_gpu(options: list[MultiGpuRow]) -> list[str]:
    if not options:
        return []
    lines = [
        "no single card holds it; split across cards (tensor parallel, overhead on every card):",
        f"    {'cards':<22}{'GB':>5}{'needs':>7}{'tok/s':>7}{'$/h':>8}  price source",
    ]
    for o in options:
        price = f"{o.price_per_hour:.2f}" if o.price_per_hour is not None else "-"
        lines.append(
            f"    {f'{o.count} x {o.gpu}':<22}{o.memory_gb:>5g}{o.needed_gb:>7.1f}{o.decode_tok_s:>7.0f}"
            f"{price:>8}  {o.price_source or '-'}"
        )
    lines.append(f"    rent one with: gpuc up NAME --gpu '{options[0].gpu}' --gpus {options[0].count}")
    return lines


def result_json(result: PickResult) -> str:
    body = result.model_dump()
    for optional in ("architecture", "multi_gpu"):  # present only when they say something
        if not body[optional]:
            del body[optional]
    return json.dumps(body, indent=2)


@click.command("pick")
@click.option(
    "--model",
    "model_name",
    default="7b",
    show_default=True,
    help="A known model (below), 7b, 1.1b, or a parameter count (13b: KV estimated).",
)
@click.option("--dtype", type=click.Choice(sorted(DTYPE_BYTES)), default="fp16", show_default=True)
@click.option("--seq", type=int, default=2048, show_default=True, help="Tokens per sequence (in + out).")
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences in the KV cache at once.")
@click.option("--kv-kb", type=float, default=None, help="The model's KV cache KB per token (fp16), if known.")
@click.option("--provider", type=click.Choice(PRICED_PROVIDERS), default=None, help="Whose prices [runpod].")
@click.option("--offline", is_flag=True, help="Use the built-in dated price table; do not ask the provider.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (fields below).")
def pick(
    model_name: str,
    dtype: str,
    seq: int,
    batch: int,
    kv_kb: float | None,
    provider: str | None,
    offline: bool,
    as_json: bool,
) -> None:
    """Choose a GPU for a model: does it fit, how fast can it decode, what does a token cost.

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
    settings = load_settings()
    model = parse_model(model_name, kv_kb)
    name = provider or (settings.provider if settings.provider in PRICED_PROVIDERS else "runpod")
    live: dict[str, PriceQuote] = {}
    note = "offline: using the built-in table" if offline else None
    if not offline:
        live, note = fetch_live_quotes(name, settings)
    result = picker.pick(model, dtype, seq, batch, price_quotes(name, live), price_note=note)
    click.echo(result_json(result) if as_json else render(result))
