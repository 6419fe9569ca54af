"""The sync that sends the job's log and outcome beside the results, through the same destination, both
verified; a verified whole sync is recorded as a push (instance_side/pushrecord.py).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

from gpuc.core.errors import SyncError
from gpuc.instance_side.beside import ENTRIES_NAME, JOB_LOG_NAME, JOBS_DIR, JOBS_INDEX, OUTCOME_NAME, snapshot
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.gitsync import SplitSync
from gpuc.instance_side.joblog import job_files, jobs_index, read_outcome
from gpuc.instance_side.manifest import BucketSync, Manifest, ResultsSync
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.pushrecord import announce_sync, record_sync
from gpuc.instance_side.s3sync import RunObjects, S3Sync
from gpuc.instance_side.scan import scan_results, shown


def own_job_sources(paths: PodPaths) -> dict[str, Path]:
    """The current job's own log and outcome, under the names they take at the destination."""
    outcome = read_outcome(paths)
    own = job_files(paths, outcome.get("job_id") if outcome else None)
    if own is None:
        return {}
    log, record = own
    return {f"{JOBS_DIR}{log.name}": log, f"{JOBS_DIR}{record.name}": record}


class JobLogSync:
    """Results first, then the job's log and outcome through the same destination, both verified: a pod
    that cannot send them keeps running like one whose results did not go, and says so.

    They are copied into a staging folder first: the job may still be writing its log (a periodic sync),
    and a listing can only match what was sent if what was sent stays the size it was. A name that
    results/ already holds (the job's own logs/job.log) is the job's: gpuc's copy is not sent over it.
    """

    def __init__(self, inner: ResultsSync, paths: PodPaths, *, log_limit: int | None = None) -> None:
        self.inner = inner
        self.paths = paths
        self.log_limit = log_limit

    def describe(self) -> str:
        return self.inner.describe()

    def push(self, results_dir: Path) -> Manifest:
        self._announce(results_dir)
        results = self.inner.push(results_dir)
        stage = self._stage(results_dir, results)
        if stage is None:
            return results
        logs = self.inner.push(stage)
        parts = (results, logs)
        beside = (
            "job log and outcome"
            if {JOB_LOG_NAME, OUTCOME_NAME} & set(logs.files)
            else (ENTRIES_NAME if ENTRIES_NAME in logs.files else JOBS_INDEX)
        )
        note = f"{results.summary()}; {beside} beside them" if logs.files else None
        return Manifest(
            results.destination,
            dict(results.files),
            note=note,
            parts=parts,
            links=results.links,
            keys=results.keys,
            beside=beside if logs.files else None,
        )

    def verify(self, manifest: Manifest) -> bool:
        if len(manifest.parts) != 2:
            ok = self.inner.verify(manifest)
        else:
            ok = all(self.inner.verify(part) for part in manifest.parts)
        if ok:
            self._record(manifest)
        return ok

    def _announce(self, results_dir: Path) -> None:
        """Before the files go: the push manifest at the destination says what is coming, in order, as a periodic
        push's does, so a sync cut midway (an outbid as the job ends) still restores as a prefix. Best effort: the
        gate is the verification."""
        dest = destination(self)
        if dest is None or not results_dir.is_dir():
            return
        with contextlib.suppress(Exception):
            announce_sync(dest, self.paths, scan_results(results_dir))

    def _record(self, manifest: Manifest) -> None:
        """A verified whole sync (the job's end, `sync` by hand) is a push too: the push manifest then says
        what the destination holds, for the laptop once the pod is gone and for a later pod. Best effort:
        the gate is the verification above, never this record."""
        dest = destination(self)
        if dest is None:
            return
        with contextlib.suppress(Exception):
            record_sync(dest, manifest, self.paths)

    def _stage(self, results_dir: Path, results: Manifest) -> Path | None:
        stage = self.paths.log_stage
        shutil.rmtree(stage, ignore_errors=True)
        sources = {JOB_LOG_NAME: self.paths.job_log, OUTCOME_NAME: self.paths.outcome, **own_job_sources(self.paths)}
        wanted = {name: src for name, src in sources.items() if src.is_file() and not (results_dir / name).exists()}
        entries = entries_record(results) if not (results_dir / ENTRIES_NAME).exists() else None
        index = jobs_index(self.paths) if not (results_dir / JOBS_INDEX).exists() else None
        if not wanted and entries is None and index is None:
            return None
        try:
            for name, src in wanted.items():
                target = stage / name
                target.parent.mkdir(parents=True, exist_ok=True)
                snapshot(src, target, self.log_limit if name.endswith(".log") else None)
            for name, text in ((ENTRIES_NAME, entries), (JOBS_INDEX, index)):
                if text is not None:
                    (stage / name).parent.mkdir(parents=True, exist_ok=True)
                    (stage / name).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SyncError(
                f"cannot stage the job's log for the sync: {exc.strerror or exc}", hint="free space on /workspace"
            ) from None
        return stage


def entries_record(manifest: Manifest) -> str | None:
    """What `logs/entries.json` says: each link recorded (it held no data) with its target, and each name
    stored under an escaped key (the key percent-unescapes to the original bytes). None: nothing to say."""
    if not manifest.links and not manifest.keys:
        return None
    record = {
        "links": {shown(name): shown(target) for name, target in sorted(manifest.links.items())},
        "escaped": {key: shown(name) for name, key in sorted(manifest.keys.items())},
    }
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def destination(sync: ResultsSync) -> BucketSync | None:
    """Where files can be sent a few at a time (the incremental push): None without a usable destination."""
    inner = sync.inner if isinstance(sync, JobLogSync) else sync
    if isinstance(inner, (FileBucketSync, S3Sync, SplitSync)):
        return inner
    return None


def run_objects(sync: ResultsSync) -> RunObjects | None:
    """The run's objects at an s3:// destination (the restore reads them), or None."""
    dest = destination(sync)
    inner = dest.bucket if isinstance(dest, SplitSync) else dest
    return inner.objects if isinstance(inner, S3Sync) else None
