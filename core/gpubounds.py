"""The bounds of a GPU reading at the edge (a heartbeat's `gpus`), checked by core/api.py's HeartbeatBody."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

READINGS = ("utilization_pct", "memory_used_mb", "memory_total_mb", "power_w", "power_limit_w", "temperature_c")


def reading_problem(gpu: Any) -> str | None:
    """What is out of range in `gpu` (anything with GpuReading's fields), or None."""
    if not 0 <= gpu.index < 64:
        return "gpu index out of range"
    if any((n := getattr(gpu, name)) is not None and not -1e3 <= n <= 1e7 for name in READINGS):
        return "gpu reading out of range"
    processes: Sequence[int] = gpu.processes
    if len(processes) > 1024 or any(not 0 <= pid < 2**32 for pid in processes):
        return "gpu processes out of range"
    return None
