"""The periodic results push: results leave the pod while the job runs, a little at a time, and whatever a push
leaves at the destination -- finished, or cut at any point by an outbid that kills the pod's processes -- is what
the job had written up to some moment: a restore never holds a file without the files written before it.

What is sent. Only what changed since the last VERIFIED push (a file whose (size, mtime) differ from the last
manifest, or that it does not list), oldest modification first. A file modified within the settle window
(`GPUC_SYNC_SETTLE_S`, 5 s) may still be being written: it waits, and so does every file modified after it (a
push never sends a newer file past an older one held back: the cause of the steps 15-18 lost in the recovery
end-to-end test was a file written after the push read its clock, taken as settled and sent, while the files
written in the second before it were held back). A file still being written at two pushes in a row (a log
appended every second never settles) goes as a copy of what it holds then, if it is small (SNAPSHOT_MAX) and
nothing older waits; when something older waits, that copy is kept on the pod and the next push sends it once
everything older than it has gone ("the last stable copy": a checkpoint of a few MB rewritten every step still
reaches the destination, one push late, instead of never).

How it is sent. Each file goes as the version the push listed, or not at all: a small one (up to SNAPSHOT_MAX)
is copied into a staging folder first, checked unchanged before and after the copy; a large one is hard-linked
there (a job that saves with a rename, docs/interruptible.md, replaces the file, not the linked version) and
checked again after it was sent (one rewritten in place meanwhile may have gone torn: the push fails, marks it
`suspect` at the destination so that a restore refuses it, and sends it again next time). Where a link cannot
be made (another filesystem), the file is sent from its place, with the same checks. The copies are sent a part
at a time (STAGE_MAX) so they never fill the pod's disk. The destination takes the files one by one in that
order, each whole or not at all (an S3 PUT through the run's grant, instance_side/grants.py; the file://
destination writes a temporary file and renames it).

Why this mechanism. Sending in modification order with a cutoff makes every moment of the destination a prefix,
so nothing needs rolling back: a push killed between any two requests leaves a state a restore can use as it is.
The alternatives cost more where it matters: copying all of results/ to a snapshot each push doubles the disk
I/O and space of every checkpoint; versioned keys would hide the results from anyone reading the bucket; and no
S3-compatible store renames. A modification time further ahead of the clock than the window (a time copied with
a file, a clock set back) is not a write happening now: the file is whole, and takes its place at the window's
edge.

What a restore reads (resume.py). Before the first file of a push leaves, the push manifest at the destination
(`logs/push-manifest.json`) is replaced by one that says what is about to come, in order (`sending`), beside
what the last verified push left (`files`) and what a push that did not finish may have left (`maybe`); after
the files verified, by one that lists the destination's new state. A restore lists the destination and takes
every file the manifest lists plus, of those announced, the ones that arrived, up to the first that did not:
never a stale manifest's view, never a file past a gap. Files modified in the same clock tick are sent new
names first, then the ones the destination already holds a version of, and a restore takes a tick's new files
all or none (the order inside one tick is unknown). A restore starts the new pod's own manifest from what it
restored (`adopt`): its pushes then send what the job changes, and announce each file beside the version there.

The manifest is kept on the pod too (`<state>/push-manifest.json`, what the next push compares with), so a later
pod (spot recovery) or the laptop after the pod is gone (`gpuc results`) can read what the last push left
there, and when. Nothing here reads a file it does not send, and nothing is hashed: checking an unchanged tree
of 10,000 files is a walk and a dict compare (bench/push_scan.py).

A push runs as its own process (`python -m gpuc.instance_side push`, started by the agent), at low CPU and
I/O priority: the agent's heartbeats never wait on an upload, an upload never weighs on the agent's memory,
and a push under way finishes even if the agent dies. One push at a time (push.lock). Its outcome is
`<state>/push.json`: what the heartbeat reports to the watchdog (when, how many files, where).

The final sync at the job's end stays the gate it is (joblogsync.py, pushrecord.py, ending.py): a full push,
verified, oldest first, announced the same way.

The parts: pushplan.py (what one push sends, in what order), pushmanifest.py (what is kept and published),
this module (one push: staged, sent, verified, recorded), pushrecord.py (a whole sync as a push, a restore's
start), pushrun.py (a push as the agent runs it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuc.core.clock import Clock
from gpuc.instance_side.beside import JOB_LOG_NAME, OUTCOME_NAME, snapshot
from gpuc.instance_side.manifest import BucketSync, Manifest
from gpuc.instance_side.podfiles import PodPaths, atomic_write
from gpuc.instance_side.pushmanifest import (
    FILE,
    HELD,
    MANIFEST_NAME,
    Pending,
    PushManifest,
    PushReport,
    Send,
    Stamp,
    held_path,
    manifest_path,
    merged_versions,
    stage_path,
)
from gpuc.instance_side.pushplan import SETTLE_S, SNAPSHOT_MAX, Plan, plan
from gpuc.instance_side.scan import Listing, scan_results

# A push copies the small files it sends (an exact version, whatever the job does to the file meanwhile), and
# sends them a part at a time so that the copies never hold more than this of the pod's disk.
STAGE_MAX = 256 * 1024 * 1024


class _Moved(Exception):
    """The file is no longer the version the listing saw: it, and everything after it, waits."""


class ChangedWhileSent(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"results/{name} changed while it was sent (rewritten in place?): it goes again at the next push; "
            "save checkpoints to a temporary name and rename them (docs/interruptible.md)"
        )


class IncrementalPush:
    def __init__(self, dest: BucketSync, paths: PodPaths, clock: Clock, *, settle_s: float = SETTLE_S) -> None:
        self.dest = dest
        self.paths = paths
        self.clock = clock
        self.settle_s = max(0.0, settle_s)

    def run(self) -> PushReport:
        """One push. Raises (SyncError, OSError, ChangedWhileSent) when it failed: the manifest on the pod then
        stays as it was, and what the destination may hold of it is remembered (`maybe`) for the next one."""
        last = PushManifest.load(manifest_path(self.paths))
        where = self.dest.describe()
        if last.destination and last.destination != where:
            last = PushManifest()  # another destination (changed settings): it holds none of it
        pending = Pending.load(self.paths, where)
        stage = stage_path(self.paths)
        shutil.rmtree(stage, ignore_errors=True)
        listing = scan_results(self.paths.results)
        now = self.clock.now()  # after the listing: a file written while it was made is new, not settled
        held = _held_copies(self.paths)
        planned = plan(listing, last, now, self.settle_s, held=held, known={*last.files, *pending.versions})
        _take_copies(self.paths, listing, last, planned, now - self.settle_s, stage / "held")
        staged: list[Send] = []
        sent = Manifest(where)
        if planned.send:
            intent = PushManifest(
                where, now, dict(last.files), dict(last.keys), planned.waiting,
                tuple((s.name, s.size, s.mtime) for s in planned.send), merged_versions(last.maybe, pending.versions),
                last.beside, pending.suspect,
            )  # fmt: skip
            # Before anything leaves: a push killed or failed from here on is remembered by the next one.
            pending = pending.adding(planned.send)
            pending.save(self.paths, where)
            staged, sent = _Sender(self.dest, self.paths, stage / "results", pending, where).send(
                planned.send, intent, listing.files
            )
        unsent = {s.name for s in planned.send[len(staged) :] if s.how != HELD}
        waiting = tuple(sorted({*planned.waiting, *unsent}))
        sent_now = {s.name: s.stamp for s in staged}
        sources = {JOB_LOG_NAME: self.paths.job_log, OUTCOME_NAME: self.paths.outcome}
        # A name results/ holds is the job's own: gpuc's copy of its log never goes over it.
        logs = self._snapshots({n: src for n, src in sources.items() if n not in listing.files}, last, stage / "logs")
        stamps = _stamps_after(listing, last, sent_now)
        stamps.update(logs)
        keys = {n: k for n, k in {**last.keys, **sent.keys}.items() if n in stamps}
        pending = pending.after(sent_now, listing.files)
        pushed = PushManifest(
            where, now, stamps, keys, waiting, (), dict(pending.versions), tuple(sorted(logs)), pending.suspect
        )
        if planned.send or stamps != last.files or keys != last.keys or pending.versions != last.maybe:
            # (An announcement went: it is replaced, even if nothing followed it.) Nothing changed: nothing is
            # written at the destination (a git remote gets no empty commit every interval); the destination is
            # as current as the pod's results, which is what `at` says.
            publish(self.dest, pushed, listing.files, stage / "manifest")
        atomic_write(manifest_path(self.paths), pushed.to_json(), 0o600)
        pending.save(self.paths, where)
        _drop_copies(self.paths, pushed)
        shutil.rmtree(stage, ignore_errors=True)
        return PushReport(
            at=now,
            files=sum(1 for name in stamps if name not in logs),
            sent=len(staged),
            sent_bytes=sum(s.size for s in staged),
            waiting=len(waiting),
            destination=where,
        )

    def _snapshots(self, sources: Mapping[str, Path], last: PushManifest, stage: Path) -> dict[str, Stamp]:
        """gpuc's own files beside the results (the job's log and outcome), sent as a copy of what they hold now:
        a file that grows while it is sent must stay the size that is verified. Only what changed since `last`.
        Returns each one's stamp: (size sent, mtime), mtime 0 when it grew meanwhile (sent again next time)."""
        kept: dict[str, Stamp] = {}
        changed: dict[str, int] = {}
        for name, src in sources.items():
            try:
                st = src.stat()
            except OSError:
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            if last.files.get(name) == stamp:
                kept[name] = stamp
                continue
            target = stage / name
            target.parent.mkdir(parents=True, exist_ok=True)
            snapshot(src, target, None)
            size = target.stat().st_size
            changed[name] = size
            kept[name] = (size, st.st_mtime_ns) if size == st.st_size else (size, 0)
        _send(self.dest, stage, changed)
        return kept


