"""`up --interruptible --recover N`: what the laptop does so the watchdog can re-rent the run after an outbid
and the new pod can boot with no laptop (docs/interruptible.md; the watchdog's side: functions/reaper/).

Refused before any money (check_recovery, check_recovery_protocol), each with its fix:
- `--recover` without `--interruptible`, or `--recover-on-demand` without `--recover`;
- a provider other than Vast (RunPod has no interruptible API: runpodctl PR #267);
- a results destination a pod with no laptop cannot resume from: only an s3:// or file:// bucket, and no
  GPUC_GIT_REMOTE (the pod would push its small files there, and restore reads the bucket only);
- a watchdog older than RECOVERY_PROTOCOL (it would not keep the run, or refuse the registration).

The boot kit (write_kit) is written BEFORE the create, at `<bucket>/.gpuc-kits/<run_id>/`: gpuc's pod wheel
(the one provisioning builds) and the project tar (the one `up` uploads). A kit that cannot be written
refuses `up`: nothing is rented. The kit holds the user's code, at the user's own bucket; its URLs (file://,
or presigned GETs living the run's hours + 1 h) go to the watchdog in the registration's BootKit, never in
the pod's provider-visible env.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from gpuc.core.budget import RunEnvelope
from gpuc.core.errors import ConfigError, GpucError

if TYPE_CHECKING:
    from gpuc.client.onpod.bundle import Bundle as Wheel
    from gpuc.client.onpod.provision import Caller
    from gpuc.client.pods.plan import UpOptions
    from gpuc.core.api import BootKit, RecoveryRequest, StatusResponse
    from gpuc.core.models import PodSpec
    from gpuc.core.pod import Pod
    from gpuc.core.settings import Settings

RECOVERABLE = ("vast",)
KITS_DIR = ".gpuc-kits"
PROJECT_NAME = "project.tar.gz"
PRESIGN_MAX_S = 7 * 24 * 3600  # S3's SigV4 limit for a presigned URL
# A re-rent passes Vast's default offer filters (core/providers/vast.py DEFAULT_FILTERS: storage < $0.3 per
# GB-month): the worst disk price any attempt of the run can have, whichever offer the watchdog rents.
WORST_STORAGE_USD_GB_MONTH = 0.3
HOURS_PER_MONTH = 30 * 24  # as core/budget.py disk_per_hour counts a GB-month


# -- refusals, before any money ---------------------------------------------------------------------
def check_recovery(opts: UpOptions, settings: Settings) -> None:
    """Everything about `--recover` that needs no provider or watchdog call."""
    if opts.recover_on_demand and not opts.recover:
        raise ConfigError(
            "--recover-on-demand needs --recover N: it names how the last recovery rents",
            hint="add --recover 2 (say), or drop --recover-on-demand",
        )
    if not opts.recover:
        return
    if not opts.interruptible:
        raise ConfigError(
            "--recover is for interruptible pods: an on-demand pod is never outbid, so nothing would recover it",
            hint="add --interruptible --bid PRICE (see `gpuc offers --interruptible`), or drop --recover",
        )
    if opts.provider not in RECOVERABLE:
        raise ConfigError(
            f"--recover works on Vast only: {opts.provider} has no interruptible pods gpuc can re-rent "
            "(RunPod removed its spot API)",
            hint="rent with --provider vast, or drop --recover",
        )
    if opts.bid is None:
        raise ConfigError(
            "--recover needs --bid: the bid is the run's price cap, and no attempt is rented above it",
            hint="add --bid PRICE per GPU-hour (`gpuc offers --interruptible` shows min bids)",
        )
    check_resumable_destination(settings)


def check_resumable_destination(settings: Settings) -> None:
    """A pod the watchdog rents after an outbid fetches its kit from, and restores the last push from, the
    results bucket, with no laptop: only an s3:// or file:// bucket serves both."""
    bucket = settings.results_bucket or ""
    scheme = urlparse(bucket).scheme
    if settings.git_remote:
        raise ConfigError(
            "--recover cannot resume from a git results destination: GPUC_GIT_REMOTE is set, so the pod pushes "
            "its small files there, and a re-rented pod restores from the bucket only",
            hint="unset GPUC_GIT_REMOTE for this run and set GPUC_RESULTS_BUCKET=s3://bucket/prefix (with "
            "GPUC_S3_ACCESS_KEY_ID/GPUC_S3_SECRET_ACCESS_KEY), or drop --recover",
        )
    if scheme not in ("s3", "file"):
        raise ConfigError(
            "--recover needs GPUC_RESULTS_BUCKET set to an s3:// bucket: the re-rented pod fetches gpuc and "
            "your code from it, and resumes from the last push there",
            hint="set GPUC_RESULTS_BUCKET=s3://bucket/prefix (with GPUC_S3_ACCESS_KEY_ID/"
            "GPUC_S3_SECRET_ACCESS_KEY), or drop --recover",
        )


