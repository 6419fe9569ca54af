"""Which card for this model: memory first, then bandwidth, then price (the seeds' order).

    fits             weights + 1.5 GB framework overhead + KV cache (seq x batch tokens) <= card memory
    KV capacity      (memory - weights - overhead) / KV bytes per token, in tokens
    decode tok/s     bandwidth / weight bytes: the batch-1 upper bound (decode reads every weight per token;
                     a mixture of experts reads only its active experts' share)
    ridge point      dense fp16 TFLOP/s / (GB/s), in FLOP/byte: the batch where decode turns compute-bound
    tok/s per $/h    decode tok/s / price per hour
    $ per 1M tokens  price x 1e6 / (tok/s x 3600)

Ranking: cards that fit come first (memory is a gate), then by tok/s per dollar-hour (bandwidth bought per
dollar: decode is memory-bound), ties broken by raw bandwidth. Ranking by bandwidth alone would always
pick the H100, which buys less bandwidth per dollar than a 3090.

When no single card fits, `multi_gpu` lists, for each card, the fewest of it (a count tensor parallelism
accepts, at most 8) whose memory holds weights + KV + the overhead on every card, fewest cards first.

Units are decimal (GB = 1e9 bytes, KB = 1e3). The KV cache is fp16 whatever the weight dtype (int8/int4 are
weight-only quantisation, as the seeds' experiments use them).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from pydantic import BaseModel

from gpuc.client.money.choices import DTYPE_BYTES
from gpuc.core.catalog import CATALOG, PRICE_TABLE_DATE, GpuSpec, find_gpu, table_price
from gpuc.core.errors import ConfigError
from gpuc.core.models import Offer

OVERHEAD_GB = 1.5


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params: float
    fp16_weights_gb: float
    kv_bytes_per_token: float  # fp16 K and V, all layers
    kv_estimated: bool  # True when the KV size is a shape estimate, not the model's known figure
    architecture: str | None = None  # "32 layers x 8 KV heads x 128": the KV arithmetic, shown to the user
    active_params: float | None = None  # mixture of experts: the weights one token reads
    attention_heads: int | None = None  # tensor parallelism splits these evenly across cards

    def weights_gb(self, dtype: str) -> float:
        return self.fp16_weights_gb * DTYPE_BYTES[dtype] / 2.0

    def read_per_token_gb(self, dtype: str) -> float:
        """The weight bytes one decode step reads: all of them, or the active experts' share (MoE)."""
        share = (self.active_params / self.params) if self.active_params else 1.0
        return self.weights_gb(dtype) * share


PRESETS: dict[str, ModelSpec] = {
    "7b": ModelSpec("7B", 6.75e9, 13.5, 512e3, False),
    "1.1b": ModelSpec("TinyLlama-1.1B", 1.1e9, 2.2, 22.5e3, False),
}
_PARAMS_RE = re.compile(r"^(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)$")
_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


@dataclass(frozen=True)
class KnownModel:
    """One row of the model table: the published config.json numbers, so the KV arithmetic is visible.

    KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x 2 bytes (fp16).
    """

    name: str
    params: float
    layers: int
    attention_heads: int
    kv_heads: int  # fewer than attention_heads = grouped-query attention, a smaller KV cache
    head_dim: int
    aliases: tuple[str, ...] = ()
    active_params: float | None = None

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    def spec(self) -> ModelSpec:
        shape = f"2 x {self.layers} layers x {self.kv_heads} KV heads x {self.head_dim} head dim x 2 bytes"
        return ModelSpec(
            self.name,
            self.params,
            self.params * 2.0 / 1e9,
            float(self.kv_bytes_per_token),
            False,
            architecture=shape,
            active_params=self.active_params,
            attention_heads=self.attention_heads,
        )


# Parameters, layers, attention heads, KV heads, head dim: from each model's config.json.
# Gemma 2 slides a 4096-token window on half its layers; counting every layer full errs towards
# "does not fit" on long sequences, never towards an out-of-memory surprise.
MODELS: tuple[KnownModel, ...] = (
    # KnownModel(name, parameters, layers, attention heads, KV heads, head dim)
    KnownModel("Llama-2-7B", 6.74e9, 32, 32, 32, 128),
    KnownModel("Llama-2-13B", 13.0e9, 40, 40, 40, 128),
    KnownModel("Llama-3-8B", 8.03e9, 32, 32, 8, 128, aliases=("llama-3.1-8b",)),
    KnownModel("Llama-3-70B", 70.6e9, 80, 64, 8, 128, aliases=("llama-3.1-70b",)),
    KnownModel("Mistral-7B", 7.24e9, 32, 32, 8, 128),
    # 8 experts, 2 read per token: 12.9B of the 46.7B weights per decode step.
    KnownModel("Mixtral-8x7B", 46.7e9, 32, 32, 8, 128, active_params=12.9e9),
    KnownModel("Qwen2.5-7B", 7.62e9, 28, 28, 4, 128),
    KnownModel("Qwen2.5-14B", 14.7e9, 48, 40, 8, 128),
    KnownModel("Qwen2.5-32B", 32.5e9, 64, 40, 8, 128),
    KnownModel("Qwen2.5-72B", 72.7e9, 80, 64, 8, 128),
    KnownModel("Gemma-2-9B", 9.24e9, 42, 16, 8, 256),
    KnownModel("Phi-3-mini", 3.82e9, 32, 32, 32, 96),
    KnownModel("TinyLlama-1.1B", 1.1e9, 22, 32, 4, 64),
)

