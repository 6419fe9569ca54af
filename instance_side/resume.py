"""A recovered attempt starts from the last push: GPUC_RESUME_FROM names the destination of the
run's previous attempt; what it holds of the last push is copied into results/ BEFORE the job starts, so the
job resumes from the newest checkpoint it finds there (the job decides how: docs/interruptible.md).

What is restored is read from the destination itself (its listing: names and sizes), by the push manifest's
rule (instance_side/push.py), never a stale manifest's view: every file the last verified push listed (each
must be there, at a size a push sent it with), and, of the files a push under way had announced (`sending`, in
the order it sends them), those that arrived, up to the first that did not (files of one modification time
all or none). A push sends oldest first and each file whole, so what is restored is what the job had written
up to some moment: never a checkpoint without the files written before it. gpuc's own files beside the
results (the job's log and outcome, the manifest) are not restored into results/.

Every name is checked (no absolute path, no `..`, no symlink); a file that does not match is refused, never
half-restored as if whole. Destinations: `file:///dir/<experiment>/<run_id>` and
`s3://bucket/<prefix>/<experiment>/<run_id>` (listed and read through the run's own objects, which the pod
reaches with the watchdog's grants and no key: instance_side/grants.py; only its own run's prefix, so only its
own run is resumed from). Git restores are NOT built yet. Stdlib only, as all of instance_side.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Protocol

from gpuc.core.destinations import S3Location
from gpuc.core.errors import SyncError
from gpuc.core.podpaths import RESUME_ENV, PodPaths
from gpuc.instance_side.push import MANIFEST_NAME, PushManifest, adopt
from gpuc.instance_side.sync import JOB_LOG_NAME, OUTCOME_NAME, PART_PREFIX, RunObjects, local_listing, name_of_key

MANIFEST_MAX = 64 * 1024 * 1024  # a push manifest is JSON of names and sizes: far below this


class RestoreError(RuntimeError):
    pass


class _Source(Protocol):
    """Where a restore reads: the push manifest's text (None: none there), what the run's destination holds
    (key -> size), and one file by its key, checked to be `size` bytes."""

    def manifest(self) -> str | None: ...

    def listing(self) -> dict[str, int]: ...

    def fetch(self, key: str, size: int, target: Path) -> None: ...


def restore(
    resume_from: str, results: Path, *, objects: RunObjects | None = None, paths: PodPaths | None = None
) -> list[str]:
    """Copy the last push at `resume_from` into `results`; the names restored. `objects`: the run's own
    objects, for an s3:// destination (its grant reaches that run's prefix and nothing else). With `paths` (the
    pod's, as the boot and the wrapper pass them), its push starts from what was restored (push.adopt): the next
    push sends what the job changes, not every restored checkpoint again, and its manifests keep naming the
    restored files that wait, with the version the destination holds."""
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
    chosen = restorable(manifest, source.listing())
    for name, (key, size) in chosen.items():
        _check_name(name)
        _check_name(key)
        target = results / name
        target.parent.mkdir(parents=True, exist_ok=True)
        source.fetch(key, size, target)
    if paths is not None:
        try:
            adopt(paths, manifest.destination, chosen)
        except OSError as exc:
            # Not best effort: a pod that does not know what the destination holds would announce its first push
            # without the restored files that wait in it, and a restore after a cut would leave them out.
            raise RestoreError(f"could not record what was restored: {exc.strerror or exc}") from None
    return list(chosen)


def restorable(manifest: PushManifest, listing: Mapping[str, int]) -> dict[str, tuple[str, int]]:
    """name -> (its key at the destination, its size there): what a restore copies, by the rule in the module's
    docstring. `listing` is what the destination holds (key -> size). Raises RestoreError when a file the last
    verified push listed is missing or at a size no push sent (the destination was changed by someone else), or
    when a file to restore may be torn."""
    for name in (*manifest.files, *manifest.keys.values(), *(entry[0] for entry in manifest.sending), *manifest.maybe):
        _check_name(name)  # the pod's word, about to become paths on this one: refused before anything is read
    own = {MANIFEST_NAME, *manifest.beside}
    if manifest.version < 2:
        own |= {JOB_LOG_NAME, OUTCOME_NAME, *manifest.waiting}  # a file still being written at that push: maybe torn
    sizes = _sizes(manifest)
    found = _found(manifest, listing, {n for n in sizes if n not in own})
    chosen = _verified(manifest, found, sizes, own)
    chosen.update(_arrived(manifest, found, sizes, own))
    torn = sorted(set(chosen) & set(manifest.suspect))
    if torn:
        raise RestoreError(
            f"results/{torn[0]} was rewritten in place while the last push sent it: the copy at the destination may "
            "be torn, so the job is not resumed from it (save checkpoints to a temporary name, then rename them)"
        )
    return chosen


def _sizes(manifest: PushManifest) -> dict[str, set[int]]:
    """Each name's sizes a push sent it at: the last verified one's, the one under way's, an unfinished one's."""
    sizes: dict[str, set[int]] = {}
    for name, (size, _mtime) in manifest.files.items():
        sizes.setdefault(name, set()).add(size)
    for name, size, _mtime in manifest.sending:
        sizes.setdefault(name, set()).add(size)
    for name, stamps in manifest.maybe.items():
        sizes.setdefault(name, set()).update(size for size, _mtime in stamps)
    return sizes


def _verified(
    manifest: PushManifest, found: Mapping[str, tuple[str, int]], sizes: Mapping[str, set[int]], own: set[str]
) -> dict[str, tuple[str, int]]:
    """What the last verified push listed: each must be there, at a size a push sent it with."""
    chosen: dict[str, tuple[str, int]] = {}
    for name in sorted(manifest.files):
        if name in own:
            continue
        if name not in found:
            raise RestoreError(f"results/{name} is in the push manifest but not at the destination")
        if found[name][1] not in sizes[name]:
            raise RestoreError(f"results/{found[name][0]} at the destination does not match the push manifest")
        chosen[name] = found[name]
    return chosen


def _arrived(
    manifest: PushManifest, found: Mapping[str, tuple[str, int]], sizes: Mapping[str, set[int]], own: set[str]
) -> dict[str, tuple[str, int]]:
    """What a push under way announced and the last verified one did not list: in order, each clock tick's files
    all or none, up to the first that is not there (a push cut there sent nothing after it). A name there at a
    size this push does not send is a whole version written before it (an earlier attempt's, the destination
    holds nothing else: every write there is whole): taken as it is, an older version of that file."""
    ticks: dict[int, list[str]] = {}
    for name, _size, mtime in manifest.sending:
        if name not in own and name not in manifest.files:
            ticks.setdefault(mtime, []).append(name)
    arrived: dict[str, tuple[str, int]] = {}
    for names in ticks.values():
        if not all(name in found for name in names):
            break
        arrived.update((name, found[name]) for name in names)
    return arrived


def _found(manifest: PushManifest, listing: Mapping[str, int], names: set[str]) -> dict[str, tuple[str, int]]:
    """Of `names`, those the destination holds: name -> (key, size). A key is a name, or the escaped key the
    manifest maps it to, or (announced, not yet mapped) an escaped key that unescapes to it."""
    owner = {key: name for name, key in manifest.keys.items()}
    found: dict[str, tuple[str, int]] = {}
    for key, size in listing.items():
        if key.rsplit("/", 1)[-1].startswith(PART_PREFIX):
            continue  # a copy under way, or cut: never a whole file
        name = owner.get(key) or (key if key in names else name_of_key(key))
        if name in names and (name not in found or key == manifest.keys.get(name, name)):
            found[name] = (key, size)
    return found


class _FileSource:
    def __init__(self, root: Path) -> None:
        self.root = root

    def manifest(self) -> str | None:
        path = self.root / MANIFEST_NAME
        return path.read_text(encoding="utf-8") if path.is_file() else None

    def listing(self) -> dict[str, int]:
        return local_listing(self.root) if self.root.is_dir() else {}

    def fetch(self, key: str, size: int, target: Path) -> None:
        source = self.root / key
        if source.is_symlink() or not source.is_file() or source.stat().st_size != size:
            raise RestoreError(f"results/{key} at file://{self.root} does not match the push manifest")
        tmp = target.with_name(f".{target.name}.restore")
        try:
            shutil.copyfile(source, tmp)
            if tmp.stat().st_size != size:
                raise RestoreError(f"results/{key} at file://{self.root} changed while it was restored")
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


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

    def listing(self) -> dict[str, int]:
        with self._errors("listing the destination"):
            return self.objects.list()

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
