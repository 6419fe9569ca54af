"""What `up` hands to a pod: a non-secret config file and a mode-600 secrets file, both under
`<pod root>/workspace/.gpuc/`. Provider env vars are never used for secrets: RunPod and Vast echo a
pod's env back in every listing.

On a rented pod the root is `/` (so the workspace is `/workspace`, the provider's volume); a local
sandbox pod has its own root directory. `GPUC_POD_ROOT` says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from gpuc.core.models import Strict
from gpuc.core.podpaths import POD_ROOT_ENV, TOKEN_ENV, PodPaths
from gpuc.core.podsecrets import (
    GIT_TOKEN_ENV,
    HF_TOKEN_ENV,
    NEVER_ON_POD,
    PodSecrets,
    choose,
    pod_secrets,
    render_env_file,
)
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

# PodPaths and the env names live in core.podpaths, pod_secrets and render_env_file in core.podsecrets (stdlib
# only, for the pod's agent and its own boot); re-exported here.
__all__ = [
    "ACCOUNT_KEYS",
    "POD_ROOT_ENV",
    "TOKEN_ENV",
    "PodConfig",
    "PodPaths",
    "PodSecrets",
    "choose_pod_secrets",
    "pod_secrets",
    "render_env_file",
]

# What never goes onto a pod (core.podsecrets says why, name by name): the account keys (the pod destroys
# itself with the key the platform scopes to it: RUNPOD_API_KEY inside a RunPod pod is that pod-scoped key,
# injected by RunPod), the admin token, the notification channels, the webhook secret, the deploy keys.
ACCOUNT_KEYS = frozenset(NEVER_ON_POD)


class PodConfig(Strict):
    pod_id: str
    provider: str
    experiment: str
    run_id: str
    watchdog_url: str
    gpu_expected: str | None = None
    gpu_count: int = Field(1, ge=1, le=8)  # the GPUs rented: the pod's own verification expects every one
    price_per_hour: float | None = None
    heartbeat_interval_s: float = Field(60.0, gt=0)
    idle_check_interval_s: float = Field(60.0, gt=0)
    idle_gpu_pct: float = 5.0
    idle_warn_s: float = 15 * 60.0
    idle_destroy_s: float = 20 * 60.0
    ssh_input_window_s: float = 10 * 60.0
    sync_interval_s: float = 10 * 60.0  # the periodic results push; 0: none
    sync_settle_s: float = Field(5.0, ge=0)  # modified this recently: still being written (core.settings)
    nag_interval_s: float = 60 * 60.0
    idle_cpu_floor_s: float = 0.1  # progress floors: see core.settings
    idle_io_floor_bytes: float = 16 * 1024.0
    kept_window_s: float = Field(2 * 3600.0, gt=0)  # kept for its results this long, then stopped (F16)
    results_bucket: str | None = None
    s3_endpoint_url: str | None = None
    git_remote: str | None = None
    simulated_gpu: bool = False  # local sandbox: readings come from the sandbox's sim file
    local_home: str | None = None  # local sandbox only: where the local provider keeps its state
    deadline_at: float | None = None  # the pod's end (`up --max-hours`), on the watchdog's clock
    deadline_warn_s: float = Field(15 * 60.0, ge=0)  # notified this long ahead
    deadline_lead_s: float = Field(2 * 60.0, ge=0)  # the ending starts this long ahead: its sync ends before
    notify_start: bool = False  # push "agent start" to the phone (GPUC_NOTIFY_START); always in the pod's log
    warm_s: float = Field(0.0, ge=0)  # `up --warm`: a job's end keeps the pod; idle this long, it ends

    @classmethod
    def for_pod(
        cls, settings: Settings, *, pod_id: str, provider: str, experiment: str, run_id: str, **extra: object
    ) -> PodConfig:
        return cls(
            pod_id=pod_id,
            provider=provider,
            experiment=experiment,
            run_id=run_id,
            watchdog_url=settings.watchdog_url,
            heartbeat_interval_s=settings.heartbeat_interval_s,
            idle_check_interval_s=settings.idle_check_interval_s,
            idle_gpu_pct=settings.idle_gpu_pct,
            idle_warn_s=settings.idle_warn_s,
            idle_destroy_s=settings.idle_destroy_s,
            ssh_input_window_s=settings.ssh_input_window_s,
            sync_interval_s=settings.sync_interval_s,
            sync_settle_s=settings.sync_settle_s,
            nag_interval_s=settings.nag_interval_s,
            deadline_warn_s=settings.deadline_warn_s,
            deadline_lead_s=settings.deadline_lead_s,
            idle_cpu_floor_s=settings.idle_cpu_floor_s,
            idle_io_floor_bytes=settings.idle_io_floor_bytes,
            kept_window_s=settings.kept_window_s,
            notify_start=settings.notify_start,
            results_bucket=settings.results_bucket,
            s3_endpoint_url=settings.s3_endpoint_url,
            git_remote=settings.git_remote,
            **extra,
        )


def choose_pod_secrets(
    settings: Settings, env_file: Mapping[str, str], environ: Mapping[str, str], asked: Sequence[str] = ()
) -> PodSecrets:
    """The allowlist (core.podsecrets): HF_TOKEN; a git remote's token; what GPUC_POD_SECRETS and `up --env`
    name, from the environment, then `.env`. Never the S3 key of an s3:// destination: the pod gets grants for
    its own run's prefix from the watchdog instead (functions/grants.py)."""

    def value(secret: SecretStr | None) -> str | None:
        return secret.get_secret_value() if secret is not None else None

    builtin: dict[str, tuple[str, str | None]] = {HF_TOKEN_ENV: ("the job", value(settings.hf_token))}
    if settings.git_remote:
        builtin[GIT_TOKEN_ENV] = ("the git remote", value(settings.git_token))
    return choose(builtin, settings.pod_secrets, (environ, env_file), asked)