def check_recovery_protocol(status: StatusResponse, settings: Settings) -> None:
    """The watchdog keeps the run and boots its next pods: one from before recovery cannot."""
    from gpuc.core.api import RECOVERY_PROTOCOL

    if status.protocol >= RECOVERY_PROTOCOL:
        if status.watchdog_id is None:  # it signs each new attempt's claim and token with its own key
            raise ConfigError(
                f"the watchdog at {settings.watchdog_url} has no key of its own (a deployment from before "
                "claims): it cannot hand a re-rented pod its token; nothing was created",
                hint="redeploy it (`gpuc watchdog deploy`) or restart `gpuc watchdog serve` with this gpuc, "
                "or drop --recover",
            )
        return
    raise ConfigError(
        f"the watchdog at {settings.watchdog_url} runs a gpuc without interruptible recovery (protocol "
        f"{status.protocol}, --recover needs {RECOVERY_PROTOCOL}): it would never re-rent this run; nothing was "
        "created",
        hint="redeploy it (`gpuc watchdog deploy`) or restart `gpuc watchdog serve` with this gpuc, or drop --recover",
    )


# -- the run's one envelope (core/budget.py RunEnvelope) --------------------------------------------------
def run_disk_gb(spec: PodSpec) -> float:
    return float(max(spec.volume_gb, spec.container_disk_gb))  # Vast's one disk, as its create sizes it


def envelope_of(opts: UpOptions, spec: PodSpec) -> RunEnvelope | None:
    """The envelope of a run with --recover (None without). The price cap is the bid: a run without a bid
    has no bound, and `up` refuses --interruptible without one on a rented provider."""
    if not opts.recover or opts.bid is None:
        return None
    disk = run_disk_gb(spec) * WORST_STORAGE_USD_GB_MONTH / HOURS_PER_MONTH
    return RunEnvelope(opts.bid * opts.gpu_count, disk, opts.max_hours)


# -- the boot kit -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KitFiles:
    """Where `up` left the kit's files, and how a pod with no laptop fetches them."""

    place: str  # in words, for the user: the folder or s3:// prefix
    wheel_name: str
    wheel_url: str
    wheel_sha256: str
    project_url: str | None
    project_sha256: str | None


def kit_files(opts: UpOptions, settings: Settings, run_id: str) -> KitFiles:
    """Build and write the kit BEFORE the create; ConfigError (nothing rented) when it cannot be written."""
    from gpuc.client.onpod.bundle import build_bundle

    wheel = build_bundle()
    project = opts.upload.archive() if opts.upload is not None else None
    bucket = settings.results_bucket or ""
    try:
        if urlparse(bucket).scheme == "file":
            return _write_folder(Path(unquote(urlparse(bucket).path)) / KITS_DIR / run_id, wheel, project)
        expires = min(PRESIGN_MAX_S, int(opts.max_hours * 3600) + 3600)
        return _write_s3(settings, bucket, run_id, wheel, project, expires)
    except GpucError:
        raise
    except Exception as exc:  # an OSError, boto's own: each means the same thing, said with its reason
        raise ConfigError(
            f"cannot write the run's boot kit at {bucket}/{KITS_DIR}/{run_id}: {_why(exc)}; nothing was rented",
            hint="check the results bucket takes writes (GPUC_RESULTS_BUCKET and its keys), or drop --recover",
        ) from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    from gpuc.core.redact import redact

    return redact(str(exc) or type(exc).__name__)[:200]


