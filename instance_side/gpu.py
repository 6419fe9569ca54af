"""GPU readings behind a tiny adapter.

`NvmlReader` takes the pynvml module as a parameter, so tests hand it a fake instead of patching the
real one. Each optional field degrades to None when NVML says it is not supported (consumer cards,
containers); a device that errors otherwise (lost GPU, Xid) becomes an entry with `error` set; a
missing NVML library is "no GPU data" and the heartbeats go on. What the idle watch makes of all this
lives in idle.py: a failed or partial reading counts as busy, never idle.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

# pynvml error codes (nvml.h); read from the module when it has them.
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_TEMPERATURE_GPU = 0
_MB = 1024.0 * 1024.0


@dataclass(frozen=True)
class GpuSample:
    """core.models.GpuReading, without pydantic; `as_json()` is what the heartbeat carries."""

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
    processes: tuple[int, ...] = ()
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["processes"] = list(self.processes)
        return out


class GpuReadError(Exception):
    """The whole reading failed: the idle watch counts the pod as busy."""


class GpuReader(Protocol):
    @property
    def note(self) -> str | None:
        """Why there is no GPU data at all (no NVML library), else None."""

    def read(self) -> list[GpuSample]: ...


class _Degraded(Exception):
    pass


class NvmlReader:
    def __init__(self, nvml: Any | None) -> None:
        self._nvml = nvml
        self._ready = False
        self._note: str | None = None if nvml is not None else "no GPU data: pynvml is not installed"

    @property
    def note(self) -> str | None:
        return self._note

    def read(self) -> list[GpuSample]:
        nvml = self._nvml
        if nvml is None or not self._ensure_init(nvml):
            return []
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            raise GpuReadError(f"NVML device count failed: {_describe(exc)}") from None
        driver = self._optional(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        cuda = self._optional(lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion()))
        return [self._read_device(nvml, i, driver, cuda) for i in range(count)]

    def _ensure_init(self, nvml: Any) -> bool:
        if self._ready:
            return True
        try:
            nvml.nvmlInit()
        except Exception as exc:
            if _code(nvml, exc, "NVML_ERROR_LIBRARY_NOT_FOUND", _LIBRARY_NOT_FOUND) or _code(
                nvml, exc, "NVML_ERROR_DRIVER_NOT_LOADED", _DRIVER_NOT_LOADED
            ):
                # No driver on this machine (a laptop sandbox): nothing can be running on a GPU.
                self._note = f"no GPU data: {_describe(exc)}"
                return False
            raise GpuReadError(f"NVML init failed: {_describe(exc)}") from None
        self._ready = True
        self._note = None
        return True

    def _read_device(self, nvml: Any, index: int, driver: str | None, cuda: str | None) -> GpuSample:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = self._optional(lambda: _text(nvml.nvmlDeviceGetName(handle)))
        except Exception as exc:
            return GpuSample(index=index, error=_describe(exc))
        try:
            return self._device_fields(nvml, handle, index, name, driver, cuda)
        except Exception as exc:
            return GpuSample(index=index, name=name, driver_version=driver, cuda_version=cuda, error=_describe(exc))

    def _device_fields(
        self, nvml: Any, handle: Any, index: int, name: str | None, driver: str | None, cuda: str | None
    ) -> GpuSample:
        memory = self._optional(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        power = self._optional(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        limit = self._optional(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        sensor = getattr(nvml, "NVML_TEMPERATURE_GPU", _TEMPERATURE_GPU)
        procs = self._optional(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        return GpuSample(
            index=index,
            name=name,
            uuid=self._optional(lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
            utilization_pct=self._optional(lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
            memory_used_mb=None if memory is None else round(memory.used / _MB, 1),
            memory_total_mb=None if memory is None else round(memory.total / _MB, 1),
            power_w=None if power is None else round(power / 1000.0, 1),
            power_limit_w=None if limit is None else round(limit / 1000.0, 1),
            temperature_c=self._optional(lambda: float(nvml.nvmlDeviceGetTemperature(handle, sensor))),
            driver_version=driver,
            cuda_version=cuda,
            processes=tuple(int(p.pid) for p in procs or ()),
        )

    def _optional(self, fn: Callable[[], T]) -> T | None:
        """A field the device may not offer: None instead of an error (gpustat's safenvml)."""
        nvml = self._nvml
        try:
            return fn()
        except Exception as exc:
            if any(
                _code(nvml, exc, attr, default)
                for attr, default in (
                    ("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
                    ("NVML_ERROR_NO_PERMISSION", _NO_PERMISSION),
                    ("NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND),
                )
            ):
                return None
            raise


def _code(nvml: Any, exc: BaseException, attr: str, default: int) -> bool:
    error_type = getattr(nvml, "NVMLError", None)
    if not (isinstance(error_type, type) and isinstance(exc, error_type)):
        return False
    return getattr(exc, "value", None) == getattr(nvml, attr, default)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:200]


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _cuda_version(raw: object) -> str:
    """NVML reports the driver's CUDA as 1000*major + 10*minor (12040 -> "12.4")."""
    number = int(raw)  # type: ignore[call-overload]
    return f"{number // 1000}.{(number % 1000) // 10}"


SIM_DEFAULT_GPU = GpuSample(
    index=0, name="simulated GPU", utilization_pct=0.0, memory_used_mb=0.0, memory_total_mb=24576.0
)


def read_sim_file(path: Path) -> dict[str, Any] | None:
    """The local sandbox's stand-in for NVML and sshd: None when the file does not exist."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("the simulated GPU file is not a JSON object")
    return data


class SimulatedReader:
    """Readings for a local sandbox pod, from `PodPaths.sim_gpu` (the tests and the demo drive it)."""

    note: str | None = None

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[GpuSample]:
        try:
            data = read_sim_file(self.path)
        except (OSError, ValueError) as exc:
            raise GpuReadError(f"simulated GPU unreadable: {_describe(exc)}") from None
        if data is None:
            return [SIM_DEFAULT_GPU]
        if data.get("error"):
            raise GpuReadError(str(data["error"])[:200])
        gpus = data.get("gpus")
        if not isinstance(gpus, list):
            return [SIM_DEFAULT_GPU]
        return [_sim_gpu(i, g) for i, g in enumerate(gpus)]


def _sim_gpu(index: int, raw: object) -> GpuSample:
    if not isinstance(raw, dict):
        return GpuSample(index=index, error="simulated GPU entry is not an object")
    return GpuSample(
        index=index,
        name=_opt_str(raw.get("name")) or "simulated GPU",
        # Absent means idle, as the local provider's own witness reads it; an explicit null is unknown.
        utilization_pct=_opt_float(raw.get("utilization_pct", 0.0)),
        memory_used_mb=_opt_float(raw.get("memory_used_mb")),
        memory_total_mb=_opt_float(raw.get("memory_total_mb")),
        error=_opt_str(raw.get("error")),
    )


def _opt_float(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
