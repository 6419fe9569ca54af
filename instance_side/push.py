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

The final sync at the job's end stays the gate it is (sync.py, ending.py): a full push, verified, oldest first,
announced the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpuc.core.clock import Clock
from gpuc.instance_side.podfiles import PodPaths, atomic_write, try_lock
from gpuc.instance_side.sync import (
    JOB_LOG_NAME,
    OUTCOME_NAME,
    BucketSync,
    Listing,
    Manifest,
    ResultsSync,
    destination,
    in_written_order,
    per_job,
    scan_results,
    snapshot,
)

# GPUC_SYNC_SETTLE_S's default (core/settings.py; the pod reads its own from core/podconfig.py's PodConfig, and a
# test holds the three equal): a file modified this recently may still be being written.
SETTLE_S = 5.0
# A file still being written at two pushes in a row is sent as a copy of what it holds, if it is this small; a
# larger one (a checkpoint being saved) waits until it settles.
SNAPSHOT_MAX = 64 * 1024 * 1024
# A push copies the small files it sends (an exact version, whatever the job does to the file meanwhile), and
# sends them a part at a time so that the copies never hold more than this of the pod's disk.
STAGE_MAX = 256 * 1024 * 1024
MANIFEST_NAME = "logs/push-manifest.json"  # at the destination, beside results/ and the job's log
_VERSION = 2

Stamp = tuple[int, int]  # (size, st_mtime_ns): which version of a file
_Pending = dict[str, tuple[Stamp, ...]]


def manifest_path(paths: PodPaths) -> Path:
    return paths.state / "push-manifest.json"


def state_path(paths: PodPaths) -> Path:
    return paths.state / "push.json"


def pending_path(paths: PodPaths) -> Path:
    """Versions a push that did not finish (killed, failed) may have left at the destination."""
    return paths.state / "push-pending.json"


def _lock_path(paths: PodPaths) -> Path:
    return paths.state / "push.lock"


def _stage(paths: PodPaths) -> Path:
    # Not the final sync's log stage: the two may run at once (a push under way when the job ends).
    return paths.state / "push-stage"


def _held(paths: PodPaths) -> Path:
    return paths.state / "push-held"


@dataclass(frozen=True)
class PushManifest:
    """What the destination holds: name -> (size, mtime_ns) as of the last verified push (`files`), and while a
    push is under way what it sends, in order (`sending`), and what an unfinished push may have left (`maybe`).
    `beside`: gpuc's own files next to the results (the job's log and outcome), never restored into results/."""

    destination: str = ""
    at: float | None = None
    files: dict[str, Stamp] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # a name stored under an escaped key (sync.py)
    waiting: tuple[str, ...] = ()  # changed, and its current version not sent by this push
    sending: tuple[tuple[str, int, int], ...] = ()  # (name, size, mtime_ns): a push under way sends these, in order
    maybe: _Pending = field(default_factory=dict)
    beside: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()  # may have reached the destination torn (rewritten in place while sent)
    version: int = _VERSION

    def to_json(self) -> str:
        data = {
            "version": self.version,
            "destination": self.destination,
            "at": self.at,
            "files": {name: list(stamp) for name, stamp in sorted(self.files.items())},
            "keys": dict(sorted(self.keys.items())),
            "waiting": sorted(self.waiting),
            "sending": [list(entry) for entry in self.sending],
            "maybe": {name: [list(s) for s in stamps] for name, stamps in sorted(self.maybe.items())},
            "beside": sorted(self.beside),
            "suspect": sorted(self.suspect),
        }
        return json.dumps(data, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PushManifest:
        """A manifest that cannot be read is an empty one: everything is sent again (never a file skipped)."""
        try:
            data = json.loads(text)
            files = {str(name): _stamp(stamp) for name, stamp in data["files"].items()}
            keys = {str(k): str(v) for k, v in data.get("keys", {}).items()}
            waiting = tuple(str(n) for n in data.get("waiting", []))
            sending = tuple((str(e[0]), int(e[1]), int(e[2])) for e in data.get("sending", []) if len(e) == 3)
            maybe = {str(n): tuple(_stamp(s) for s in stamps) for n, stamps in data.get("maybe", {}).items()}
            beside = tuple(str(n) for n in data.get("beside", []))
            suspect = tuple(str(n) for n in data.get("suspect", []))
            at = data.get("at")
            return cls(
                str(data.get("destination", "")),
                float(at) if at is not None else None,
                files,
                keys,
                waiting,
                sending,
                maybe,
                beside,
                suspect,
                int(data.get("version", 1)),
            )
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return cls()

    @classmethod
    def load(cls, path: Path) -> PushManifest:
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except OSError:
            return cls()


def _stamp(value: Any) -> Stamp:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a stamp is [size, mtime_ns]")
    return int(value[0]), int(value[1])


@dataclass(frozen=True)
class PushReport:
    """The outcome of one push (`<state>/push.json`). `at`/`files`/`destination`: the last VERIFIED push
    (kept when a later one fails); `error`: the latest push's failure, None once one succeeds."""

    at: float | None = None
    files: int = 0
    sent: int = 0
    sent_bytes: int = 0
    waiting: int = 0
    destination: str = ""
    error: str | None = None
    failed_at: float | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True) + "\n"

    @classmethod
    def load(cls, paths: PodPaths) -> PushReport | None:
        try:
            data = json.loads(state_path(paths).read_text(encoding="utf-8"))
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None

    def summary(self) -> str:
        if self.error:
            return f"FAILED: {self.error}"
        wait = f", {self.waiting} still being written (next push)" if self.waiting else ""
        sent = f"{self.sent} changed files ({self.sent_bytes} bytes) sent"
        return f"{sent}, {self.files} in all at {self.destination}{wait}"


