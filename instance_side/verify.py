"""`python -m gpuc.instance_side verify --expect-gpu NAME`: is this the machine we are paying for?

Four checks, each pass / fail / skip, printed as one JSON verdict (and kept in `verify.json`):
- gpu_name: every visible GPU is the rented type (catalog name matching), at least as many as rented.
  Renting a GPU and finding none is a failure, not a skip.
- foreign_processes: no process already holds GPU memory (a host that oversold the card).
- cuda: the driver's CUDA is at least the CUDA torch was built for (else kernels fail to load).
- bandwidth: device-to-device copies of a 512 MB buffer (one read + one write per byte), timed, against
  the catalog's nominal figure: >= 60 % passes. A throttled or mislabeled card fails here.

Without torch, or without any GPU (and none expected), the checks that need them are skipped with a
note saying why. `up` destroys a pod whose verdict fails (client/onpod/provision.py). The NVML module and
torch are parameters, so tests hand in fakes; verification runs once per pod, so importing the
catalog (and pydantic, if it came to that) costs nothing that matters.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuc.core.catalog import find_gpu, gpu_matches

CheckStatus = Literal["pass", "fail", "skip"]
MIN_BANDWIDTH_FRACTION = 0.60
BUFFER_BYTES = 512 * 1024 * 1024
COPIES = 20


@dataclass(frozen=True)
class Check:
    name: str
    status: CheckStatus
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """The four checks of one machine and the GPUs it showed: `up` keeps the pod only when it is ok."""

    checks: tuple[Check, ...]
    gpus: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def why(self) -> str:
        return "; ".join(c.detail for c in self.failures())

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "gpus": list(self.gpus),
            "checks": [
                {"name": c.name, "status": c.status, "detail": c.detail, **({"data": c.data} if c.data else {})}
                for c in self.checks
            ],
        }

    def dumps(self) -> str:
        return json.dumps(self.as_json(), separators=(",", ":"), sort_keys=True)


def parse_verdict(text: str) -> dict[str, Any] | None:
    """The verdict from a command's output (the last line that is a JSON object with "checks")."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "checks" in data and "ok" in data:
            return data
    return None


# -- reading the GPUs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Device:
    index: int
    name: str
    processes: tuple[tuple[int, int | None], ...]  # (pid, bytes used or None)


@dataclass(frozen=True)
class Machine:
    devices: tuple[Device, ...]
    driver_cuda: tuple[int, int] | None
    note: str | None  # why there are no devices, when there are none


