"""The shapes every part of gpuc shares. Pure data: no I/O, no settings."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpuc.core.pod import RUN_ID_RE, pod_name  # a pod's own marks (core/pod.py: no pydantic)

EXPERIMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class PodSpec(Strict):
    """What `up` asks a provider for. `env` holds non-secret settings only: provider APIs echo it back."""

    experiment: str
    run_id: str
    provider: str
    gpu_type: str
    gpu_count: int = Field(1, ge=1, le=8)
    image: str = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
    container_disk_gb: int = Field(20, ge=5)
    volume_gb: int = Field(30, ge=0)
    env: dict[str, str] = Field(default_factory=dict)
    interruptible: bool = False
    bid_per_gpu: float | None = Field(None, gt=0)
    max_hours: float = Field(12.0, gt=0, le=24 * 14)
    price_per_hour: float | None = Field(None, ge=0)
    offer_id: str | None = None
    ssh_public_key: str | None = None
    # Vast's `onstart`: a shell script the container runs at every start (a resume after an outbid too).
    # A recovering run's boot (core/bootkit.py). Not a secret: the provider echoes it in every listing.
    onstart: str | None = Field(None, max_length=4096)

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, v: str) -> str:
        if not EXPERIMENT_RE.match(v):
            raise ValueError("experiment names are 1-64 characters: letters, digits, '.', '_', '-'")
        return v

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str) -> str:
        if not RUN_ID_RE.match(v):
            raise ValueError("run ids are 4-41 lowercase letters, digits or '-'")
        return v

    @property
    def name(self) -> str:
        return pod_name(self.run_id)


class GpuReading(Strict):
    index: int
    name: str | None = None
    uuid: str | None = None
    utilization_pct: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    processes: list[int] = Field(default_factory=list)
    error: str | None = None


class Offer(Strict):
    provider: str
    id: str
    gpu: str
    gpu_count: int = 1
    price_per_hour: float
    min_bid: float | None = None
    interruptible_price: float | None = None
    community_price: float | None = None
    reliability: float | None = None
    inet_down_mbps: float | None = None
    gpu_mem_bw_gbps: float | None = None
    cuda_max: float | None = None
    stock: str | None = None
    location: str | None = None
    # Vast's host-quality fields, re-checked by `gpuc offers` (None = not reported: the search filtered it).
    verified: bool | None = None  # verification == "verified"
    inet_down_cost: float | None = None  # $/GB downloaded
    storage_cost: float | None = None  # $/GB/month


class Balance(Strict):
    provider: str
    balance_usd: float
    spend_per_hour: float
    spend_limit: float | None = None  # RunPod's `spendLimit` (checked when a pod starts); Vast has none
    # Where spend_per_hour comes from: the provider's own field (RunPod currentSpendPerHr), or computed
    # (Vast has no such field: the sum of its instances' dph_total).
    spend_rate_source: Literal["provider", "computed"] = "provider"
    # The account's own alerts where the API shows them (RunPod notifyPodsStale, notifyPodsGeneral,
    # notifyLowBalance): name -> on. Empty: the provider shows none.
    notify: dict[str, bool] = Field(default_factory=dict)

    @property
    def hours_left(self) -> float | None:
        return self.balance_usd / self.spend_per_hour if self.spend_per_hour > 0 else None
