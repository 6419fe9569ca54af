"""Results out of the pod before it is destroyed: a sync counts only when the remote listing matches what was
sent (docs/money.md, layer 1). A sync that fails or cannot be verified keeps the pod: losing the results is
the one failure worse than a few more minutes of billing.

Where results go (docs/using.md):
- `git_remote` set: files under 10 MB are committed to the experiment's repo under
  `results/<run_id>/` and pushed; larger ones go to the results bucket (an error if there is none).
- otherwise everything goes to the results bucket: `s3://bucket/prefix` (S3, or R2 and friends through
  `s3_endpoint_url`) or `file:///dir` (the local sandbox, tests), under `<experiment>/<run_id>/`.

What is sent is every regular file under results/, links followed (files and folders), as a copy
would see them. The sync fails only when a byte of the user's data could be lost: a folder or a file
that cannot be read is a failed sync naming it (the pod is kept and the user told which one, never a
result skipped in silence). Entries that hold no data never block it: a link that cannot be followed
(dangling, such as a `latest` link to a rotated checkpoint, a loop, a link to a device) is recorded
as a link with its target, in the manifest and in `logs/entries.json` beside the results. A name the
destination cannot store (not UTF-8 for S3 keys; for git, what git refuses or cannot list back; for
file://, what the filesystem refuses) is stored under an escaped key (the bytes percent-escaped,
reversibly), mapped in the manifest and verified under that key.

Verification lists the remote (for s3://, the watchdog's listing of the run's prefix; `git ls-tree -l` of
what the remote holds after the push) and compares names and sizes. The pod holds no S3 key: its s3://
objects go through URLs the watchdog grants for its own run's prefix only (instance_side/grants.py); the
git token comes from the pod's secrets file (or the process environment), never from the URL or a command
line.

The parts: scan.py (what results/ holds), storekeys.py (names a destination cannot store), manifest.py (what a
push sent, what a destination is), filesync.py, s3sync.py and gitsync.py (the destinations), joblogsync.py (the
job's log and outcome beside the results); this module builds the sync the pod's config asks for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlparse

from gpuc.core.destinations import (
    git_environ,
)
from gpuc.core.errors import SyncError
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.gitsync import GitSync, SplitSync
from gpuc.instance_side.grants import pod_objects
from gpuc.instance_side.joblogsync import JobLogSync
from gpuc.instance_side.manifest import Manifest, ResultsSync
from gpuc.instance_side.podfiles import AgentConfig, PodPaths
from gpuc.instance_side.s3sync import S3Sync
from gpuc.instance_side.scan import local_listing


class NoDestination:
    """No bucket configured: fine while results/ is empty, a failed sync as soon as it is not."""

    def describe(self) -> str:
        return "nowhere (no results bucket configured)"

    def push(self, results_dir: Path) -> Manifest:
        files = local_listing(results_dir) if results_dir.is_dir() else {}
        if files:
            raise SyncError(
                f"{results_dir.name}/ holds {len(files)} files but no results bucket is configured",
                hint="on your laptop, `gpuc results POD` copies them there, then ends the pod; set "
                "GPUC_RESULTS_BUCKET before the next up (`up` checks it before renting)",
            )
        return Manifest(self.describe(), note=f"no files in {results_dir.name}/: nothing to sync")

    def verify(self, manifest: Manifest) -> bool:
        return not manifest.files


class Unavailable:
    """A destination we cannot use: every push fails, so nothing is destroyed on its account."""

    def __init__(self, error: SyncError) -> None:
        self.error = error

    def describe(self) -> str:
        return f"unavailable ({self.error.message})"

    def push(self, results_dir: Path) -> Manifest:
        raise self.error

    def verify(self, manifest: Manifest) -> bool:
        return False


def with_job_log(sync: ResultsSync, paths: PodPaths) -> ResultsSync:
    """The sync that also sends the job's log and outcome, wherever results go. Without a destination
    there is nowhere to send them (and no reason to keep the pod for them)."""
    if isinstance(sync, (NoDestination, Unavailable)):
        return sync
    # Git alone takes files under its limit only: a longer log is cut in the middle to fit.
    limit = sync.limit - 1 if isinstance(sync, SplitSync) and sync.bucket is None else None
    return JobLogSync(sync, paths, log_limit=limit)


def make_sync(
    cfg: AgentConfig,
    secrets: Mapping[str, str] | None = None,
    *,
    paths: PodPaths | None = None,
    environ: Mapping[str, str] | None = None,
) -> ResultsSync:
    """The sync the pod's config asks for. The git token comes from the pod's secrets file, then the process
    environment; an s3:// destination takes no key: its objects go through the watchdog's grants, asked with
    the pod's token (instance_side/grants.py)."""
    try:
        return _make_sync(cfg, dict(secrets or {}), paths or PodPaths.from_env(), environ)
    except SyncError as exc:
        return Unavailable(exc)


def _make_sync(
    cfg: AgentConfig, secrets: dict[str, str], paths: PodPaths, environ: Mapping[str, str] | None
) -> ResultsSync:
    env = os.environ if environ is None else environ
    bucket = _bucket_sync(cfg, secrets, paths, env)
    if cfg.git_remote:
        git = GitSync(
            cfg.git_remote,
            cfg.experiment,
            cfg.run_id,
            paths.results_repo,
            environ=git_environ(env, secrets),
            secrets=[v for v in secrets.values() if v],
            pod_id=cfg.pod_id,
        )
        return SplitSync(git, bucket)
    return bucket or NoDestination()


def _bucket_sync(
    cfg: AgentConfig, secrets: Mapping[str, str], paths: PodPaths, environ: Mapping[str, str]
) -> FileBucketSync | S3Sync | None:
    bucket = cfg.results_bucket
    if not bucket:
        return None
    url = urlparse(bucket)
    if url.scheme == "file" and url.path:
        return FileBucketSync(Path(unquote(url.path)), cfg.experiment, cfg.run_id)
    if url.scheme == "s3":
        objects = pod_objects(
            bucket, cfg.experiment, cfg.run_id, pod_id=cfg.pod_id, watchdog_url=cfg.watchdog_url,
            secrets=secrets, paths=paths, environ=environ,
        )  # fmt: skip
        return S3Sync(bucket, cfg.experiment, cfg.run_id, endpoint_url=cfg.s3_endpoint_url, objects=objects)
    raise SyncError(
        f"results bucket scheme {url.scheme or '(none)'!r} is not supported",
        hint="use s3://bucket/prefix (with GPUC_S3_ENDPOINT_URL for R2) or file:///path",
    )
