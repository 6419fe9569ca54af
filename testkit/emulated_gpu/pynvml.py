"""The GPU of an emulated pod, as NVML (the `pynvml` module) would report it.

`gpuc demo --provider runpod|vast` rents from an emulator and "runs" the pod in a sandbox on this
machine, which has no GPU: verification would rightly destroy every pod. The demo puts this
directory first on the sandboxed pod's PYTHONPATH (in its container.env), so the pod's `import pynvml`
finds a machine with the GPU the emulator rented: `GPUC_EMULATED_GPU` x `GPUC_EMULATED_GPU_COUNT`, idle,
no foreign process. Never on a real pod: the laptop's gpuc never installs this package there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

NAME_ENV = "GPUC_EMULATED_GPU"
COUNT_ENV = "GPUC_EMULATED_GPU_COUNT"
DRIVER = "550.54.15"
CUDA_DRIVER = 12040  # NVML's encoding of CUDA 12.4
MEMORY_TOTAL = 24 * 2**30


class NVMLError(Exception):
    pass


@dataclass(frozen=True)
class Handle:
    index: int


@dataclass(frozen=True)
class Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True)
class Memory:
    total: int
    free: int
    used: int


NVML_TEMPERATURE_GPU = 0


def nvmlInit() -> None:
    if not os.environ.get(NAME_ENV):
        raise NVMLError(f"{NAME_ENV} is not set: this sandbox emulates no GPU")


def nvmlShutdown() -> None:
    return None


def nvmlDeviceGetCount() -> int:
    return int(os.environ.get(COUNT_ENV) or 1)


def nvmlDeviceGetHandleByIndex(index: int) -> Handle:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(f"no GPU {index}")
    return Handle(index)


def nvmlDeviceGetName(handle: Handle) -> str:
    return os.environ.get(NAME_ENV, "")


def nvmlDeviceGetUUID(handle: Handle) -> str:
    return f"GPU-emulated-{handle.index:04d}"


def nvmlSystemGetDriverVersion() -> str:
    return DRIVER


def nvmlSystemGetCudaDriverVersion() -> int:
    return CUDA_DRIVER


def nvmlDeviceGetUtilizationRates(handle: Handle) -> Utilization:
    return Utilization(gpu=0, memory=0)


def nvmlDeviceGetMemoryInfo(handle: Handle) -> Memory:
    return Memory(total=MEMORY_TOTAL, free=MEMORY_TOTAL, used=0)


def nvmlDeviceGetPowerUsage(handle: Handle) -> int:
    return 20_000  # milliwatts


def nvmlDeviceGetEnforcedPowerLimit(handle: Handle) -> int:
    return 450_000


def nvmlDeviceGetTemperature(handle: Handle, sensor: int) -> int:
    return 35


def nvmlDeviceGetComputeRunningProcesses(handle: Handle) -> list[object]:
    return []


def nvmlDeviceGetGraphicsRunningProcesses(handle: Handle) -> list[object]:
    return []
