"""What `up` hands to a pod: a non-secret config file and a mode-600 secrets file, both under
`<pod root>/workspace/.gpuc/`. Provider env vars are never used for secrets: RunPod and Vast echo a
pod's env back in every listing.

On a rented pod the root is `/` (so the workspace is `/workspace`, the provider's volume); a local
sandbox pod has its own root directory. `GPUC_POD_ROOT` says which.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from gpuc.core.models import Strict
from gpuc.core.podpaths import POD_ROOT_ENV, TOKEN_ENV, PodPaths
from gpuc.core.settings import Settings

# PodPaths and the env names live in core.podpaths (stdlib only, for the pod's agent); re-exported here.
__all__ = [
    "ACCOUNT_KEYS",
    "POD_ROOT_ENV",
    "TOKEN_ENV",
    "PodConfig",
    "PodPaths",
    "pod_secrets",
    "render_env_file",
]

# Keys that act on the whole account never go onto a pod: the pod destroys itself with the key the
# platform scopes to it (RUNPOD_API_KEY inside a RunPod pod is that pod-scoped key, injected by RunPod).
ACCOUNT_KEYS = frozenset({"RUNPOD_API_KEY", "VAST_API_KEY", "GPUC_ADMIN_TOKEN"})


class PodConfig(Strict):
    pod_id: str
    provider: str
    experiment: str
    run_id: str
    functions_url: str
    gpu_expected: str | None = None
    price_per_hour: float | None = None
    heartbeat_interval_s: float = Field(60.0, gt=0)
    idle_check_interval_s: float = Field(60.0, gt=0)
    idle_gpu_pct: float = 5.0
    idle_warn_s: float = 15 * 60.0
    idle_destroy_s: float = 20 * 60.0
    ssh_input_window_s: float = 10 * 60.0
    sync_interval_s: float = 30 * 60.0
    nag_interval_s: float = 60 * 60.0
    idle_cpu_floor_s: float = 0.1  # progress floors: see core.settings
    idle_io_floor_bytes: float = 16 * 1024.0
    results_bucket: str | None = None
    s3_endpoint_url: str | None = None
    git_remote: str | None = None
    simulated_gpu: bool = False  # local sandbox: readings come from the sandbox's sim file
    local_home: str | None = None  # local sandbox only: where the local provider keeps its state
    deadline_at: float | None = None  # the pod's end (`up --max-hours`), on the watchdog's clock

    @classmethod
    def for_pod(
        cls, settings: Settings, *, pod_id: str, provider: str, experiment: str, run_id: str, **extra: object
    ) -> PodConfig:
        return cls(
            pod_id=pod_id,
            provider=provider,
            experiment=experiment,
            run_id=run_id,
            functions_url=settings.functions_url,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            idle_check_interval_s=settings.idle_check_interval_s,
            idle_gpu_pct=settings.idle_gpu_pct,
            idle_warn_s=settings.idle_warn_s,
            idle_destroy_s=settings.idle_destroy_s,
            ssh_input_window_s=settings.ssh_input_window_s,
            sync_interval_s=settings.sync_interval_s,
            nag_interval_s=settings.nag_interval_s,
            idle_cpu_floor_s=settings.idle_cpu_floor_s,
            idle_io_floor_bytes=settings.idle_io_floor_bytes,
            results_bucket=settings.results_bucket,
            s3_endpoint_url=settings.s3_endpoint_url,
            git_remote=settings.git_remote,
            **extra,
        )


def pod_secrets(settings_env: Mapping[str, str], token: str) -> dict[str, str]:
    """The secrets a pod gets: the user's .env minus account-wide keys, plus the pod's own token."""
    out = {k: v for k, v in settings_env.items() if k not in ACCOUNT_KEYS and v}
    out[TOKEN_ENV] = token
    return out


def render_env_file(values: Mapping[str, str]) -> str:
    lines = ["# gpuc pod secrets: mode 600, never printed, never in argv"]
    for key, value in sorted(values.items()):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n"