_ORG = re.compile(r"^.*/")  # "meta-llama/Meta-Llama-3-8B": the hub's organisation names no architecture
# Fine-tunes and packagings share the base model's shape: -Instruct, -chat, -hf, -it, -v0.2, -4k.
_VARIANT = re.compile(r"[-_.:\s](?:instruct|chat|hf|it|base|v\d+(?:\.\d+)*|\d+k)$")
_SEPARATORS = re.compile(r"[-_.:\s]+")
_LETTER_DIGIT = re.compile(r"(?<=[a-z])(?=\d)")


def model_key(text: str) -> tuple[str, ...]:
    """'meta-llama/Meta-Llama-3.1-8B-Instruct', 'llama3.1:8b', 'LLAMA_3.1_8B' -> ('llama', '3', '1', '8b').

    Separators are kept as token boundaries, not deleted: 'Qwen2-57B' must not read as 'qwen2.5-7b'.
    """
    name = _ORG.sub("", text.strip().lower())
    while (variant := _VARIANT.search(name)) is not None:
        name = name[: variant.start()]
    tokens = [t for part in _SEPARATORS.split(name) for t in _LETTER_DIGIT.split(part) if t]
    if tokens[:2] == ["meta", "llama"]:
        tokens = tokens[1:]
    return tuple(tokens)


def _known_index() -> dict[tuple[str, ...], KnownModel]:
    index: dict[tuple[str, ...], KnownModel] = {}
    for known in MODELS:
        for name in (known.name, *known.aliases):
            index[model_key(name)] = known
    return index


KNOWN: dict[tuple[str, ...], KnownModel] = _known_index()


def known_names() -> list[str]:
    return [*PRESETS, *(n.lower() for m in MODELS for n in (m.name, *m.aliases))]


def _unknown_model(text: str) -> ConfigError:
    names = known_names()
    close = difflib.get_close_matches(text.strip().lower(), names, n=1, cutoff=0.6)
    guess = f"did you mean {close[0]}? " if close else ""
    return ConfigError(
        f"model {text!r} is neither a known model nor a parameter count",
        hint=f"{guess}known: {', '.join(names)}; or a parameter count such as 13b, 350m or 6.7e9",
    )


def estimated_kv_bytes_per_token(params: float) -> float:
    """A llama-shaped, full multi-head model: params ~ 12 L d^2 with L ~ d / 128 layers, so
    KV = 2 (K, V) x 2 bytes x L x d = d^2 / 32 bytes per token. Grouped-query models (most new ones) hold
    several times less: this errs towards "does not fit", never towards an out-of-memory surprise."""
    d = math.cbrt(params * 128.0 / 12.0)
    return d * d / 32.0


def _with_kv(model: ModelSpec, kv_kb: float | None) -> ModelSpec:
    if kv_kb is None:
        return model
    return replace(model, kv_bytes_per_token=kv_kb * 1e3, kv_estimated=False, architecture="--kv-kb")


def parse_model(text: str, kv_kb: float | None = None) -> ModelSpec:
    """'7b', '1.1b' (the seeds' presets), a known model ('llama-3-8b', 'Qwen/Qwen2.5-7B-Instruct'), or a
    parameter count: '13b', '350m', '6.7e9' (KV estimated from the shape)."""
    key = text.strip().lower()
    if key in PRESETS:
        return _with_kv(PRESETS[key], kv_kb)
    match = _PARAMS_RE.match(key)
    if not match:
        known = KNOWN.get(model_key(text)) if key else None
        if known is None:
            raise _unknown_model(text)
        return _with_kv(known.spec(), kv_kb)
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


class MultiGpuRow(BaseModel):
    """`count` of one card holding a model no single card holds (tensor parallel: weights and KV split)."""

    gpu: str
    count: int
    memory_gb: float  # all `count` cards together
    needed_gb: float  # weights + KV + the 1.5 GB overhead on every card
    decode_tok_s: float  # batch-1 upper bound: count x bandwidth / weight bytes (interconnect ignored)
    price_per_hour: float | None  # all `count` cards
    price_source: str | None
    # The provider's stock for a pod of `count` of this card (RunPod's catalog read with that count: its stock
    # for one card says nothing of `count` on one machine); None: not read (offline, or no such read).
    stock: str | None = None


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
    architecture: str | None = None  # the KV arithmetic of a known model
    multi_gpu: list[MultiGpuRow] = []  # only when no single card fits


