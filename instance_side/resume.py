"""A recovered attempt starts from the last push: GPUC_RESUME_FROM names the destination of the
run's previous attempt; what its push manifest lists is copied into results/ BEFORE the job starts, so the
job resumes from the newest checkpoint it finds there (the job decides how: docs/interruptible.md).

Only what the manifest names is restored, each name checked (no absolute path, no `..`, no symlink) and
each size matched against the manifest: a file that does not match is refused, never half-restored as if
whole. A file listed as still being written at that push (`waiting`) is skipped: it may be torn.
Destinations: file:// here. S3 and git restores are NOT built yet (said in docs/interruptible.md).
Stdlib only, as all of instance_side.
"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

from gpuc.core.pod import RESUME_ENV
from gpuc.instance_side.push import MANIFEST_NAME, PushManifest


class RestoreError(RuntimeError):
    pass


def restore(resume_from: str, results: Path) -> list[str]:
    """Copy the last push at `resume_from` into `results`; the names restored."""
    if not resume_from.startswith("file://"):
        raise RestoreError(f"{RESUME_ENV} must be a file:// destination here (S3/git restore is not built yet)")
    root = Path(resume_from[len("file://") :])
    manifest_file = root / MANIFEST_NAME
    if not manifest_file.is_file():
        raise RestoreError(f"no push manifest at {resume_from}: nothing was pushed to resume from")
    manifest = PushManifest.load(manifest_file)
    done = []
    for name, (size, _mtime) in sorted(manifest.files.items()):
        if name in manifest.waiting:
            continue
        _check_name(name)
        source = root / manifest.keys.get(name, name)
        if source.is_symlink() or not source.is_file() or source.stat().st_size != size:
            raise RestoreError(f"results/{name} at {resume_from} does not match the push manifest")
        target = results / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        done.append(name)
    return done


def _check_name(name: str) -> None:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise RestoreError(f"the push manifest names {name!r}: not a path inside results/")