def read_machine(nvml: Any | None) -> Machine:
    if nvml is None:
        return Machine((), None, "pynvml is not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return Machine((), None, f"NVML unavailable ({_describe(exc)})")
    try:
        count = int(nvml.nvmlDeviceGetCount())
        devices = tuple(_device(nvml, i) for i in range(count))
        driver = _optional(lambda: _cuda_pair(int(nvml.nvmlSystemGetCudaDriverVersion())))
    except Exception as exc:  # a lost GPU (Xid) reads as "no usable GPU": the name check says so
        return Machine((), None, f"NVML read failed ({_describe(exc)})")
    finally:
        _optional(nvml.nvmlShutdown)
    return Machine(devices, driver, None if devices else "NVML reports no GPU")


def _device(nvml: Any, index: int) -> Device:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    raw = nvml.nvmlDeviceGetName(handle)
    name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    procs: list[tuple[int, int | None]] = []
    for getter in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
        for proc in _optional(lambda: getter(handle)) or ():  # noqa: B023 - called at once
            used = getattr(proc, "usedGpuMemory", None)
            procs.append((int(proc.pid), int(used) if isinstance(used, int) else None))
    return Device(index, name, tuple(sorted(set(procs))))


def _cuda_pair(raw: int) -> tuple[int, int]:
    """NVML: 1000 * major + 10 * minor (12040 -> (12, 4))."""
    return raw // 1000, (raw % 1000) // 10


def _parse_cuda(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        major, minor = (int(x) for x in text.split(".")[:2])
    except ValueError:
        return None
    return major, minor


def _optional(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


def _describe(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__)[:200]


# -- the checks ---------------------------------------------------------------------------------------
def check_gpu_name(machine: Machine, expect: str | None, expect_count: int) -> Check:
    if not expect:
        return Check("gpu_name", "skip", "no --expect-gpu given")
    if not machine.devices:
        return Check("gpu_name", "fail", f"rented {expect!r} but no GPU is visible: {machine.note}")
    wrong = [d.name for d in machine.devices if not gpu_matches(expect, d.name)]
    if wrong:
        return Check("gpu_name", "fail", f"rented {expect!r} but the pod has {', '.join(wrong)}")
    if len(machine.devices) < expect_count:
        return Check(
            "gpu_name", "fail", f"rented {expect_count} x {expect!r} but only {len(machine.devices)} are visible"
        )
    return Check("gpu_name", "pass", f"{len(machine.devices)} x {machine.devices[0].name}")


def check_foreign_processes(machine: Machine, own_pid: int) -> Check:
    if not machine.devices:
        return Check("foreign_processes", "skip", f"no GPU: {machine.note}")
    foreign = [(d.index, pid, used) for d in machine.devices for pid, used in d.processes if pid != own_pid]
    if not foreign:
        return Check("foreign_processes", "pass", "no process holds GPU memory")
    shown = ", ".join(
        f"pid {pid} on GPU {i}" + (f" ({used / 2**20:.0f} MiB)" if used is not None else "")
        for i, pid, used in foreign[:5]
    )
    return Check(
        "foreign_processes", "fail", f"GPU memory already in use by another process: {shown}", {"count": len(foreign)}
    )


def check_cuda(machine: Machine, torch: Any | None) -> Check:
    if not machine.devices:
        return Check("cuda", "skip", f"no GPU: {machine.note}")
    if torch is None:
        return Check("cuda", "skip", "torch is not installed: nothing to compare the driver with")
    built = getattr(getattr(torch, "version", None), "cuda", None)
    wanted = _parse_cuda(built)
    if wanted is None:
        return Check("cuda", "fail", f"torch {getattr(torch, '__version__', '?')} is a CPU-only build on a GPU pod")
    if machine.driver_cuda is None:
        return Check("cuda", "fail", "the driver's CUDA version cannot be read (NVML)")
    have = ".".join(map(str, machine.driver_cuda))
    data = {"driver_cuda": have, "torch_cuda": built}
    if machine.driver_cuda < wanted:
        return Check("cuda", "fail", f"driver supports CUDA {have} but torch needs {built}", data)
    return Check("cuda", "pass", f"driver CUDA {have} >= torch CUDA {built}", data)


def check_bandwidth(
    machine: Machine,
    torch: Any | None,
    *,
    timer: Callable[[], float] = time.perf_counter,
    buffer_bytes: int = BUFFER_BYTES,
    copies: int = COPIES,
) -> Check:
    if not machine.devices:
        return Check("bandwidth", "skip", f"no GPU: {machine.note}")
    if torch is None:
        return Check("bandwidth", "skip", "torch is not installed: cannot measure memory bandwidth")
    if not torch.cuda.is_available():
        return Check("bandwidth", "skip", "torch sees no CUDA device: cannot measure memory bandwidth")
    name = machine.devices[0].name
    spec = find_gpu(name)
    if spec is None:
        return Check("bandwidth", "skip", f"no nominal bandwidth for {name!r} in the catalog")
    gbps = measure_bandwidth(torch, timer=timer, buffer_bytes=buffer_bytes, copies=copies)
    fraction = gbps / spec.bandwidth_gbps
    data = {"measured_gbps": round(gbps, 1), "nominal_gbps": spec.bandwidth_gbps, "fraction": round(fraction, 3)}
    text = f"{gbps:.0f} GB/s measured, {fraction:.0%} of the {spec.key}'s nominal {spec.bandwidth_gbps:.0f} GB/s"
    if fraction < MIN_BANDWIDTH_FRACTION:
        return Check(
            "bandwidth", "fail", f"memory bandwidth too low: {text} (needs {MIN_BANDWIDTH_FRACTION:.0%})", data
        )
    return Check("bandwidth", "pass", text, data)


def measure_bandwidth(
    torch: Any, *, timer: Callable[[], float], buffer_bytes: int = BUFFER_BYTES, copies: int = COPIES
) -> float:
    """GB/s (decimal, as the catalog) of device-to-device copies: each byte read once, written once."""
    src = torch.empty(buffer_bytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    try:
        dst.copy_(src)  # warm-up: first-touch allocation and clocks ramping up are not the card's speed
        torch.cuda.synchronize()
        start = timer()
        for _ in range(copies):
            dst.copy_(src)
        torch.cuda.synchronize()
        elapsed = max(timer() - start, 1e-9)
    finally:
        del src, dst
        _optional(torch.cuda.empty_cache)
    return 2 * buffer_bytes * copies / elapsed / 1e9


def verify_machine(
    expect_gpu: str | None,
    expect_count: int = 1,
    *,
    nvml: Any | None,
    torch: Any | None,
    timer: Callable[[], float] = time.perf_counter,
    buffer_bytes: int = BUFFER_BYTES,
    own_pid: int | None = None,
) -> Verdict:
    machine = read_machine(nvml)
    # Processes first: the bandwidth test's own allocation must not count as a foreign process.
    checks = (
        check_gpu_name(machine, expect_gpu, expect_count),
        check_foreign_processes(machine, os.getpid() if own_pid is None else own_pid),
        check_cuda(machine, torch),
        check_bandwidth(machine, torch, timer=timer, buffer_bytes=buffer_bytes),
    )
    return Verdict(checks, tuple(d.name for d in machine.devices))


def import_optional(name: str) -> Any | None:
    try:
        return __import__(name)
    except ImportError:
        return None
