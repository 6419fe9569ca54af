"""GPU facts and a dated price table: what the picker and the offers view reason with.

Facts are the seeds' catalog (dense fp16 tensor TFLOP/s, memory bandwidth GB/s, memory GB). Units are
decimal throughout (1 GB = 1e9 bytes, 1 KB = 1e3 bytes), as the spec sheets and the seeds write them.

Providers spell one card many ways ("NVIDIA GeForce RTX 4090" on RunPod, "RTX 4090" on Vast, "4090" from a
user). `find_gpu` maps a spelling to exactly one catalog entry or to None: a wrong match would put the wrong
bandwidth into a price decision, so an ambiguous name ("H100", "A100") is None, never a guess.
`gpu_matches` is the lenient form for filtering offers by what the user typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PRICE_TABLE_DATE = "2026-09"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as the picker reads it: names, memory, bandwidth."""

    key: str  # canonical name, e.g. "RTX 4090"
    tflops_fp16: float  # dense fp16 tensor TFLOP/s
    bandwidth_gbps: float
    memory_gb: float
    bf16: bool
    runpod_id: str | None  # RunPod gpuTypeId
    vast_name: str | None  # Vast `gpu_name`
    model: str  # the token that names the chip
    needs_any: frozenset[str] = frozenset()  # variant tokens, at least one required
    forbids: frozenset[str] = frozenset()  # tokens that name a different variant

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity at which a kernel stops being memory-bound: peak FLOP/s ÷ bytes/s."""
        return self.tflops_fp16 * 1e12 / (self.bandwidth_gbps * 1e9)


def _spec(
    key: str,
    tflops: float,
    bw: float,
    mem: float,
    bf16: bool,
    runpod_id: str | None,
    vast_name: str | None,
    model: str,
    needs_any: tuple[str, ...] = (),
    forbids: tuple[str, ...] = (),
) -> GpuSpec:
    variants, others = frozenset(needs_any), frozenset(forbids)
    return GpuSpec(key, tflops, bw, mem, bf16, runpod_id, vast_name, model, variants, others)


CATALOG: tuple[GpuSpec, ...] = (
    _spec("T4", 65, 320, 16, False, "Tesla T4", "Tesla T4", "t4"),
    _spec("RTX 3090", 71, 936, 24, True, "NVIDIA GeForce RTX 3090", "RTX 3090", "3090", forbids=("ti",)),
    _spec(
        "RTX 4090",
        165,
        1008,
        24,
        True,
        "NVIDIA GeForce RTX 4090",
        "RTX 4090",
        "4090",
        forbids=("ti", "d", "laptop", "mobile"),
    ),
    _spec("L4", 121, 300, 24, True, "NVIDIA L4", "L4", "l4"),
    _spec(
        "A100 80GB PCIe",
        312,
        1935,
        80,
        True,
        "NVIDIA A100 80GB PCIe",
        "A100 PCIE",
        "a100",
        needs_any=("pcie",),
        forbids=("40gb", "sxm", "sxm4"),
    ),
    _spec(
        "A100 80GB SXM",
        312,
        2039,
        80,
        True,
        "NVIDIA A100-SXM4-80GB",
        "A100 SXM4",
        "a100",
        needs_any=("sxm", "sxm4"),
        forbids=("40gb", "pcie"),
    ),
    _spec(
        "H100 80GB SXM",
        989,
        3352,
        80,
        True,
        "NVIDIA H100 80GB HBM3",
        "H100 SXM",
        "h100",
        needs_any=("sxm", "sxm5", "hbm3"),
        forbids=("pcie", "nvl"),
    ),
)

# Words that never tell two cards apart.
_NOISE = frozenset({"nvidia", "geforce", "tesla", "rtx", "gpu", "80gb", "24gb", "16gb"})


def name_tokens(name: str) -> frozenset[str]:
    """'NVIDIA A100-SXM4-80GB' -> {'a100', 'sxm4'}; 'rtx4090' -> {'4090'}."""
    text = re.sub(r"rtx(?=\d)", "rtx ", name.lower())
    return frozenset(t for t in re.split(r"[\s\-_/,()]+", text) if t and t not in _NOISE)


def _matches(spec: GpuSpec, tokens: frozenset[str]) -> bool:
    if spec.model not in tokens or tokens & spec.forbids:
        return False
    return not spec.needs_any or bool(tokens & spec.needs_any)


def find_gpu(name: str | None) -> GpuSpec | None:
    """The one catalog entry this spelling names, or None (unknown or ambiguous)."""
    if not name:
        return None
    tokens = name_tokens(name)
    hits = [spec for spec in CATALOG if _matches(spec, tokens)]
    return hits[0] if len(hits) == 1 else None


def gpu_matches(query: str, name: str) -> bool:
    """Does an offer's GPU `name` answer the user's `query`? "h100" matches every H100 variant."""
    wanted, got = find_gpu(query), find_gpu(name)
    if wanted is not None:
        return got is not None and got.key == wanted.key
    query_tokens = name_tokens(query)
    return bool(query_tokens) and query_tokens <= name_tokens(name)


@dataclass(frozen=True)
class TablePrice:
    """Built-in USD per GPU-hour, dated PRICE_TABLE_DATE: the fallback when live offers are unreachable."""

    runpod_secure: float | None
    runpod_community: float | None
    vast_min: float | None
    vast_median: float | None

    def on_demand(self, provider: str) -> float | None:
        # Vast's minimum is one host's outlier; the median is what a filtered search usually rents.
        return self.runpod_secure if provider == "runpod" else self.vast_median


# RunPod price page and Vast's public offers, September 2026 (the seeds); T4 was not listed.
PRICE_TABLE: dict[str, TablePrice] = {
    "T4": TablePrice(None, None, None, None),
    "RTX 3090": TablePrice(0.50, None, 0.07, 0.15),
    "RTX 4090": TablePrice(0.74, 0.34, 0.14, 0.37),
    "L4": TablePrice(0.49, None, 0.13, 0.33),
    "A100 80GB PCIe": TablePrice(1.39, None, 0.27, 0.94),
    "A100 80GB SXM": TablePrice(1.59, 1.39, 0.34, 0.83),
    "H100 80GB SXM": TablePrice(3.29, 2.69, 1.34, 2.07),
}


def table_price(key: str, provider: str) -> float | None:
    price = PRICE_TABLE.get(key)
    return price.on_demand(provider) if price else None
