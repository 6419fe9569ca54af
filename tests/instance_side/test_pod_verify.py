"""Verification with a fake NVML module and a fake torch: every check passes, fails and skips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes.pod import make_pod

from gpuc.instance_side.verify import (
    MIN_BANDWIDTH_FRACTION,
    measure_bandwidth,
    parse_verdict,
    verify_machine,
)

MB = 1024 * 1024


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class Proc:
    pid: int
    usedGpuMemory: int | None  # pynvml spells it so


@dataclass
class FakeNvml:
    names: list[str] = field(default_factory=lambda: ["NVIDIA GeForce RTX 4090"])
    cuda: int = 12040
    procs: dict[int, list[Proc]] = field(default_factory=dict)
    init_error: int | None = None
    lost_gpu: bool = False
    NVMLError: type[Exception] = NVMLError

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        return None

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.lost_gpu:
            raise NVMLError(15)  # GPU is lost
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.names[handle].encode()

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Proc]:
        return self.procs.get(handle, [])

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[Proc]:
        raise NVMLError(3)  # not supported on this card

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda


class FakeTimer:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Tensor:
    def __init__(self, torch: FakeTorch, n: int) -> None:
        self.torch, self.n = torch, n

    def copy_(self, src: Tensor) -> Tensor:
        # One read and one write of every byte, at the card's speed.
        self.torch.timer.t += 2 * src.n / (self.torch.gbps * 1e9)
        self.torch.copies += 1
        return self


class FakeCuda:
    def __init__(self, available: bool) -> None:
        self.available = available
        self.synced = 0

    def is_available(self) -> bool:
        return self.available

    def synchronize(self) -> None:
        self.synced += 1

    def empty_cache(self) -> None:
        return None


@dataclass
class Version:
    cuda: str | None


class FakeTorch:
    uint8 = "uint8"
    __version__ = "2.4.0+cu124"

    def __init__(self, gbps: float = 900.0, cuda: str | None = "12.4", available: bool = True) -> None:
        self.gbps = gbps
        self.version = Version(cuda)
        self.cuda = FakeCuda(available)
        self.timer = FakeTimer()
        self.copies = 0
        self.allocated: list[tuple[int, Any, str]] = []

    def empty(self, n: int, *, dtype: Any, device: str) -> Tensor:
        self.allocated.append((n, dtype, device))
        return Tensor(self, n)

    def empty_like(self, t: Tensor) -> Tensor:
        return Tensor(self, t.n)


def run(nvml: FakeNvml | None, torch: FakeTorch | None, expect: str | None = "RTX 4090", count: int = 1) -> Any:
    timer = torch.timer if torch else FakeTimer()
    return verify_machine(expect, count, nvml=nvml, torch=torch, timer=timer, own_pid=999)


def by_name(verdict: Any) -> dict[str, str]:
    return {c.name: c.status for c in verdict.checks}


def test_a_good_machine_passes_every_check() -> None:
    torch = FakeTorch(gbps=900)
    verdict = run(FakeNvml(), torch)
    assert verdict.ok and by_name(verdict) == {
        "gpu_name": "pass",
        "foreign_processes": "pass",
        "cuda": "pass",
        "bandwidth": "pass",
    }
    bandwidth = next(c for c in verdict.checks if c.name == "bandwidth")
    assert bandwidth.data["measured_gbps"] == pytest.approx(900, rel=1e-6) and bandwidth.data["nominal_gbps"] == 1008
    assert torch.allocated[0] == (512 * MB, "uint8", "cuda") and torch.copies == 21  # warm-up + 20 timed


def test_a_different_card_fails_with_both_names() -> None:
    verdict = run(FakeNvml(names=["Tesla T4"]), FakeTorch(gbps=300))
    assert not verdict.ok and by_name(verdict)["gpu_name"] == "fail"
    assert "rented 'RTX 4090' but the pod has Tesla T4" in verdict.why()


def test_fewer_gpus_than_rented_fail() -> None:
    verdict = run(FakeNvml(), FakeTorch(), count=2)
    assert "rented 2 x 'RTX 4090' but only 1 are visible" in verdict.why()


def test_a_foreign_process_holding_gpu_memory_fails() -> None:
    nvml = FakeNvml(procs={0: [Proc(4242, 3 * 1024 * MB), Proc(999, MB)]})
    verdict = run(nvml, FakeTorch())
    assert by_name(verdict)["foreign_processes"] == "fail"
    assert "pid 4242 on GPU 0 (3072 MiB)" in verdict.why() and "999" not in verdict.why()


def test_a_driver_older_than_torchs_cuda_fails() -> None:
    verdict = run(FakeNvml(cuda=12020), FakeTorch(cuda="12.4"))
    assert "driver supports CUDA 12.2 but torch needs 12.4" in verdict.why()
    assert by_name(run(FakeNvml(cuda=12080), FakeTorch(cuda="12.4")))["cuda"] == "pass"


def test_a_cpu_only_torch_on_a_gpu_pod_fails() -> None:
    assert "CPU-only build" in run(FakeNvml(), FakeTorch(cuda=None)).why()


@pytest.mark.parametrize(("gbps", "status"), [(1008 * 0.61, "pass"), (1008 * 0.59, "fail"), (300, "fail")])
def test_bandwidth_passes_at_60_percent_of_nominal_and_fails_below(gbps: float, status: str) -> None:
    verdict = run(FakeNvml(), FakeTorch(gbps=gbps))
    assert by_name(verdict)["bandwidth"] == status
    if status == "fail":
        assert f"needs {MIN_BANDWIDTH_FRACTION:.0%}" in verdict.why() and "nominal 1008 GB/s" in verdict.why()


def test_bandwidth_is_bytes_read_plus_written_over_time() -> None:
    torch = FakeTorch(gbps=2000)
    assert measure_bandwidth(torch, timer=torch.timer, buffer_bytes=64 * MB, copies=5) == pytest.approx(2000)
    assert torch.cuda.synced == 2


def test_without_torch_the_torch_checks_skip_with_a_note() -> None:
    verdict = run(FakeNvml(), None)
    assert verdict.ok and by_name(verdict) == {
        "gpu_name": "pass",
        "foreign_processes": "pass",
        "cuda": "skip",
        "bandwidth": "skip",
    }
    assert all("torch is not installed" in c.detail for c in verdict.checks if c.status == "skip")


def test_torch_that_sees_no_device_skips_the_bandwidth_check() -> None:
    assert by_name(run(FakeNvml(), FakeTorch(available=False)))["bandwidth"] == "skip"


def test_a_card_missing_from_the_catalog_skips_the_bandwidth_check() -> None:
    verdict = run(FakeNvml(names=["NVIDIA RTX A6000"]), FakeTorch(), expect="RTX A6000")
    assert verdict.ok and by_name(verdict)["bandwidth"] == "skip"
    assert "no nominal bandwidth for 'NVIDIA RTX A6000'" in verdict.checks[3].detail


def test_no_gpu_skips_when_none_was_expected_and_fails_when_one_was_rented() -> None:
    absent = FakeNvml(init_error=12)  # NVML library not found
    verdict = run(absent, None, expect=None)
    assert verdict.ok and set(by_name(verdict).values()) == {"skip"}
    assert "NVML unavailable" in verdict.checks[1].detail
    rented = run(absent, None, expect="RTX 4090")
    assert not rented.ok and "rented 'RTX 4090' but no GPU is visible" in rented.why()
    assert not run(None, None).ok  # no pynvml at all


def test_a_lost_gpu_is_no_usable_gpu() -> None:
    verdict = run(FakeNvml(lost_gpu=True), FakeTorch())
    assert not verdict.ok and "NVML read failed" in verdict.why()


def test_the_verdict_is_one_json_line_the_laptop_can_find() -> None:
    verdict = run(FakeNvml(names=["Tesla T4"]), None)
    text = f"some log line\n{verdict.dumps()}\ngpuc: a trailing note\n"
    parsed = parse_verdict(text)
    assert parsed is not None and parsed["ok"] is False and parsed["gpus"] == ["Tesla T4"]
    assert [c["status"] for c in parsed["checks"]] == ["fail", "pass", "skip", "skip"]
    assert parse_verdict("no json here\n{not json}\n") is None


def test_the_command_prints_the_verdict_and_keeps_it_on_the_pod(tmp_path: Path) -> None:
    paths = make_pod(tmp_path / "pod")
    env = {"PATH": os.environ["PATH"], "GPUC_POD_ROOT": str(paths.root)}
    done = subprocess.run(
        [sys.executable, "-m", "gpuc.instance_side", "verify"], env=env, capture_output=True, text=True
    )
    # This machine: no GPU expected, none found (or found: then it is checked for real).
    verdict = parse_verdict(done.stdout)
    assert verdict is not None and done.returncode == (0 if verdict["ok"] else 1)
    assert json.loads(paths.verdict.read_text()) == verdict
    assert "gpuc: verify gpu_name: skip - no --expect-gpu given" in done.stderr
    rented = subprocess.run(
        [sys.executable, "-m", "gpuc.instance_side", "verify", "--expect-gpu", "H100 80GB SXM"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert rented.returncode == 1 and parse_verdict(rented.stdout)["ok"] is False  # type: ignore[index]
