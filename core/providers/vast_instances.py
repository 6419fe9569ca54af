"""Vast's instances (the rows of the v1 list, the instance show) read into gpuc's Pod: the wire shapes, checked
where the body enters, the status a host reports mapped onto gpuc's, and the account's spend rate."""

from __future__ import annotations

from typing import Any, TypeVar

from gpuc.core.pod import Pod, PodStatus
from gpuc.core.providers.answers import VAST_RELEASED
from gpuc.core.providers.common import (
    Number,
    ProviderAnswer,
    Whole,
    env_from_pairs,
    experiment_of,
    is_managed,
    parse_wire,
    watchdog_of,
)

PROVIDER = "vast"


# actual_status is what the host reports; intended_status what the user asked for; cur_state the contract.
# unknown (no heartbeat) and offline (host gone) are NOT exited: the reaper only alerts on them.
ACTUAL_STATUS: dict[str, PodStatus] = {
    "running": "running",
    "created": "provisioning",
    "loading": "provisioning",
    "scheduling": "provisioning",
    "rebooting": "provisioning",
    "stopped": "stopped",
    "frozen": "paused",  # paused with memory kept: the GPU still bills
    "exited": "exited",
    "unknown": "unknown",
    "offline": "unknown",
}
PARKED: tuple[PodStatus, ...] = ("stopped", "paused", "exited")


class VastInstance(ProviderAnswer):
    id: Whole
    actual_status: str | None = None
    intended_status: str | None = None
    cur_state: str | None = None
    status_msg: str | None = None
    label: str | None = None
    extra_env: list[Any] | None = None
    gpu_name: str | None = None
    num_gpus: Whole | None = None
    gpu_util: Number | None = None
    dph_total: Number | None = None
    storage_total_cost: Number | None = None
    disk_space: Number | None = None  # GB
    storage_cost: Number | None = None  # $/GB/month: what the disk bills, stopped too
    start_date: Number | None = None
    uptime_mins: Number | None = None
    is_bid: bool | None = None
    ssh_host: str | None = None
    ssh_port: Whole | None = None
    public_ipaddr: str | None = None
    # an object of port mappings on a running host, a list on some (UNCONFIRMED which): both are read
    ports: dict[str, Any] | list[Any] | None = None


class VastUser(ProviderAnswer):
    credit: Number


class VastSshKey(ProviderAnswer):
    """One row of GET /api/v0/ssh/ (show_ssh_keys.yaml)."""

    key: str
    deleted_at: str | None = None


W = TypeVar("W", bound=ProviderAnswer)


def parse(model: type[W], value: Any, what: str) -> W:
    # The error names the field, never the value (/users/current holds the key).
    return parse_wire(model, value, what, provider=PROVIDER, api="Vast.ai")


# ---- mapping onto our models ----------------------------------------------------------------------


def status_of(inst: VastInstance) -> PodStatus:
    if inst.cur_state == VAST_RELEASED:
        return "terminated"  # the contract is released: destroyed
    actual = inst.actual_status
    if actual is None or actual == "created":
        if inst.status_msg and "OCI runtime create failed" in inst.status_msg:
            return "exited"  # never starts: dstack fails on this too
        return "stopped" if inst.intended_status == "stopped" else "provisioning"
    status = ACTUAL_STATUS.get(actual, "unknown")
    if status == "stopped" and inst.is_bid and inst.intended_status == "running":
        return "paused"  # outbid: Vast pauses it, still wanting to run (field signature UNCONFIRMED)
    return status


def ssh_of(inst: VastInstance) -> tuple[str | None, int | None]:
    """The direct port when the host maps 22/tcp, else Vast's ssh proxy."""
    if isinstance(inst.ports, dict) and inst.public_ipaddr:
        mappings = inst.ports.get("22/tcp")
        if isinstance(mappings, list) and mappings and isinstance(mappings[0], dict):
            port = str(mappings[0].get("HostPort", ""))
            if port.isdigit():
                return inst.public_ipaddr, int(port)
    if inst.ssh_host and inst.ssh_port:
        return inst.ssh_host, inst.ssh_port
    return None, None


def busy_pct(util: float | None) -> float | None:
    """`gpu_util` as a percent. show_instance.yaml calls it "a fraction"; the official CLI prints it as a
    percent ("Util. %"). A reading in (0, 1] fits both and is taken as the fraction, the busier reading:
    the provider's GPU reading only ever holds off a kill (the reaper's busy veto), so an ambiguous one can
    hold one off, never cause one."""
    if util is not None and 0 < util <= 1:
        return util * 100
    return util


def pod_from_instance(inst: VastInstance) -> Pod:
    env = env_from_pairs(inst.extra_env or [])
    host, port = ssh_of(inst)
    return Pod(
        provider=PROVIDER,
        id=str(inst.id),
        name=inst.label or "",
        experiment=experiment_of(env),
        status=status_of(inst),
        raw_status=f"{inst.actual_status}/{inst.intended_status}/{inst.cur_state}",
        gpu=inst.gpu_name,
        gpu_count=inst.num_gpus if inst.num_gpus is not None else 1,
        price_per_hour=inst.dph_total,
        created_at=inst.start_date,
        uptime_s=inst.uptime_mins * 60 if inst.uptime_mins is not None else None,
        managed=is_managed(inst.label, env),
        watchdog=watchdog_of(env),
        interruptible=bool(inst.is_bid),
        ssh_host=host,
        ssh_port=port,
        gpu_util_pct=busy_pct(inst.gpu_util),
        disk_gb=inst.disk_space,
        disk_usd_gb_month=inst.storage_cost,
    )


def parse_instance(value: Any) -> Pod:
    return pod_from_instance(parse(VastInstance, value, "instance"))


def spend_rate(instances: list[VastInstance]) -> float:
    """Σ dph_total of live instances; a parked one bills its storage only (its full rate when unknown)."""
    total = 0.0
    for inst in instances:
        status = status_of(inst)
        if status == "terminated":
            continue
        parked = status in PARKED and inst.storage_total_cost is not None
        total += (inst.storage_total_cost if parked else inst.dph_total) or 0.0
    return total
