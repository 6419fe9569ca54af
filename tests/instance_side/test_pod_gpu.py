"""NvmlReader against an injected fake pynvml (never the real module patched), and the sandbox's sim."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpuc.core.models import GpuReading
from gpuc.instance_side.gpu import GpuReadError, GpuSample, NvmlReader, SimulatedReader


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            3: "Not Supported",
            9: "Driver Not Loaded",
            12: "NVML Shared Library Not Found",
            15: "GPU is lost",
        }.get(self.value, f"NVML Error with code {self.value}")


NOT_SUPPORTED = FakeNVMLError(3)
LOST = FakeNVMLError(15)


class FakeNvml:
    """Module-shaped: the attributes and functions NvmlReader uses. A device value that is an
    exception is raised when read."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, devices: list[dict[str, Any]], init_error: int | None = None) -> None:
        self.devices = devices
        self.init_error = init_error
        self.inits = 0

    def _get(self, handle: int, key: str) -> Any:
        value = self.devices[handle][key]
        if isinstance(value, BaseException):
            raise value
        return value

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.devices[index].get("handle") is not None:
            raise self.devices[index]["handle"]
        return index

    def nvmlDeviceGetName(self, h: int) -> Any:
        return self._get(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> Any:
        return self._get(h, "uuid")

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=self._get(h, "util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used = self._get(h, "mem_used")
        return SimpleNamespace(used=used, total=24 * 1024**3, free=0)

    def nvmlDeviceGetPowerUsage(self, h: int) -> Any:
        return self._get(h, "power")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> Any:
        return self._get(h, "power_limit")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> Any:
        assert sensor == 0
        return self._get(h, "temp")

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> Any:
        return [SimpleNamespace(pid=p, usedGpuMemory=1) for p in self._get(h, "pids")]


def device(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": b"NVIDIA GeForce RTX 4090",
        "uuid": "GPU-1234",
        "util": 37,
        "mem_used": 2 * 1024**3,
        "power": 210_500,
        "power_limit": 450_000,
        "temp": 61,
        "pids": [4242],
        "handle": None,
    }
    base.update(over)
    return base


def test_it_reads_every_field_of_a_healthy_gpu() -> None:
    [gpu] = NvmlReader(FakeNvml([device()])).read()
    assert gpu == GpuSample(
        index=0,
        name="NVIDIA GeForce RTX 4090",
        uuid="GPU-1234",
        utilization_pct=37.0,
        memory_used_mb=2048.0,
        memory_total_mb=24576.0,
        power_w=210.5,
        power_limit_w=450.0,
        temperature_c=61.0,
        driver_version="550.54.15",
        cuda_version="12.4",
        processes=(4242,),
    )
    GpuReading.model_validate(gpu.as_json())


def test_not_supported_fields_degrade_to_none_and_the_rest_is_read() -> None:
    nvml = FakeNvml([device(power=NOT_SUPPORTED, power_limit=NOT_SUPPORTED, temp=NOT_SUPPORTED, pids=NOT_SUPPORTED)])
    [gpu] = NvmlReader(nvml).read()
    assert (gpu.power_w, gpu.power_limit_w, gpu.temperature_c, gpu.processes) == (None, None, None, ())
    assert gpu.utilization_pct == 37.0 and gpu.error is None


def test_unsupported_utilisation_is_unknown_not_zero() -> None:
    [gpu] = NvmlReader(FakeNvml([device(util=NOT_SUPPORTED)])).read()
    assert gpu.utilization_pct is None and gpu.error is None


def test_a_lost_gpu_becomes_an_error_entry_and_the_others_are_still_read() -> None:
    nvml = FakeNvml([device(), device(util=LOST), device(handle=LOST)])
    gpus = NvmlReader(nvml).read()
    assert [g.error for g in gpus] == [None, "GPU is lost", "GPU is lost"]
    assert gpus[0].utilization_pct == 37.0
    assert gpus[1].name == "NVIDIA GeForce RTX 4090"  # what we knew before it failed
    for gpu in gpus:
        GpuReading.model_validate(gpu.as_json())


def test_any_other_per_device_error_is_an_error_entry_too() -> None:
    [gpu] = NvmlReader(FakeNvml([device(mem_used=RuntimeError("Xid 79"))])).read()
    assert gpu.error == "Xid 79"


@pytest.mark.parametrize("code", [12, 9])
def test_no_library_or_driver_means_no_gpu_data_with_a_note(code: int) -> None:
    reader = NvmlReader(FakeNvml([device()], init_error=code))
    assert reader.read() == []
    assert reader.note is not None and reader.note.startswith("no GPU data: ")


def test_no_pynvml_module_means_no_gpu_data() -> None:
    reader = NvmlReader(None)
    assert reader.read() == [] and reader.note == "no GPU data: pynvml is not installed"


def test_any_other_init_failure_is_a_failed_reading_and_is_retried() -> None:
    nvml = FakeNvml([device()], init_error=999)
    reader = NvmlReader(nvml)
    with pytest.raises(GpuReadError, match="NVML init failed"):
        reader.read()
    nvml.init_error = None
    assert len(reader.read()) == 1
    reader.read()
    assert nvml.inits == 2  # initialised once it worked, not on every read


def test_a_failing_device_count_is_a_failed_reading() -> None:
    nvml = FakeNvml([device()])
    nvml.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(FakeNVMLError(999))  # type: ignore[method-assign]
    with pytest.raises(GpuReadError):
        NvmlReader(nvml).read()


def test_gpu_sample_mirrors_the_shared_gpu_reading_model() -> None:
    assert [f.name for f in fields(GpuSample)] == list(GpuReading.model_fields)


def test_the_simulated_gpu_is_one_idle_gpu_until_the_sandbox_says_otherwise(tmp_path: Path) -> None:
    sim = tmp_path / "sim_gpu.json"
    reader = SimulatedReader(sim)
    [gpu] = reader.read()
    assert gpu.utilization_pct == 0.0 and gpu.error is None
    sim.write_text(json.dumps({"gpus": [{"name": "RTX 4090 (simulated)", "utilization_pct": 85}, {}]}))
    assert [g.utilization_pct for g in reader.read()] == [85.0, 0.0]


def test_a_simulated_error_makes_the_reading_fail(tmp_path: Path) -> None:
    sim = tmp_path / "sim_gpu.json"
    sim.write_text(json.dumps({"gpus": [], "error": "NVML: Unknown Error"}))
    with pytest.raises(GpuReadError, match="Unknown Error"):
        SimulatedReader(sim).read()
    sim.write_text("{not json")
    with pytest.raises(GpuReadError):
        SimulatedReader(sim).read()