# -- what one push sends ----------------------------------------------------------------------------------
FILE, SNAPSHOT, HELD = "file", "snapshot", "held"


@dataclass(frozen=True)
class Send:
    """One version of one file, as a push sends it: the file as it is (FILE, settled), a copy of it made now
    (SNAPSHOT, still being written at two pushes in a row), or the copy an earlier push kept (HELD)."""

    name: str
    size: int
    mtime: int
    how: str

    @property
    def stamp(self) -> Stamp:
        return self.size, self.mtime


@dataclass(frozen=True)
class Plan:
    send: tuple[Send, ...]  # in the order they go: oldest modification first
    waiting: tuple[str, ...]  # changed, and their current version not sent this time


def plan(
    listing: Listing,
    last: PushManifest,
    now: float,
    settle_s: float,
    *,
    held: Mapping[str, Stamp] | None = None,
    known: Collection[str] = (),
) -> Plan:
    """What to send, in what order: every changed file's current version and every kept copy, oldest
    modification first, up to (not including) the first one that cannot go yet -- modified within `settle_s` of
    `now` (read AFTER the listing: a file written while the push listed is new, never settled), and not a small
    file already waiting at the last push. Files of one modification time go together or not at all; among them,
    those the destination holds no version of (not in `known`) go first. A modification time further ahead of
    `now` than the window was not made by a write now (a time copied with the file, a clock set back): such a file
    is whole, and takes its place at the window's edge rather than wait for the clock."""
    horizon = int((now - settle_s) * 1e9)
    ahead = int((now + settle_s) * 1e9)
    held = held or {}
    candidates: list[tuple[int, bool, str, str | None, int]] = []  # (when, known, name, how, size)

    def when(mtime: int) -> int:
        return horizon if mtime > ahead else mtime

    changed = []
    for name, size in listing.files.items():
        mtime = listing.mtimes.get(name, 0)
        there = last.files.get(name)
        if there == (size, mtime):
            continue
        changed.append(name)
        how: str | None = FILE
        if horizon < mtime <= ahead:
            how = SNAPSHOT if name in last.waiting and size <= SNAPSHOT_MAX else None
        candidates.append((when(mtime), name in known, name, how, size))
        kept = held.get(name)
        if kept is not None and kept[1] < mtime and kept[1] > (there or (0, -1))[1]:
            candidates.append((when(kept[1]), name in known, name, HELD, kept[0]))
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    stop = min((c[0] for c in candidates if c[3] is None), default=None)
    chosen = [c for c in candidates if stop is None or c[0] < stop]
    current = {c[2] for c in chosen if c[3] != HELD}
    sends = tuple(
        Send(c[2], c[4], held[c[2]][1] if c[3] == HELD else listing.mtimes.get(c[2], 0), str(c[3]))
        for c in chosen
        if c[3] != HELD or c[2] not in current
    )
    return Plan(sends, tuple(sorted(n for n in changed if n not in current)))


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
        stage = _stage(self.paths)
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
                tuple((s.name, s.size, s.mtime) for s in planned.send), _merged(last.maybe, pending.versions),
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
            _publish(self.dest, pushed, listing.files, stage / "manifest")
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
            raise _NotVerified(self.where)
        keys = {name: key for manifest in self.parts for name, key in manifest.keys.items()}
        return self.sent, Manifest(self.where, {s.name: s.size for s in self.sent}, keys=keys)

    def _part(self, part: list[tuple[Send, bool]], first: Mapping[str, int], intent: PushManifest) -> None:
        files = {**first, **{send.name: send.size for send, _ in part}}
        self.parts.append(self.dest.push_files(self.stage, files))
        changed = [send.name for send, linked in part if linked and _stamp_of(self.stage / send.name) != send.stamp]
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
            _publish(self.dest, marked, {}, self.stage.parent / "suspect")
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
        raise _NotVerified(dest.describe())
    return manifest


