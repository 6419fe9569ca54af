"""The `file:///dir` destination (the local sandbox, tests): each file written to a temporary name and renamed
over its own, so a copy cut anywhere leaves a whole file or none.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from gpuc.core.errors import SyncError
from gpuc.instance_side.manifest import Manifest, check_run_names, listing_matches, push_all
from gpuc.instance_side.scan import local_listing
from gpuc.instance_side.storekeys import escape_name, free_key

# What filesystems refuse in a name besides "/" and NUL (vfat, exFAT, NTFS): escaped on a refusal only.
_FS_UNSAFE = frozenset('\\:*?"<>|')


_NAME_REFUSED = (errno.EILSEQ, errno.EINVAL)


def _fs_escape(name: str) -> str:
    return escape_name(name, lambda ch: ch in _FS_UNSAFE or ord(ch) < 32)


class FileBucketSync:
    """`file:///dir` -> `<dir>/<experiment>/<run_id>/`.

    Each file is written to a temporary name in its folder, then renamed over its own: a copy cut anywhere (the
    pod outbid mid-push) leaves the old whole file or the new whole file, never a torn one under the file's
    name, as an S3 PUT does. Files are written in the order `push_files` is given (push.py relies on it)."""

    def __init__(self, bucket_dir: Path, experiment: str, run_id: str) -> None:
        check_run_names(experiment, run_id)
        self.dest = bucket_dir / experiment / run_id

    def describe(self) -> str:
        return f"file://{self.dest}"

    def push(self, results_dir: Path) -> Manifest:
        return push_all(self, results_dir)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        keys: dict[str, str] = {}
        try:
            for rel in files:
                try:
                    self._copy(results_dir / rel, rel)
                except OSError as exc:
                    if exc.errno not in _NAME_REFUSED:
                        raise
                    # A filesystem that takes UTF-8 only, or no ":" (vfat, exFAT, a UTF-8-only ZFS, APFS):
                    # the name is refused, not the data.
                    keys[rel] = free_key(_fs_escape(rel), {*files, *keys.values()})
                    self._copy(results_dir / rel, keys[rel])
        except OSError as exc:
            raise SyncError(
                f"copy to {self.describe()} failed: {exc.strerror or exc}",
                hint="free space or fix permissions there, then run: python -m gpuc.instance_side sync",
            ) from None
        return Manifest(self.describe(), dict(files), keys=keys)

    def _copy(self, source: Path, key: str) -> None:
        target = self.dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        # A short name of its own, beside the target (a rename stays in one filesystem): never longer than the
        # target's, and one no other writer picks (the final sync and a push may run at once).
        part = target.parent / f"{PART_PREFIX}{os.getpid()}-{next(_PARTS)}"
        try:
            shutil.copyfile(source, part)
            os.replace(part, target)
        finally:
            with contextlib.suppress(OSError):
                part.unlink()

    def verify(self, manifest: Manifest) -> bool:
        if not manifest.files:
            return True
        remote = local_listing(self.dest) if self.dest.is_dir() else {}
        return listing_matches(manifest.stored(), remote)


PART_PREFIX = ".gpuc-part-"  # a file:// copy under way (or cut): never a result, never restored


_PARTS = itertools.count()