def _write_folder(folder: Path, wheel: Wheel, project: bytes | None) -> KitFiles:
    # Mode 700/600: the kit is the user's code, and a file:// bucket may sit in a shared folder.
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    wheel_path = _write_private(folder / wheel.filename, wheel.data)
    project_path = _write_private(folder / PROJECT_NAME, project) if project is not None else None
    return KitFiles(
        place=str(folder),
        wheel_name=wheel.filename,
        wheel_url=wheel_path.as_uri(),
        wheel_sha256=wheel.sha256,
        project_url=project_path.as_uri() if project_path is not None else None,
        project_sha256=_sha256(project),
    )


def _write_private(path: Path, data: bytes) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file left from an earlier try keeps its mode through O_CREAT
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return path


def _sha256(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


def _write_s3(
    settings: Settings, bucket: str, run_id: str, wheel: Wheel, project: bytes | None, expires_s: int
) -> KitFiles:
    """The kit written with the results keys and endpoint the laptop reads with (client/jobs/places.py), and
    presigned GETs: the pod that fetches it holds no key, then or ever (its results go through grants)."""
    from gpuc.core.destinations import S3Location

    where = S3Location.parse(bucket)
    base = "/".join(p for p in (where.prefix, KITS_DIR, run_id) if p)
    client = _kit_client(settings, where.bucket)
    wheel_url = _put_presigned(client, where.bucket, f"{base}/{wheel.filename}", wheel.data, expires_s)
    project_url = (
        _put_presigned(client, where.bucket, f"{base}/{PROJECT_NAME}", project, expires_s)
        if project is not None
        else None
    )
    return KitFiles(
        place=f"s3://{where.bucket}/{base}/",
        wheel_name=wheel.filename,
        wheel_url=wheel_url,
        wheel_sha256=wheel.sha256,
        project_url=project_url,
        project_sha256=_sha256(project),
    )


def _kit_client(settings: Settings, bucket: str) -> Any:
    """The results bucket's client with its own keys and endpoint, as the pod and `gpuc logs` reach it
    (client/jobs/places.py): `up` proved them on this bucket before (core/destcheck.py). It signs for the
    bucket's own region: the kit's presigned GETs, signed for "auto" at an endpoint, were refused by a store
    whose bucket names its region (the rehearsal's S3 API answered them 301, and the re-rented pod never
    booted); AWS refuses a URL signed for another region the same way."""
    from gpuc.core.podsecrets import S3_KEYS
    from gpuc.core.s3client import regional_client

    creds = {
        S3_KEYS[0]: settings.s3_access_key_id.get_secret_value() if settings.s3_access_key_id else "",
        S3_KEYS[1]: settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else "",
    }
    return regional_client(settings.s3_endpoint_url, creds, bucket, presign_v4=True)


def _put_presigned(client: Any, bucket: str, key: str, data: bytes, expires_s: int) -> str:
    client.put_object(Bucket=bucket, Key=key, Body=data)
    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires_s)
    return str(url)


def remove_kit(settings: Settings, run_id: str) -> bool:
    """Remove a run's kit (its code at the bucket); True when nothing of it is left. Best effort."""
    bucket = settings.results_bucket or ""
    url = urlparse(bucket)
    try:
        if url.scheme == "file":
            folder = Path(unquote(url.path)) / KITS_DIR / run_id
            for path in folder.glob("*"):
                path.unlink(missing_ok=True)
            with contextlib.suppress(FileNotFoundError):
                folder.rmdir()
            return not folder.exists()
        if url.scheme == "s3":
            _remove_s3(settings, bucket, run_id)
            return True
    except Exception:  # a kit left behind costs storage, never a pod: said by the caller
        return False
    return True


