"""What the money commands accept (click choices), stdlib data only: `gpuc ledger --help`, and every TAB,
load money/commands.py, and must not pay for the offers' and the picker's pydantic models."""

from __future__ import annotations

FILTER_NAMES = ("verified", "reliability", "inet_down", "inet_down_cost", "storage_cost", "num_gpus", "cuda")
OFFER_PROVIDERS = ("vast", "runpod")
PRICED_PROVIDERS = ("runpod", "vast")
DTYPE_BYTES: dict[str, float] = {"fp16": 2.0, "bf16": 2.0, "int8": 1.0, "int4": 0.5}
