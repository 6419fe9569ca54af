"""`gpuc run POD --clean`: results/ emptied on the pod before the next job, of what the destination holds.

A warm pod's results/ carries over from one job to the next (a resumable script resumes the last run). To
start clean, the pod removes what the results destination already has, and nothing else:

1. no job runs and no ending is under way (the laptop checked; checked here again: never under a job);
2. a push (push.py: what changed since the last verified push, each file verified at the destination by name
   and size); a push that fails, or a pod with nowhere to push, deletes nothing;
3. a file goes only when it is a regular file reached without following a link, and its size and mtime are
   what the verified push manifest lists for it: what is at the destination is this file as it is now.
   Anything else stays, and is named: a file written since (or in the last SETTLE_S: not pushed yet), one
   that could not be read, a link (never followed to delete what it points at);
4. folders left empty go too.

What was removed is still at the destination (`gpuc results`, `gpuc logs --job`); the sync never deletes
there, so the next job's results join it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpuc.core.clock import Clock
from gpuc.core.errors import SyncError
from gpuc.instance_side.podfiles import PodPaths, end_marker, ending_under_way
from gpuc.instance_side.procs import JobScanError, job_alive, read_job_stamp
from gpuc.instance_side.push import SETTLE_S, PushManifest, PushReport, manifest_path, push_once
from gpuc.instance_side.sync import ResultsSync, destination

PUSH_WAIT_S = 120.0  # a push under way (the agent's, or the job's final sync) is waited for this long
KEPT_NAMED = 20


class NotCleaned(Exception):
    """results/ was left as it was: why, in words (nothing was deleted)."""


@dataclass
class Cleaned:
    removed: int = 0
    removed_bytes: int = 0
    kept: list[str] = field(default_factory=list)  # what stays, and why ("a.txt (written since the push)")
    destination: str = ""


def clean_results(paths: PodPaths, sync: ResultsSync, clock: Clock) -> Cleaned:
    """Push results/, then remove what the destination holds as it is (the module's rules). NotCleaned when
    nothing may be removed: a job runs, the pod is ending, no destination, the push failed."""
    _no_job(paths)
    dest = destination(sync)
    if dest is None:
        raise NotCleaned(f"results/ has nowhere verified to go ({sync.describe()}): it exists only on the pod")
    report = _push(paths, sync, clock)
    if report.waiting:  # written in the last SETTLE_S: still being written, or just finished; once more
        clock.sleep(SETTLE_S)
        report = _push(paths, sync, clock)
    manifest = PushManifest.load(manifest_path(paths))
    if manifest.destination != dest.describe():
        raise NotCleaned(f"no verified push to {dest.describe()} is recorded on the pod")
    done = Cleaned(destination=dest.describe())
    _remove(paths.results, paths.results, manifest, done)
    return done


def _no_job(paths: PodPaths) -> None:
    """As `ask job-state` tells it; what cannot be read refuses (a job's results/ is never touched)."""
    try:
        stamp = read_job_stamp(paths.job)
        ending = ending_under_way(paths) or end_marker(paths) is not None
    except (JobScanError, OSError, ValueError) as exc:
        raise NotCleaned(f"cannot tell whether a job runs ({type(exc).__name__}): results/ is not touched") from None
    if stamp is not None and stamp[0] > 0 and job_alive(*stamp):
        raise NotCleaned(f"a job is running (pid {stamp[0]}): its results/ is not touched")
    if ending:
        raise NotCleaned("the pod is ending (its results sync is under way)")


def _push(paths: PodPaths, sync: ResultsSync, clock: Clock) -> PushReport:
    until = time.monotonic() + PUSH_WAIT_S
    while True:
        report = push_once(sync, paths, clock)
        if report is not None:
            break
        if time.monotonic() > until:
            raise NotCleaned(f"a results push has been under way for over {PUSH_WAIT_S:.0f} s: try again later")
        clock.sleep(1.0)
    if report.error is not None:
        raise NotCleaned(f"the push to {report.destination or sync.describe()} failed: {report.error}")
    return report


def _remove(root: Path, folder: Path, manifest: PushManifest, done: Cleaned) -> None:
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError as exc:
        _keep(done, folder.relative_to(root).as_posix() or "results/", f"cannot be read: {exc.strerror or exc}")
        return
    for entry in entries:
        path = Path(entry.path)
        name = path.relative_to(root).as_posix()
        try:
            st = os.lstat(path)
        except OSError as exc:
            _keep(done, name, f"cannot be read: {exc.strerror or exc}")
            continue
        if stat.S_ISLNK(st.st_mode):
            _keep(done, name, "a link: what it points at is not deleted through it")
        elif stat.S_ISDIR(st.st_mode):
            _remove(root, path, manifest, done)
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty: what stays keeps its folder
        elif not stat.S_ISREG(st.st_mode):
            _keep(done, name, "not a regular file")
        elif manifest.files.get(name) != (st.st_size, st.st_mtime_ns) or name in manifest.waiting:
            _keep(done, name, "not at the destination as it is now (written since the push)")
        else:
            try:
                path.unlink()
            except OSError as exc:
                _keep(done, name, f"cannot be removed: {exc.strerror or exc}")
                continue
            done.removed += 1
            done.removed_bytes += st.st_size


def _keep(done: Cleaned, name: str, why: str) -> None:
    done.kept.append(f"{name} ({why})")


def answer(paths: PodPaths, clock: Clock | None = None) -> dict[str, object]:
    """`ask clean-results`: the pod's own sync (its config and secrets), then the clean; one JSON object."""
    from gpuc.instance_side.context import load_context
    from gpuc.instance_side.sync import make_sync, with_job_log

    ctx = load_context(paths, role="clean", clock=clock)
    sync = with_job_log(make_sync(ctx.cfg, ctx.secrets, paths=paths), paths)
    try:
        done = clean_results(paths, sync, ctx.clock)
    except SyncError as exc:
        raise NotCleaned(ctx.log.scrub(exc.message)) from None
    except NotCleaned as exc:
        ctx.log.line(f"results/ not cleaned: {exc}")
        raise NotCleaned(ctx.log.scrub(str(exc))) from None
    ctx.log.line(f"results/ cleaned: {done.removed} files removed ({done.removed_bytes} bytes), {len(done.kept)} kept")
    return {
        "removed": done.removed,
        "removed_bytes": done.removed_bytes,
        "kept": [ctx.log.scrub(k)[:300] for k in done.kept[:KEPT_NAMED]],
        "kept_count": len(done.kept),
        "destination": ctx.log.scrub(done.destination)[:300],
    }