class _Sender:
    """The files of one push, in order, each as the version the listing saw: staged (a copy when small, a hard
    link when large) and sent a part at a time, so the copies never take more than STAGE_MAX of the pod's disk.
    The intent goes with the first part, ahead of the files."""

    def __init__(self, dest: BucketSync, paths: PodPaths, stage: Path, pending: Pending, where: str) -> None:
        self.dest = dest
        self.paths = paths
        self.stage = stage
        self.pending = pending
        self.where = where
        self.sent: list[Send] = []
        self.parts: list[Manifest] = []

    def send(
        self, sends: Iterable[Send], intent: PushManifest, results: Mapping[str, int]
    ) -> tuple[list[Send], Manifest]:
        first: dict[str, int] = {}
        if MANIFEST_NAME not in results:  # the job's own file of that name is never overwritten
            first[MANIFEST_NAME] = _write(self.stage / MANIFEST_NAME, intent.to_json())
        part: list[tuple[Send, bool]] = []
        copied = 0
        for send in sends:
            try:
                linked = _stage_one(send, self.paths, self.stage)
            except _Moved:
                break  # it, and everything after it, waits for the next push
            part.append((send, linked))
            copied += 0 if linked else send.size
            if copied >= STAGE_MAX:
                self._part(part, first, intent)
                part, first, copied = [], {}, 0
        if part or first:
            self._part(part, first, intent)
        if not all(self.dest.verify(manifest) for manifest in self.parts):
            raise NotVerified(self.where)
        keys = {name: key for manifest in self.parts for name, key in manifest.keys.items()}
        return self.sent, Manifest(self.where, {s.name: s.size for s in self.sent}, keys=keys)

    def _part(self, part: list[tuple[Send, bool]], first: Mapping[str, int], intent: PushManifest) -> None:
        files = {**first, **{send.name: send.size for send, _ in part}}
        self.parts.append(self.dest.push_files(self.stage, files))
        changed = [send.name for send, linked in part if linked and stamp_of(self.stage / send.name) != send.stamp]
        if changed:
            self._suspect(changed, intent)
        self.sent.extend(send for send, _ in part)
        shutil.rmtree(self.stage, ignore_errors=True)

    def _suspect(self, names: list[str], intent: PushManifest) -> None:
        """A large file rewritten in place while it was sent may have reached the destination torn, at a size a
        restore would take: say so there at once (a restore then refuses rather than resume from it), and keep
        saying so until a push sends it whole."""
        self.pending = dataclasses.replace(self.pending, suspect=tuple(sorted({*self.pending.suspect, *names})))
        self.pending.save(self.paths, self.where)
        marked = dataclasses.replace(intent, suspect=self.pending.suspect)
        with contextlib.suppress(Exception):
            publish(self.dest, marked, {}, self.stage.parent / "suspect")
        raise ChangedWhileSent(names[0])