def _publish(dest: BucketSync, pushed: PushManifest, results: Mapping[str, int], stage: Path) -> None:
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


def _stamp_of(path: Path) -> Stamp | None:
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
    if _stamp_of(target) != send.stamp:
        raise _Moved(send.name)
    return True


def _copy_exact(source: Path, target: Path, stamp: Stamp) -> None:
    """A copy of `source` that is the version `stamp` names: unchanged before the copy and after it."""
    if _stamp_of(source) != stamp:
        raise _Moved(source.name)
    try:
        snapshot(source, target, None)
    except OSError:
        raise _Moved(source.name) from None
    copied = _stamp_of(target)
    if _stamp_of(source) != stamp or copied is None or copied[0] != stamp[0]:
        raise _Moved(source.name)


# -- copies kept for the next push ------------------------------------------------------------------------
def _held_copies(paths: PodPaths) -> dict[str, Stamp]:
    """name -> the stamp of the copy kept of it (its mtime set to the version's own)."""
    root = _held(paths)
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
    root = _held(paths)
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
                (_held(paths) / name).unlink()


# -- what may be at the destination besides the last verified push ----------------------------------------
def _merged(a: Mapping[str, tuple[Stamp, ...]], b: Mapping[str, tuple[Stamp, ...]]) -> _Pending:
    out = {n: tuple(v) for n, v in a.items()}
    for name, stamps in b.items():
        out[name] = tuple(dict.fromkeys((*out.get(name, ()), *stamps)))
    return out


