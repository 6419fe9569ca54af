"""A pod as gpuc reads it from a provider, and the marks that say gpuc started it. Pure data, and no
pydantic: `gpuc ls` builds these from both providers' listings many times a day. A Pod is never parsed
from outside: the providers' own wire shapes (the ProviderAnswer models, core/providers/common.py) are
mapped onto it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gpuc.core.podpaths import RESUME_ENV as RESUME_ENV  # the pod reads it without this module (3.9)

PodStatus = Literal["provisioning", "running", "stopped", "paused", "exited", "terminated", "unknown"]
POD_STATUSES: tuple[PodStatus, ...] = (
    "provisioning",
    "running",
    "stopped",
    "paused",
    "exited",
    "terminated",
    "unknown",
)
# Ownership marker the reaper relies on: the name prefix AND this env var on the pod.
NAME_PREFIX = "gpuc-"
OWNER_ENV = "GPUC_MANAGED"
# Which watchdog started the pod (core.signing.watchdog_id), beside the ownership marker where the provider
# shows it: a watchdog never takes a pod marked for another one as its stray (functions/reaper/owners.py).
WATCHDOG_ENV = "GPUC_WATCHDOG"
RUN_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{3,40}$")


def new_run_id() -> str:
    import secrets  # lazy: `up` names a run, `ls` (which imports this module) never does

    return secrets.token_hex(5)


def pod_name(run_id: str) -> str:
    return f"{NAME_PREFIX}{run_id}"


def is_gpuc_name(name: str | None) -> bool:
    return bool(name) and str(name).startswith(NAME_PREFIX) and bool(RUN_ID_RE.match(str(name)[len(NAME_PREFIX) :]))


@dataclass(frozen=True, kw_only=True)
class Pod:
    provider: str
    id: str
    name: str
    experiment: str | None = None
    status: PodStatus
    raw_status: str = ""
    gpu: str | None = None
    gpu_count: int = 1
    price_per_hour: float | None = None
    created_at: float | None = None
    uptime_s: float | None = None
    managed: bool = False
    watchdog: str | None = None  # WATCHDOG_ENV: the watchdog that started it; None on an older pod
    interruptible: bool = False
    ssh_host: str | None = None
    ssh_port: int | None = None
    gpu_util_pct: float | None = None  # the provider's own reading: the reaper's second witness
    # What a stopped pod keeps and still bills: its disk's size and price, where the provider says (F16).
    disk_gb: float | None = None
    disk_usd_gb_month: float | None = None

    def __post_init__(self) -> None:
        # Every provider maps its own words onto these; a word outside them is a bug in that mapping, and
        # a pod read as a status it is not could be judged wrongly (destroyed, or left billing).
        if self.status not in POD_STATUSES:
            raise ValueError(f"pod status {self.status!r} is not one of {', '.join(POD_STATUSES)}")

    @property
    def alive(self) -> bool:
        return self.status not in ("terminated",)