def _write(path: Path, text: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return len(text.encode())


def _send(dest: BucketSync, root: Path, files: Mapping[str, int]) -> Manifest:
    if not files:
        return Manifest(dest.describe())
    manifest = dest.push_files(root, files)
    if not dest.verify(manifest):
        raise NotVerified(dest.describe())
    return manifest


def publish(dest: BucketSync, pushed: PushManifest, results: Mapping[str, int], stage: Path) -> None:
    """The manifest at the destination, after the files it lists verified: what it says is there, is."""
    if MANIFEST_NAME in results:
        return  # the job's own file of that name: never overwritten
    _send(dest, stage, {MANIFEST_NAME: _write(stage / MANIFEST_NAME, pushed.to_json())})


def _stamps_after(listing: Listing, last: PushManifest, sent: Mapping[str, Stamp]) -> dict[str, Stamp]:
    """What the destination holds of each file of results/ once this push verified: what it sent, else what it
    held already (a file that waits keeps its last version there, if it has one). A file gone from results/ is
    no longer listed (so never restored), though the destination keeps it."""
    stamps: dict[str, Stamp] = {}
    for name in listing.files:
        if name in sent:
            stamps[name] = sent[name]
        elif name in last.files:
            stamps[name] = last.files[name]  # unchanged, or waiting: the version the destination holds
    return stamps


def stamp_of(path: Path) -> Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _stage_one(send: Send, paths: PodPaths, stage: Path) -> bool:
    """`send`'s version at stage/<name>: a copy (a small file, a kept copy: nothing the job does to the file
    changes it), or for a large file a hard link (a job that saves with a rename replaces the file, not this
    version; one that rewrites it in place is caught after the send). True when linked. Raises _Moved if the
    file is no longer that version."""
    target = stage / send.name
    target.parent.mkdir(parents=True, exist_ok=True)
    source = (stage.parent / "held" if send.how == HELD else paths.results) / send.name
    if send.how != FILE or send.size <= SNAPSHOT_MAX:
        _copy_exact(source, target, send.stamp)
        return False
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise _Moved(send.name) from None
    except OSError:
        # Another filesystem (results/ holds a link to a mounted volume), or one without hard links: sent from
        # its place, checked before and after it went.
        target.symlink_to(source.absolute())
    if stamp_of(target) != send.stamp:
        raise _Moved(send.name)
    return True


def _copy_exact(source: Path, target: Path, stamp: Stamp) -> None:
    """A copy of `source` that is the version `stamp` names: unchanged before the copy and after it."""
    if stamp_of(source) != stamp:
        raise _Moved(source.name)
    try:
        snapshot(source, target, None)
    except OSError:
        raise _Moved(source.name) from None
    copied = stamp_of(target)
    if stamp_of(source) != stamp or copied is None or copied[0] != stamp[0]:
        raise _Moved(source.name)


# -- copies kept for the next push ------------------------------------------------------------------------
def _held_copies(paths: PodPaths) -> dict[str, Stamp]:
    """name -> the stamp of the copy kept of it (its mtime set to the version's own)."""
    root = held_path(paths)
    if not root.is_dir():
        return {}
    found = scan_results(root)
    return {name: (size, found.mtimes.get(name, 0)) for name, size in found.files.items()}


def _take_copies(
    paths: PodPaths, listing: Listing, last: PushManifest, planned: Plan, horizon_s: float, sending: Path
) -> None:
    """Best effort, as the push starts (the versions it listed are still there). The kept copies it sends are moved
    out of the way (into `sending`); then each small file that waits is copied, if it settled (held back only by
    something older) or was waiting at the last push too (a log appended all the time: any moment of it is
    whole), unless an older copy is still kept (it goes first). A file new in the window may be half written: it is
    not copied."""
    root = held_path(paths)
    for send in planned.send:
        if send.how == HELD:
            (sending / send.name).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.replace(root / send.name, sending / send.name)
    horizon = int(horizon_s * 1e9)
    for name in planned.waiting:
        size, mtime = listing.files.get(name, 0), listing.mtimes.get(name, 0)
        if size > SNAPSHOT_MAX or (mtime > horizon and name not in last.waiting) or (root / name).is_file():
            continue
        target = root / name
        part = target.with_name(f".{target.name}.part")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_exact(paths.results / name, part, (size, mtime))
            os.utime(part, ns=(mtime, mtime))
            os.replace(part, target)
        except (_Moved, OSError):
            with contextlib.suppress(OSError):
                part.unlink()


def _drop_copies(paths: PodPaths, pushed: PushManifest) -> None:
    """After a verified push: the copies the destination has caught up with, or of files that no longer wait."""
    for name, (_size, mtime) in _held_copies(paths).items():
        there = pushed.files.get(name)
        if name not in pushed.waiting or (there is not None and there[1] >= mtime):
            with contextlib.suppress(OSError):
                (held_path(paths) / name).unlink()


class NotVerified(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(f"the listing at {where} does not match what was sent")
