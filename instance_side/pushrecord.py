"""A whole sync (the job's end, `sync` by hand) in the push's terms: announced at the destination before its
files go, recorded as a push once verified; and the push manifest a restore starts a new pod with.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping

from gpuc.core.clock import Clock, SystemClock
from gpuc.instance_side.beside import per_job
from gpuc.instance_side.manifest import BucketSync, Manifest
from gpuc.instance_side.podfiles import PodPaths, atomic_write, try_lock
from gpuc.instance_side.push import publish, stamp_of
from gpuc.instance_side.pushmanifest import (
    FILE,
    MANIFEST_NAME,
    Pending,
    PushManifest,
    PushReport,
    Send,
    Stamp,
    held_path,
    lock_path,
    manifest_path,
    merged_versions,
    stage_path,
    state_path,
)
from gpuc.instance_side.scan import Listing, in_written_order, scan_results


def announce_sync(dest: BucketSync, paths: PodPaths, listing: Listing) -> None:
    """Before a whole sync (the job's end, `sync` by hand) sends every file, oldest first: the manifest at the
    destination says what is coming, as a push's does, so a sync cut midway restores as a prefix too. Skipped
    while a periodic push is under way (it publishes its own); best effort: the gate is the sync's verification."""
    where = dest.describe()
    with try_lock(lock_path(paths)) as held:
        if not held or MANIFEST_NAME in listing.files:
            return
        last = PushManifest.load(manifest_path(paths))
        if last.destination != where:
            last = PushManifest(where)
        sends = [Send(n, s, listing.mtimes.get(n, 0), FILE) for n, s in in_written_order(listing).items()]
        pending = Pending.load(paths, where)
        intent = PushManifest(
            where, last.at, dict(last.files), dict(last.keys), (), tuple((s.name, s.size, s.mtime) for s in sends),
            merged_versions(last.maybe, pending.versions), last.beside, pending.suspect,
        )  # fmt: skip
        pending.adding(sends).save(paths, where)
        stage = stage_path(paths) / "announce"
        shutil.rmtree(stage, ignore_errors=True)
        publish(dest, intent, listing.files, stage)


def adopt(paths: PodPaths, where: str, restored: Mapping[str, tuple[str, int]]) -> None:
    """After a restore (resume.py): the pod's push manifest is what was restored, as the destination `where` holds
    it (name -> (key, size)), stamped with the restored files' own times; nothing pending, no copy kept."""
    stamps: dict[str, Stamp] = {}
    for name, (_key, size) in restored.items():
        found = stamp_of(paths.results / name)
        if found is not None and found[0] == size:
            stamps[name] = found
    keys = {name: key for name, (key, _size) in restored.items() if key != name and name in stamps}
    atomic_write(manifest_path(paths), PushManifest(where, None, stamps, keys).to_json(), 0o600)
    Pending().save(paths, where)
    shutil.rmtree(held_path(paths), ignore_errors=True)


def record_sync(dest: BucketSync, manifest: Manifest, paths: PodPaths, clock: Clock | None = None) -> None:
    """After a verified whole sync: the push manifest (on the pod and at the destination) and push.json say
    what the destination now holds. A file whose size changed since the sync read it is stamped so that the
    next push sends it again."""
    clock = clock or SystemClock()
    listing = scan_results(paths.results)
    stamps = {
        name: (size, listing.mtimes.get(name, 0) if listing.files.get(name) == size else 0)
        for name, size in manifest.files.items()
    }
    # Not each job's own log (sync.per_job): the manifest is what a recovered attempt restores into results/.
    beside = {name: (size, 0) for part in manifest.parts[1:] for name, size in part.files.items() if not per_job(name)}
    where = dest.describe()
    pushed = PushManifest(where, clock.now(), {**stamps, **beside}, dict(manifest.keys), beside=tuple(sorted(beside)))
    with try_lock(lock_path(paths)) as held:
        if not held:
            return  # a periodic push is under way: it records what it verified itself
        publish(dest, pushed, listing.files, stage_path(paths) / "record")
        atomic_write(manifest_path(paths), pushed.to_json(), 0o600)
        Pending().save(paths, where)
        report = PushReport(at=pushed.at, files=len(stamps), sent=len(stamps), destination=where)
        atomic_write(state_path(paths), report.to_json(), 0o600)
