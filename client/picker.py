"""Which card for this model: memory first, then bandwidth, then price (the seeds' order).

    fits             weights + 1.5 GB framework overhead + KV cache (seq x batch tokens) <= card memory
    KV capacity      (memory - weights - overhead) / KV bytes per token, in tokens
    decode tok/s     bandwidth / weight bytes: the batch-1 upper bound (decode reads every weight per token)
    ridge point      dense fp16 TFLOP/s / (GB/s), in FLOP/byte: the batch where decode turns compute-bound
    tok/s per $/h    decode tok/s / price per hour
    $ per 1M tokens  price x 1e6 / (tok/s x 3600)

Ranking: cards that fit come first (memory is a gate), then by tok/s per dollar-hour (bandwidth bought per
dollar: decode is memory-bound), ties broken by raw bandwidth. Ranking by bandwidth alone would always
pick the H100, which buys less bandwidth per dollar than a 3090.

Units are decimal (GB = 1e9 bytes, KB = 1e3). The KV cache is fp16 whatever the weight dtype (int8/int4 are
weight-only quantisation, as the seeds' experiments use them).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from gpuc.core.catalog import CATALOG, PRICE_TABLE_DATE, GpuSpec, find_gpu, table_price
from gpuc.core.errors import ConfigError
from gpuc.core.models import Offer

OVERHEAD_GB = 1.5
DTYPE_BYTES: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: float
    fp16_weights_gb: float
    kv_bytes_per_token: float  # fp16 K and V, all layers
    kv_estimated: bool  # True when the KV size is a shape estimate, not the model's known figure

    def weights_gb(self, dtype: str) -> float:
        return self.fp16_weights_gb * DTYPE_BYTES[dtype] / 2.0


PRESETS: dict[str, ModelSpec] = {
    "7b": ModelSpec("7B", 6.75e9, 13.5, 512e3, False),
    "1.1b": ModelSpec("TinyLlama-1.1B", 1.1e9, 2.2, 22.5e3, False),
}
_PARAMS_RE = re.compile(r"^(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)$")
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def estimated_kv_bytes_per_token(params: float) -> float:
    """A llama-shaped, full multi-head model: params ~ 12 L d^2 with L ~ d / 128 layers, so
    KV = 2 (K, V) x 2 bytes x L x d = d^2 / 32 bytes per token. Grouped-query models (most new ones) hold
    several times less: this errs towards "does not fit", never towards an out-of-memory surprise."""
    d = math.cbrt(params * 128.0 / 12.0)
    return d * d / 32.0


def parse_model(text: str, kv_kb: float | None = None) -> ModelSpec:
    """'7b', '1.1b' (the seeds' models), or a parameter count: '13b', '350m', '6.7e9'."""
    key = text.strip().lower()
    if key in PRESETS:
        preset = PRESETS[key]
        if kv_kb is None:
            return preset
        return ModelSpec(preset.name, preset.params, preset.fp16_weights_gb, kv_kb * 1e3, False)
    match = _PARAMS_RE.match(key)
    if not match:
        raise ConfigError(
            f"model {text!r} is neither a preset nor a parameter count",
            hint="use --model 7b, --model 1.1b, or a parameter count such as 13b, 350m or 6.7e9",
        )
    params = float(match.group(1)) * _SUFFIX[match.group(2)]
    if params <= 0:
        raise ConfigError(f"model {text!r} has no parameters", hint="give a positive count, e.g. --model 13b")
    kv = kv_kb * 1e3 if kv_kb is not None else estimated_kv_bytes_per_token(params)
    return ModelSpec(f"{params / 1e9:g}B", params, params * 2.0 / 1e9, kv, kv_kb is None)


class PriceQuote(BaseModel):
    price_per_hour: float
    source: str  # "live runpod" or "table runpod 2026-09" (built in, dated: may be stale)

    @property
    def live(self) -> bool:
        return self.source.startswith("live")


def live_quotes(provider: str, offers: Iterable[Offer]) -> dict[str, PriceQuote]:
    """The cheapest on-demand price per GPU-hour for each catalog card among these offers."""
    best: dict[str, float] = {}
    for offer in offers:
        spec = find_gpu(offer.gpu)
        if spec is None or offer.price_per_hour <= 0:
            continue
        per_gpu = offer.price_per_hour / max(1, offer.gpu_count)
        best[spec.key] = min(per_gpu, best.get(spec.key, per_gpu))
    return {k: PriceQuote(price_per_hour=v, source=f"live {provider}") for k, v in best.items()}


def price_quotes(provider: str, live: Mapping[str, PriceQuote] | None = None) -> dict[str, PriceQuote]:
    """Live prices where we have them, the dated built-in table for every other card."""
    quotes: dict[str, PriceQuote] = {}
    for spec in CATALOG:
        if live and spec.key in live:
            quotes[spec.key] = live[spec.key]
            continue
        price = table_price(spec.key, provider)
        if price is not None:
            quotes[spec.key] = PriceQuote(price_per_hour=price, source=f"table {provider} {PRICE_TABLE_DATE}")
    return quotes


class PickRow(BaseModel):
    gpu: str
    memory_gb: float
    bandwidth_gbps: float
    tflops_fp16: float
    ridge_flop_per_byte: float
    dtype_supported: bool
    weights_gb: float
    needed_gb: float  # weights + overhead + KV for seq x batch
    fits: bool
    kv_capacity_tokens: int
    max_batch_at_seq: int
    decode_tok_s: float  # batch-1 upper bound
    price_per_hour: float | None
    price_source: str | None
    tok_s_per_dollar_hour: float | None
    usd_per_1m_tokens: float | None
    rank: int = 0
    why_not: str | None = None


class PickResult(BaseModel):
    model: str
    params: float
    dtype: str
    seq: int
    batch: int
    needed_tokens: int
    weights_gb: float
    kv_bytes_per_token: float
    kv_estimated: bool
    rows: list[PickRow]
    top: str | None
    why: str
    price_note: str | None = None  # why live prices were not used, when they were not


def _why_not(spec: GpuSpec, dtype: str, fits: bool, needed_gb: float) -> str | None:
    if not (dtype != "bf16" or spec.bf16):
        return f"{spec.key} has no bf16 (use fp16)"
    if not fits:
        return f"needs {needed_gb:.1f} GB of {spec.memory_gb:g} GB"
    return None


def evaluate(
    spec: GpuSpec, model: ModelSpec, dtype: str, seq: int, batch: int, quote: PriceQuote | None
) -> PickRow:
    weights = model.weights_gb(dtype)
    kv_gb = model.kv_bytes_per_token * seq * batch / 1e9
    needed = weights + OVERHEAD_GB + kv_gb
    supported = dtype != "bf16" or spec.bf16
    fits = supported and needed <= spec.memory_gb
    room_bytes = max(0.0, (spec.memory_gb - weights - OVERHEAD_GB) * 1e9)
    capacity = int(room_bytes / model.kv_bytes_per_token)
    tok_s = spec.bandwidth_gbps / weights
    price = quote.price_per_hour if quote else None
    return PickRow(
        gpu=spec.key,
        memory_gb=spec.memory_gb,
        bandwidth_gbps=spec.bandwidth_gbps,
        tflops_fp16=spec.tflops_fp16,
        ridge_flop_per_byte=spec.ridge_flop_per_byte,
        dtype_supported=supported,
        weights_gb=weights,
        needed_gb=needed,
        fits=fits,
        kv_capacity_tokens=capacity,
        max_batch_at_seq=capacity // seq,
        decode_tok_s=tok_s,
        price_per_hour=price,
        price_source=quote.source if quote else None,
        tok_s_per_dollar_hour=tok_s / price if price else None,
        usd_per_1m_tokens=price * 1e6 / (tok_s * 3600.0) if price else None,
        why_not=_why_not(spec, dtype, fits, needed),
    )


def _rank_key(row: PickRow) -> tuple[int, int, float, float]:
    if not row.fits:
        return (1, 0, -row.memory_gb, -row.bandwidth_gbps)  # the nearest to fitting first
    value = row.tok_s_per_dollar_hour
    return (0, 0 if value is not None else 1, -(value or 0.0), -row.bandwidth_gbps)


def _why(rows: list[PickRow], model: ModelSpec, dtype: str, seq: int, batch: int) -> str:
    fitting = [r for r in rows if r.fits]
    if not fitting:
        biggest = max(rows, key=lambda r: (r.dtype_supported, r.memory_gb))
        return (
            f"no card in the catalog fits {model.name} {dtype} at batch {batch} x {seq} "
            f"(needs {biggest.needed_gb:.1f} GB; {biggest.gpu} has {biggest.memory_gb:g} GB and holds batch "
            f"{biggest.max_batch_at_seq} at this seq): lower --batch or --seq, or use --dtype int8/int4"
        )
    top = fitting[0]
    text = (
        f"{top.gpu} wins: fits {model.name} {dtype} at batch {batch} x {seq} "
        f"(KV room {top.kv_capacity_tokens:,} tokens)"
    )
    if top.tok_s_per_dollar_hour is None or top.price_per_hour is None:
        return f"{text}, {top.decode_tok_s:.0f} tok/s batch-1 upper bound; no card that fits has a price"
    text += (
        f", {top.decode_tok_s:.0f} tok/s for ${top.price_per_hour:.2f}/h ({top.price_source}) = "
        f"{top.tok_s_per_dollar_hour:.0f} tok/s per $/h, the most of the {len(fitting)} that fit"
    )
    fastest = max(fitting, key=lambda r: r.bandwidth_gbps)
    if fastest.gpu != top.gpu and fastest.price_per_hour is not None:
        fast = f"{fastest.decode_tok_s:.0f} tok/s for ${fastest.price_per_hour:.2f}/h"
        text += f"; fastest is {fastest.gpu}: {fast}"
    return text


def pick(
    model: ModelSpec,
    dtype: str,
    seq: int,
    batch: int,
    quotes: Mapping[str, PriceQuote],
    price_note: str | None = None,
) -> PickResult:
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"dtype {dtype!r} is not known", hint=f"use one of: {', '.join(DTYPE_BYTES)}")
    if seq < 1 or batch < 1:
        raise ConfigError("--seq and --batch must be at least 1", hint="e.g. --seq 2048 --batch 8")
    rows = sorted((evaluate(s, model, dtype, seq, batch, quotes.get(s.key)) for s in CATALOG), key=_rank_key)
    for rank, row in enumerate(rows, start=1):
        row.rank = rank
    top = rows[0].gpu if rows and rows[0].fits else None
    return PickResult(
        model=model.name,
        params=model.params,
        dtype=dtype,
        seq=seq,
        batch=batch,
        needed_tokens=seq * batch,
        weights_gb=model.weights_gb(dtype),
        kv_bytes_per_token=model.kv_bytes_per_token,
        kv_estimated=model.kv_estimated,
        rows=rows,
        top=top,
        why=_why(rows, model, dtype, seq, batch),
        price_note=price_note,
    )
