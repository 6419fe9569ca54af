"""A recovered attempt starts from the last push: GPUC_RESUME_FROM names the destination of the
run's previous attempt; what its push manifest lists is copied into results/ BEFORE the job starts, so the
job resumes from the newest checkpoint it finds there (the job decides how: docs/interruptible.md).

Only what the manifest names is restored, each name checked (no absolute path, no `..`, no symlink) and
each size matched against the manifest: a file that does not match is refused, never half-restored as if
whole. A file listed as still being written at that push (`waiting`) is skipped: it may be torn.
Destinations: `file:///dir/<experiment>/<run_id>` and `s3://bucket/<prefix>/<experiment>/<run_id>` (read
with the pod's own S3 client and keys, core/destinations.py). Git restores are NOT built yet.
Stdlib only, as all of instance_side (boto3 is imported for an s3:// restore only).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from gpuc.core.podpaths import RESUME_ENV
from gpuc.core.redact import redact
from gpuc.instance_side.push import MANIFEST_NAME, PushManifest

MANIFEST_MAX = 64 * 1024 * 1024  # a push manifest is JSON of names and sizes: far below this


class RestoreError(RuntimeError):
    pass


class _Source(Protocol):
    def manifest(self) -> str | None: ...

    def fetch(self, key: str, size: int, target: Path) -> None: ...


def restore(
    resume_from: str,
    results: Path,
    *,
    endpoint_url: str | None = None,
    credentials: Mapping[str, str] | None = None,
    client: Any | None = None,
) -> list[str]:
    """Copy the last push at `resume_from` into `results`; the names restored. `endpoint_url` and
    `credentials` (the pod's GPUC_S3_* keys) are for an s3:// destination; `client` is injectable for tests."""
    source: _Source
    if resume_from.startswith("file://"):
        source = _FileSource(Path(resume_from[len("file://") :]))
    elif resume_from.startswith("s3://"):
        source = _S3Source(resume_from, endpoint_url, credentials or {}, client)
    else:
        raise RestoreError(f"{RESUME_ENV} must be a file:// or s3:// destination (a git restore is not built yet)")
    text = source.manifest()
    if text is None:
        raise RestoreError(f"no push manifest at {resume_from}: nothing was pushed to resume from")
    manifest = PushManifest.from_json(text)
    done = []
    for name, (size, _mtime) in sorted(manifest.files.items()):
        if name in manifest.waiting:
            continue
        _check_name(name)
        key = manifest.keys.get(name, name)
        _check_name(key)
        target = results / name
        target.parent.mkdir(parents=True, exist_ok=True)
        source.fetch(key, size, target)
        done.append(name)
    return done


class _FileSource:
    def __init__(self, root: Path) -> None:
        self.root = root

    def manifest(self) -> str | None:
        path = self.root / MANIFEST_NAME
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def fetch(self, key: str, size: int, target: Path) -> None:
        source = self.root / key
        if source.is_symlink() or not source.is_file() or source.stat().st_size != size:
            raise RestoreError(f"results/{key} at file://{self.root} does not match the push manifest")
        shutil.copyfile(source, target)


class _S3Source:
    """`s3://bucket/base`: the manifest at `base/logs/push-manifest.json`, each file at `base/<key>`."""

    def __init__(self, url: str, endpoint_url: str | None, credentials: Mapping[str, str], client: Any | None) -> None:
        from gpuc.core.destinations import S3Location
        from gpuc.core.errors import SyncError

        try:
            where = S3Location.parse(url)
        except SyncError as exc:
            raise RestoreError(exc.message) from None
        self.url = url
        self.bucket, self.base = where.bucket, where.prefix
        self.endpoint_url = endpoint_url
        self.credentials = dict(credentials)
        self._client = client
        self.secrets = [v for v in self.credentials.values() if v]

    def client(self) -> Any:
        if self._client is None:
            from gpuc.core.destinations import s3_client

            self._client = s3_client(self.endpoint_url, self.credentials)
        return self._client

    def _key(self, name: str) -> str:
        return f"{self.base}/{name}" if self.base else name

    def manifest(self) -> str | None:
        with self._errors("reading the push manifest"):
            try:
                answer = self.client().get_object(Bucket=self.bucket, Key=self._key(MANIFEST_NAME))
            except Exception as exc:
                if _not_found(exc):
                    return None
                raise
            body: bytes = answer["Body"].read(MANIFEST_MAX + 1)
        if len(body) > MANIFEST_MAX:
            raise RestoreError(f"the push manifest at {self.url} is larger than any gpuc writes")
        return body.decode("utf-8", errors="replace")

    def fetch(self, key: str, size: int, target: Path) -> None:
        # Into a temporary file beside the target, checked, then renamed: never a torn file named as whole.
        tmp = target.with_name(f".{target.name}.restore")
        try:
            with self._errors(f"downloading results/{key}"):
                self.client().download_file(self.bucket, self._key(key), str(tmp))
            if tmp.stat().st_size != size:
                raise RestoreError(f"results/{key} at {self.url} does not match the push manifest")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except RestoreError:
            raise
        except Exception as exc:  # boto3's errors, said without the request's credentials
            reason = redact(str(exc) or type(exc).__name__, self.secrets)[:300]
            raise RestoreError(f"{what} at {self.url} failed: {reason}") from None


def _not_found(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
    return code in ("404", "NoSuchKey", "NotFound")


def _check_name(name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise RestoreError(f"the push manifest names {name!r}: not a path inside results/")
