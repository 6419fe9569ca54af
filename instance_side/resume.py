"""A recovered attempt starts from the last push: GPUC_RESUME_FROM names the destination of the
run's previous attempt; what its push manifest lists is copied into results/ BEFORE the job starts, so the
job resumes from the newest checkpoint it finds there (the job decides how: docs/interruptible.md).

Only what the manifest names is restored, each name checked (no absolute path, no `..`, no symlink) and
each size matched against the manifest: a file that does not match is refused, never half-restored as if
whole. A file listed as still being written at that push (`waiting`) is skipped: it may be torn.
Destinations: `file:///dir/<experiment>/<run_id>` and `s3://bucket/<prefix>/<experiment>/<run_id>` (read
through the run's own objects, which the pod reaches with the watchdog's grants and no key:
instance_side/grants.py; only its own run's prefix, so only its own run is resumed from). Git restores are
NOT built yet. Stdlib only, as all of instance_side.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Protocol

from gpuc.core.destinations import S3Location
from gpuc.core.errors import SyncError
from gpuc.core.podpaths import RESUME_ENV
from gpuc.instance_side.push import MANIFEST_NAME, PushManifest
from gpuc.instance_side.sync import RunObjects

MANIFEST_MAX = 64 * 1024 * 1024  # a push manifest is JSON of names and sizes: far below this


class RestoreError(RuntimeError):
    pass


class _Source(Protocol):
    def manifest(self) -> str | None: ...

    def fetch(self, key: str, size: int, target: Path) -> None: ...


def restore(resume_from: str, results: Path, *, objects: RunObjects | None = None) -> list[str]:
    """Copy the last push at `resume_from` into `results`; the names restored. `objects`: the run's own
    objects, for an s3:// destination (its grant reaches that run's prefix and nothing else)."""
    source: _Source
    if resume_from.startswith("file://"):
        source = _FileSource(Path(resume_from[len("file://") :]))
    elif resume_from.startswith("s3://"):
        source = _S3Source(resume_from, objects)
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
    """`s3://bucket/base`: the manifest at `base/logs/push-manifest.json`, each file at `base/<key>`, through
    the run's own objects (the URL must be that run's: its grant reaches nothing else)."""

    def __init__(self, url: str, objects: RunObjects | None) -> None:
        if objects is None or not _same_place(url, objects.describe()):
            raise RestoreError(f"{url} is not this run's own prefix: a pod is granted its own run's objects only")
        self.url = url
        self.objects = objects

    def manifest(self) -> str | None:
        with tempfile.TemporaryDirectory(prefix="gpuc-restore-") as folder:
            target = Path(folder) / "manifest.json"
            with self._errors("reading the push manifest"):
                if not self.objects.get(MANIFEST_NAME, target, limit=MANIFEST_MAX):
                    return None
            return target.read_text(encoding="utf-8", errors="replace")

    def fetch(self, key: str, size: int, target: Path) -> None:
        # Into a temporary file beside the target, checked, then renamed: never a torn file named as whole.
        tmp = target.with_name(f".{target.name}.restore")
        try:
            with self._errors(f"downloading results/{key}"):
                found = self.objects.get(key, tmp, size=size)
            if not found:
                raise RestoreError(f"results/{key} at {self.url} does not match the push manifest (it is not there)")
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except SyncError as exc:
            raise RestoreError(f"{what} at {self.url} failed: {exc.message}") from None


def _same_place(one: str, other: str) -> bool:
    try:
        a, b = S3Location.parse(one), S3Location.parse(other)
    except SyncError:
        return False
    return (a.bucket, a.prefix) == (b.bucket, b.prefix)


def _check_name(name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise RestoreError(f"the push manifest names {name!r}: not a path inside results/")