def _remove_s3(settings: Settings, bucket: str, run_id: str) -> None:
    from gpuc.core.destinations import S3Location

    where = S3Location.parse(bucket)
    prefix = "/".join(p for p in (where.prefix, KITS_DIR, run_id) if p) + "/"
    client = _kit_client(settings, where.bucket)
    listed = client.list_objects_v2(Bucket=where.bucket, Prefix=prefix).get("Contents", [])
    for item in listed:
        client.delete_object(Bucket=where.bucket, Key=str(item["Key"]))


# -- the registration's recovery plan ---------------------------------------------------------------------
def results_at(settings: Settings, experiment: str, run_id: str) -> str:
    """The run's push destination, as instance_side/s3sync.py builds it: `<bucket>/<experiment>/<run_id>`
    (GPUC_RESUME_FROM of every later attempt)."""
    bucket = (settings.results_bucket or "").rstrip("/")
    if bucket.startswith("s3://"):
        from gpuc.core.destinations import S3Location

        return S3Location.parse(bucket).run_url(experiment, run_id)  # the prefix its grants reach
    return f"{bucket}/{experiment}/{run_id}"  # both checked names (PodSpec): nothing to escape


def boot_kit(
    files: KitFiles,
    pod: Pod,
    spec: PodSpec,
    opts: UpOptions,
    ctx: Caller,
    secrets_env: dict[str, str],
    deadline_at: float,
) -> BootKit:
    """The kit's document: the first pod's config (the watchdog sets pod_id, price, gpu and deadline per
    pod), the allowlisted secrets `up` chose (never this pod's token or claim: each pod gets its own), and
    how to install, bootstrap and start the job as provisioning does."""
    from gpuc.client.onpod.provision import bootstrap_plan, pod_config
    from gpuc.core.api import BootKit
    from gpuc.core.podsecrets import never_on_pod

    config = pod_config(pod, spec, ctx, deadline_at=deadline_at, warm_s=opts.warm_s)
    python = ctx.settings.ssh_sandbox_python
    return BootKit(
        wheel_url=files.wheel_url,
        wheel_name=files.wheel_name,
        wheel_sha256=files.wheel_sha256,
        project_url=files.project_url,
        project_sha256=files.project_sha256,
        installer="offline",  # the bundle, unpacked with the image's python3 (or the sandbox's, named)
        offline_python=python,
        config=config.model_dump(mode="json"),
        secrets={k: v for k, v in never_on_pod(secrets_env).items() if v},
        bootstrap=bootstrap_plan(ctx.settings),
        command=list(opts.command) or None,
        job_id=opts.job_id,
    )


def recovery_request(
    kit: BootKit, envelope: RunEnvelope, spec: PodSpec, opts: UpOptions, settings: Settings, first_start: float
) -> RecoveryRequest:
    from gpuc.core.api import RecoveryRequest

    return RecoveryRequest(
        recover=opts.recover,
        on_demand_last=opts.recover_on_demand,
        price_cap=envelope.price_cap,
        disk_per_hour=envelope.disk_per_hour,
        envelope_usd=envelope.usd,
        first_start=first_start,
        max_hours=opts.max_hours,
        spec=spec.model_copy(update={"offer_id": None}),  # the next attempt rents the next offer that passes
        results_at=results_at(settings, spec.experiment, spec.run_id),
        kit=kit,
    )


@dataclass(frozen=True)
class Recovering:
    """What `up --recover` registers with the first pod: the kit written before the create, the envelope."""

    kit: KitFiles | None = None
    envelope: RunEnvelope | None = None
