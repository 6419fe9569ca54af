"""RunPod's pods as REST v2 answers them (`/v2/pods`), read into gpuc's Pod: the wire shapes, checked where the
body enters, and the mapping (status, ssh endpoint, GPU use, a stopped pod's price)."""

from __future__ import annotations

from typing import Any, TypeVar

from gpuc.core.clock import parse_iso
from gpuc.core.pod import Pod, PodStatus
from gpuc.core.providers.common import Number, ProviderAnswer, Whole, experiment_of, is_managed, parse_wire, watchdog_of

PROVIDER = "runpod"


V2_STATUS: dict[str, PodStatus] = {
    "PROVISIONING": "provisioning",
    "STARTING": "provisioning",
    "RUNNING": "running",
    "EXITED": "stopped",
    "ERROR": "exited",
    "TERMINATED": "terminated",
}
# RunPod's published price of a stopped pod's volume [rp-docs billing.mdx]; the container disk is wiped on stop.
VOLUME_STOPPED_USD_GB_MONTH = 0.20
HOURS_PER_MONTH = 30 * 24  # RunPod does not state the hours in its month (UNCONFIRMED)
GPU_VENDOR_PREFIXES = ("NVIDIA GeForce ", "NVIDIA ", "AMD ")


# ---- wire shapes: what we read from RunPod, validated where the body enters --------------------------


class V2Port(ProviderAnswer):
    private: Whole | None = None
    public: Whole | None = None
    type: str | None = None
    ip: str | None = None


class V2RuntimeGpu(ProviderAnswer):
    id: str | None = None
    util: Number | None = None


class V2Runtime(ProviderAnswer):
    uptime: Number | None = None
    ports: list[V2Port] | None = None
    gpus: list[V2RuntimeGpu] | None = None


class V2Gpu(ProviderAnswer):
    id: str | None = None
    count: Whole | None = None


class V2Endpoint(ProviderAnswer):
    host: str | None = None
    port: Whole | None = None


class V2Ssh(ProviderAnswer):
    direct: V2Endpoint | None = None


class V2Persistent(ProviderAnswer):
    size: Number | None = None


class V2Mounts(ProviderAnswer):
    persistent: V2Persistent | None = None


class V2Pod(ProviderAnswer):
    id: str
    name: str | None = None
    status: str | None = None
    env: dict[str, Any] | None = None
    gpu: V2Gpu | None = None
    cost: Number | None = None
    createdAt: str | None = None
    runtime: V2Runtime | None = None
    ssh: V2Ssh | None = None
    mounts: V2Mounts | None = None


W = TypeVar("W", bound=ProviderAnswer)


def parse(model: type[W], value: Any, what: str) -> W:
    # The error names the field, never the value (it may be an env).
    return parse_wire(model, value, what, provider=PROVIDER, api="RunPod")


# ---- mapping onto our models ----------------------------------------------------------------------


def status_from_v2(status: str | None) -> PodStatus:
    return V2_STATUS.get(status or "", "unknown")


def ssh_from_v2(pod: V2Pod) -> tuple[str | None, int | None]:
    for port in (pod.runtime.ports or []) if pod.runtime else []:
        if port.private == 22 and port.type == "tcp" and port.ip and port.public:
            return port.ip, port.public
    direct = pod.ssh.direct if pod.ssh else None
    return (direct.host, direct.port) if direct and direct.host and direct.port else (None, None)


def gpu_util(runtime: V2Runtime | None) -> float | None:
    # The busiest GPU: the reaper's second witness must not read one idle GPU as an idle pod.
    readings = [g.util for g in (runtime.gpus or []) if g.util is not None] if runtime else []
    return max(readings) if readings else None


def gpu_display(gpu_id: str | None) -> str | None:
    """ "NVIDIA GeForce RTX 4090" -> "RTX 4090": v2 pods carry the catalog id, people read the short name."""
    if not gpu_id:
        return None
    for prefix in GPU_VENDOR_PREFIXES:
        if gpu_id.startswith(prefix):
            return gpu_id[len(prefix) :]
    return gpu_id


def v2_env(pod: V2Pod) -> dict[str, str]:
    return {str(k): str(v) for k, v in (pod.env or {}).items()}


def volume_gb(pod: V2Pod) -> float | None:
    return pod.mounts.persistent.size if pod.mounts and pod.mounts.persistent else None


def hourly_price(status: PodStatus, cost: float | None, volume: float | None) -> float | None:
    """v2 answers `cost` 0.0 once a pod is EXITED, yet its volume bills on: show what it still costs."""
    if status == "stopped" and volume is not None:
        return round(volume * VOLUME_STOPPED_USD_GB_MONTH / HOURS_PER_MONTH, 6)
    return cost


def pod_from_v2(pod: V2Pod) -> Pod:
    env = v2_env(pod)
    host, port = ssh_from_v2(pod)
    status = status_from_v2(pod.status)
    volume = volume_gb(pod)
    return Pod(
        provider=PROVIDER,
        id=pod.id,
        name=pod.name or "",
        experiment=experiment_of(env),
        status=status,
        raw_status=pod.status or "?",
        gpu=gpu_display(pod.gpu.id if pod.gpu else None),
        gpu_count=pod.gpu.count if pod.gpu and pod.gpu.count is not None else 1,
        price_per_hour=hourly_price(status, pod.cost, volume),
        created_at=created_at(pod),
        uptime_s=pod.runtime.uptime if pod.runtime else None,
        managed=is_managed(pod.name, env),
        watchdog=watchdog_of(env),
        ssh_host=host,
        ssh_port=port,
        gpu_util_pct=gpu_util(pod.runtime),
        disk_gb=volume,
        disk_usd_gb_month=VOLUME_STOPPED_USD_GB_MONTH if volume is not None else None,
    )


def created_at(pod: V2Pod) -> float | None:
    if not pod.createdAt:
        return None
    try:
        return parse_iso(pod.createdAt)
    except ValueError:
        return None


def parse_v2_pod(value: Any) -> Pod:
    return pod_from_v2(parse(V2Pod, value, "v2 pod"))