@dataclass(frozen=True)
class Pending:
    """What a push that did not finish (killed, failed) may have left at the destination beyond the last verified
    push: versions by name, and files that may have gone torn (`suspect`). Kept on the pod until a verified push
    sends those names again; told to a restore through the manifest (`maybe`, `suspect`)."""

    versions: _Pending = field(default_factory=dict)
    suspect: tuple[str, ...] = ()

    def adding(self, sends: Iterable[Send]) -> Pending:
        added: dict[str, tuple[Stamp, ...]] = {}
        for send in sends:
            added[send.name] = (*added.get(send.name, ()), send.stamp)
        return Pending(_merged(self.versions, added), self.suspect)

    def after(self, sent: Collection[str], present: Collection[str]) -> Pending:
        """Once a push verified: what it sent is whole at the destination; a file gone from results/ is no longer
        listed (never restored), so what was left of it no longer matters."""
        versions = {n: v for n, v in self.versions.items() if n in present and n not in sent}
        return Pending(versions, tuple(n for n in self.suspect if n in present and n not in sent))

    @classmethod
    def load(cls, paths: PodPaths, where: str) -> Pending:
        try:
            data = json.loads(pending_path(paths).read_text(encoding="utf-8"))
            if data.get("destination") != where:
                return cls()
            versions = {str(n): tuple(_stamp(s) for s in stamps) for n, stamps in data["names"].items()}
            return cls(versions, tuple(str(n) for n in data.get("suspect", [])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()

    def save(self, paths: PodPaths, where: str) -> None:
        if not self.versions and not self.suspect:
            with contextlib.suppress(OSError):
                pending_path(paths).unlink()
            return
        names = {n: [list(s) for s in stamps] for n, stamps in sorted(self.versions.items())}
        data = {"destination": where, "names": names, "suspect": list(self.suspect)}
        atomic_write(pending_path(paths), json.dumps(data) + "\n", 0o600)


# -- the final sync -------------------------------------------------------------------------------------
def announce_sync(dest: BucketSync, paths: PodPaths, listing: Listing) -> None:
    """Before a whole sync (the job's end, `sync` by hand) sends every file, oldest first: the manifest at the
    destination says what is coming, as a push's does, so a sync cut midway restores as a prefix too. Skipped
    while a periodic push is under way (it publishes its own); best effort: the gate is the sync's verification."""
    where = dest.describe()
    with try_lock(_lock_path(paths)) as held:
        if not held or MANIFEST_NAME in listing.files:
            return
        last = PushManifest.load(manifest_path(paths))
        if last.destination != where:
            last = PushManifest(where)
        sends = [Send(n, s, listing.mtimes.get(n, 0), FILE) for n, s in in_written_order(listing).items()]
        pending = Pending.load(paths, where)
        intent = PushManifest(
            where, last.at, dict(last.files), dict(last.keys), (), tuple((s.name, s.size, s.mtime) for s in sends),
            _merged(last.maybe, pending.versions), last.beside, pending.suspect,
        )  # fmt: skip
        pending.adding(sends).save(paths, where)
        stage = _stage(paths) / "announce"
        shutil.rmtree(stage, ignore_errors=True)
        _publish(dest, intent, listing.files, stage)


def adopt(paths: PodPaths, where: str, restored: Mapping[str, tuple[str, int]]) -> None:
    """After a restore (resume.py): the pod's push manifest is what was restored, as the destination `where` holds
    it (name -> (key, size)), stamped with the restored files' own times; nothing pending, no copy kept."""
    stamps: dict[str, Stamp] = {}
    for name, (_key, size) in restored.items():
        found = _stamp_of(paths.results / name)
        if found is not None and found[0] == size:
            stamps[name] = found
    keys = {name: key for name, (key, _size) in restored.items() if key != name and name in stamps}
    atomic_write(manifest_path(paths), PushManifest(where, None, stamps, keys).to_json(), 0o600)
    Pending().save(paths, where)
    shutil.rmtree(_held(paths), ignore_errors=True)


def record_sync(dest: BucketSync, manifest: Manifest, paths: PodPaths, clock: Clock | None = None) -> None:
    """After a verified whole sync: the push manifest (on the pod and at the destination) and push.json say
    what the destination now holds. A file whose size changed since the sync read it is stamped so that the
    next push sends it again."""
    from gpuc.core.clock import SystemClock

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
    with try_lock(_lock_path(paths)) as held:
        if not held:
            return  # a periodic push is under way: it records what it verified itself
        _publish(dest, pushed, listing.files, _stage(paths) / "record")
        atomic_write(manifest_path(paths), pushed.to_json(), 0o600)
        Pending().save(paths, where)
        report = PushReport(at=pushed.at, files=len(stamps), sent=len(stamps), destination=where)
        atomic_write(state_path(paths), report.to_json(), 0o600)


class _NotVerified(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(f"the listing at {where} does not match what was sent")


# -- low priority ------------------------------------------------------------------------------------
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_IDLE = 3
_IOPRIO_CLASS_SHIFT = 13
_SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "i686": 289, "armv7l": 314}


def lower_priority() -> str:
    """CPU nice 19 and the idle I/O class for this process, so a push never slows the job. Best effort:
    what could not be lowered is said, never raised (a push at normal priority beats no push)."""
    said = []
    try:
        os.nice(19 - os.nice(0))
        said.append("nice 19")
    except OSError:
        said.append("nice unchanged")
    said.append("io idle" if _io_idle() else "io priority unchanged")
    return ", ".join(said)


def _io_idle() -> bool:
    number = _SYS_IOPRIO_SET.get(os.uname().machine)
    if number is None or not sys.platform.startswith("linux"):
        return False
    import ctypes  # lazy: only the push's own process lowers its I/O class, never the agent

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = _IOPRIO_CLASS_IDLE << _IOPRIO_CLASS_SHIFT
        return int(libc.syscall(number, _IOPRIO_WHO_PROCESS, 0, value)) == 0
    except (OSError, AttributeError):
        return False


def io_class(pid: int = 0) -> int | None:
    """This process's I/O scheduling class (3: idle), for the tests and the bench; None if unreadable."""
    number = {"x86_64": 252, "aarch64": 31, "i686": 290, "armv7l": 315}.get(os.uname().machine)
    if number is None:
        return None
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = int(libc.syscall(number, _IOPRIO_WHO_PROCESS, pid))
    except (OSError, AttributeError):
        return None
    return None if value < 0 else value >> _IOPRIO_CLASS_SHIFT


# -- one push, as a process ---------------------------------------------------------------------------
def start_push(paths: PodPaths, environ: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | None:
    """`python -m gpuc.instance_side push` in a session of its own: it outlives the agent that started it
    (a kill of the agent's process group too). None when it could not start."""
    out = paths.state / "push.out"
    try:
        with out.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "gpuc.instance_side", "push"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ if environ is None else environ),
                start_new_session=True,
            )
    except OSError:
        return None


def heartbeat_fields(report: PushReport | None, now: float) -> dict[str, Any]:
    """What the heartbeat says of the last verified push (core.api.HeartbeatBody): how long ago, how many
    files, where. Seconds ago, not a time: the pod's clock may be off, the watchdog's is not."""
    if report is None or report.at is None:
        return {}
    # Inside core.api's bounds whatever the pod holds: a heartbeat the watchdog refuses is a silent pod.
    return {
        "pushed_ago_s": round(min(max(0.0, now - report.at), _WIRE_MAX_S), 1),
        "pushed_files": min(max(0, int(report.files)), _WIRE_MAX_COUNT),
        "pushed_to": report.destination[:300],
    }


_WIRE_MAX_S = 366 * 86400.0  # core.api.MAX_LIMIT_S
_WIRE_MAX_COUNT = 1_000_000  # core.api.Count


# -- the agent's side -------------------------------------------------------------------------------
class Pusher(Protocol):
    """How the agent runs a push: `start` one (nothing if one is under way), `finished` hands over the
    report of a push that ended since the last call, `last` is what push.json says now."""

    def start(self) -> None: ...

    def finished(self) -> PushReport | None: ...

    def last(self) -> PushReport | None: ...


def push_once(sync: ResultsSync, paths: PodPaths, clock: Clock, *, settle_s: float = SETTLE_S) -> PushReport | None:
    """One push under the lock, its outcome written to push.json. None: another push is under way.
    Without a destination that takes files a few at a time (none configured, unusable, a test's fake),
    the push is the sync's own whole push, verified: the same outcome as before, said the same way."""
    with try_lock(_lock_path(paths)) as held:
        if not held:
            return None
        previous = PushReport.load(paths) or PushReport()
        dest = destination(sync)
        try:
            if dest is not None:
                report = IncrementalPush(dest, paths, clock, settle_s=settle_s).run()
            else:
                report = _whole(sync, paths, clock)
        except Exception as exc:
            report = PushReport(
                at=previous.at,
                files=previous.files,
                destination=previous.destination or sync.describe(),
                error=(str(exc) or type(exc).__name__)[:300],
                failed_at=clock.now(),
            )
        with contextlib.suppress(OSError):
            atomic_write(state_path(paths), report.to_json(), 0o600)
        return report


def _whole(sync: ResultsSync, paths: PodPaths, clock: Clock) -> PushReport:
    now = clock.now()
    manifest = sync.push(paths.results)
    if not sync.verify(manifest):
        raise _NotVerified(sync.describe())
    return PushReport(
        at=now,
        files=len(manifest.files),
        sent=len(manifest.files),
        sent_bytes=manifest.total_bytes,
        destination=sync.describe(),
    )


class InlinePusher:
    """The push in the agent's own process, to its end (tests, the drill's stand-in pods)."""

    def __init__(self, sync: ResultsSync, paths: PodPaths, clock: Clock, *, settle_s: float = SETTLE_S) -> None:
        self.sync = sync
        self.paths = paths
        self.clock = clock
        self.settle_s = settle_s
        self._done: PushReport | None = None

    def start(self) -> None:
        self._done = push_once(self.sync, self.paths, self.clock, settle_s=self.settle_s)

    def finished(self) -> PushReport | None:
        done, self._done = self._done, None
        return done

    def last(self) -> PushReport | None:
        return PushReport.load(self.paths)


class ProcessPusher:
    """The push as its own process, at low priority (see the module's docstring)."""

    def __init__(self, paths: PodPaths) -> None:
        self.paths = paths
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return  # one under way: it sends what changed since the last verified push anyway
        self.proc = start_push(self.paths)

    def finished(self) -> PushReport | None:
        if self.proc is None or self.proc.poll() is None:
            return None
        self.proc = None
        return self.last()

    def last(self) -> PushReport | None:
        return PushReport.load(self.paths)