def _why_not(spec: GpuSpec, dtype: str, fits: bool, needed_gb: float) -> str | None:
    if not (dtype != "bf16" or spec.bf16):
        return f"{spec.key} has no bf16 (use fp16)"
    if not fits:
        return f"needs {needed_gb:.1f} GB of {spec.memory_gb:g} GB"
    return None


def evaluate(spec: GpuSpec, model: ModelSpec, dtype: str, seq: int, batch: int, quote: PriceQuote | None) -> PickRow:
    weights = model.weights_gb(dtype)
    kv_gb = model.kv_bytes_per_token * seq * batch / 1e9
    needed = weights + OVERHEAD_GB + kv_gb
    supported = dtype != "bf16" or spec.bf16
    fits = supported and needed <= spec.memory_gb
    room_bytes = max(0.0, (spec.memory_gb - weights - OVERHEAD_GB) * 1e9)
    capacity = int(room_bytes / model.kv_bytes_per_token)
    tok_s = spec.bandwidth_gbps / model.read_per_token_gb(dtype)
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


MAX_GPUS = 8  # `gpuc up --gpus` rents at most 8: one machine's worth


def split_counts(model: ModelSpec) -> list[int]:
    """Card counts a tensor-parallel server accepts: vLLM and TGI split the attention heads evenly, so
    the count must divide them (64 heads: 2, 4, 8; never 3 or 7). Unknown heads: powers of two."""
    heads = model.attention_heads
    return [n for n in range(2, MAX_GPUS + 1) if (heads % n == 0 if heads else n & (n - 1) == 0)]


def multi_gpu(
    model: ModelSpec, dtype: str, seq: int, batch: int, quotes: Mapping[str, PriceQuote]
) -> list[MultiGpuRow]:
    """For each card, the fewest of it that hold the model: weights and KV are split across the cards,
    while every card pays its own framework overhead (CUDA context, activations). Fewest cards first."""
    weights = model.weights_gb(dtype)
    kv_gb = model.kv_bytes_per_token * seq * batch / 1e9
    options: list[MultiGpuRow] = []
    for spec in CATALOG:
        if dtype == "bf16" and not spec.bf16:
            continue
        for count in split_counts(model):
            needed = weights + kv_gb + count * OVERHEAD_GB
            if count * spec.memory_gb < needed:
                continue
            quote = quotes.get(spec.key)
            options.append(
                MultiGpuRow(
                    gpu=spec.key,
                    count=count,
                    memory_gb=count * spec.memory_gb,
                    needed_gb=needed,
                    decode_tok_s=count * spec.bandwidth_gbps / model.read_per_token_gb(dtype),
                    price_per_hour=count * quote.price_per_hour if quote else None,
                    price_source=quote.source if quote else None,
                )
            )
            break
    return sorted(options, key=lambda o: (o.count, o.price_per_hour is None, o.price_per_hour or 0.0))


def _split_advice(options: list[MultiGpuRow]) -> str:
    if not options:
        return f"; no count up to {MAX_GPUS} of one card holds it either"
    fewest = options[0]
    text = f"; or split it: fewest cards {_multi_text(fewest)}"
    priced = [o for o in options if o.price_per_hour is not None]
    cheapest = min(priced, key=lambda o: o.price_per_hour or 0.0) if priced else None
    if cheapest is not None and cheapest is not fewest:
        text += f", cheapest {_multi_text(cheapest)}"
    return text + f" (rent with gpuc up --gpus {fewest.count})"


def _multi_text(option: MultiGpuRow) -> str:
    price = f"${option.price_per_hour:.2f}/h" if option.price_per_hour is not None else "no price"
    return f"{option.count} x {option.gpu} ({price})"


def _why(rows: list[PickRow], model: ModelSpec, dtype: str, seq: int, batch: int, split: list[MultiGpuRow]) -> str:
    fitting = [r for r in rows if r.fits]
    if not fitting:
        biggest = max(rows, key=lambda r: (r.dtype_supported, r.memory_gb))
        return (
            f"no card in the catalog fits {model.name} {dtype} at batch {batch} x {seq} "
            f"(needs {biggest.needed_gb:.1f} GB; {biggest.gpu} has {biggest.memory_gb:g} GB"
            + (f" and holds batch {biggest.max_batch_at_seq} at this seq" if biggest.max_batch_at_seq else "")
            + "): lower --batch or --seq, or use --dtype int8/int4"
            + _split_advice(split)
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
    split = [] if top else multi_gpu(model, dtype, seq, batch, quotes)
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
        why=_why(rows, model, dtype, seq, batch, split),
        price_note=price_note,
        architecture=model.architecture,
        multi_gpu=split,
    )
