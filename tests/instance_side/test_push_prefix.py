"""A push a resume can trust (instance_side/push.py, resume.py): whatever a push leaves at the destination --
finished, failed, or cut between any two requests by an outbid that kills the pod's processes -- a restore is a
prefix of what the job wrote, in modification order, and loses nothing written before the last push's settle
window.

First the cause of the steps 15-18 lost by the recovery end-to-end test, and the two other ways main's push broke
the order (each test fails on main's push and restore); then the rule's parts one by one; then the property:
hundreds of seeded cuts of a job writing step files, an overwritten checkpoint and an appended log, each restored
and checked, on a fake clock (no wall-clock margin anywhere).
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.errors import SyncError
from gpuc.instance_side import push as pushmod
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.joblogsync import run_objects
from gpuc.instance_side.manifest import Manifest
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.push import IncrementalPush
from gpuc.instance_side.pushmanifest import MANIFEST_NAME as MANIFEST
from gpuc.instance_side.pushmanifest import PushManifest
from gpuc.instance_side.pushplan import plan
from gpuc.instance_side.resume import RestoreError, restore
from gpuc.instance_side.s3sync import RunObjects, S3Sync
from gpuc.instance_side.scan import Listing
from gpuc.testkit.drill_push import CutBucket, Outbid

STEP_S = 0.25


def pod(tmp_path: Path) -> PodPaths:
    paths = PodPaths(tmp_path / "pod")
    paths.state.mkdir(parents=True)
    paths.results.mkdir(parents=True)
    return paths


def stamp(path: Path, at: float) -> None:
    ns = int(at * 1e9)
    os.utime(path, ns=(ns, ns))


def write(path: Path, data: bytes, at: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    stamp(path, at)


def write_step(paths: PodPaths, step: int, at: float) -> None:
    write(paths.results / f"ckpt-{step:05d}.json", json.dumps({"step": step}).encode(), at)


def restored_steps(names: list[str]) -> list[int]:
    return sorted(int(n[5:10]) for n in names if n.startswith("ckpt-"))


# -- the cause, and main's other two ways to break the order --------------------------------------------------
class RacingClock(FakeClock):
    """The job writes its next step right after the push reads its clock (a push at nice 19 on a busy machine is
    descheduled between any two of its lines)."""

    def __init__(self, start: float, write_next: Callable[[float], None]) -> None:
        super().__init__(start)
        self.write_next: Callable[[float], None] | None = write_next

    def now(self) -> float:
        t = super().now()
        if self.write_next is not None:
            self.write_next(t + 0.05)
            self.write_next = None
        return t


def test_the_lost_steps_15_to_18_a_step_written_while_the_push_lists_never_goes_past_older_ones(tmp_path: Path) -> None:
    """The recovery e2e test's job writes a step file every 0.25 s and pushes every second. On main, the push read
    its clock BEFORE listing results/: step 19, written in between, had a modification time after that clock,
    counted as settled (age < 0) and was sent and listed as whole, while steps 15-18 (written in the second before)
    were held back as still being written. An outbid then: the new pod restored 1-14 and 19, resumed at 19, and
    15-18 were never written again. Seen twice in `make test`; main's push shows it in 4 of 28 pushes on an idle
    machine, 12 of 17 under load (the report's race script)."""
    paths = pod(tmp_path)
    now = time.time()
    for step in range(1, 15):
        write_step(paths, step, now - 60 + step)  # settled
    for step in range(15, 19):
        write_step(paths, step, now - (19 - step) * STEP_S)  # the last second: still being written
    dest = CutBucket(tmp_path / "bucket")
    IncrementalPush(dest, paths, RacingClock(now, lambda at: write_step(paths, 19, at))).run()
    steps = restored_steps(restore(f"file://{dest.dest}", tmp_path / "new" / "results"))
    assert steps == list(range(1, len(steps) + 1)), f"restored {steps}: a resume at {steps[-1]} loses what is missing"
    assert steps[-1] >= 14, steps


def test_a_push_cut_after_the_new_checkpoint_never_restores_it_without_the_steps_before_it(tmp_path: Path) -> None:
    """The lead's (a): the job writes step files and overwrites ckpt.json (same size) after each. Main sent changed
    files in name order (ckpt.json before ckpt-00015.json...) in place, and its restore followed the previous
    push's manifest: cut after the checkpoint, the restore took the NEW checkpoint (its size matched) and knew
    nothing of steps 15-18."""
    paths = pod(tmp_path)
    now = time.time()
    ckpt = paths.results / "ckpt.json"
    for step in range(1, 15):
        write_step(paths, step, now - 600 + step)
        write(ckpt, json.dumps({"step": step}).encode(), now - 600 + step + 0.1)
    dest = CutBucket(tmp_path / "bucket")
    IncrementalPush(dest, paths, FakeClock(now - 500)).run()  # a verified push: steps 1-14, checkpoint 14
    for step in range(15, 19):
        write_step(paths, step, now - 100 + step)
        write(ckpt, json.dumps({"step": step}).encode(), now - 100 + step + 0.1)
    for cut_at in range(1, 7):
        dest = CutBucket(tmp_path / "bucket", cut_at=cut_at)
        with pytest.raises(Outbid):
            IncrementalPush(dest, paths, FakeClock(now)).run()
        into = tmp_path / f"new-{cut_at}" / "results"
        names = restore(f"file://{dest.dest}", into)
        steps = restored_steps(names)
        resumes_at = json.loads((into / "ckpt.json").read_text())["step"]
        assert steps == list(range(1, steps[-1] + 1)), (cut_at, steps)
        assert resumes_at <= steps[-1], f"cut at copy {cut_at}: checkpoint {resumes_at} restored with steps {steps}"


def test_a_log_still_being_written_never_goes_past_an_older_file_held_back(tmp_path: Path) -> None:
    """The lead's (b): a log appended every step (waiting at two pushes in a row) was sent as a snapshot of what it
    held then, though a step file written before its last line was held back (written in the settle window for
    the first time). The destination then held a log line for a step it did not have."""
    paths = pod(tmp_path)
    clock = FakeClock(time.time())
    log = paths.results / "metrics.jsonl"
    dest = CutBucket(tmp_path / "bucket")
    write(log, b"1\n", clock.now() - 1)
    IncrementalPush(dest, paths, clock).run()  # the log waits (written a second ago)
    clock.advance(600)
    write_step(paths, 2, clock.now() - 2)  # step 2, written 2 s ago: still settling, first time seen
    write(log, b"1\n2\n", clock.now() - 1)  # its line, after it
    IncrementalPush(dest, paths, clock).run()
    there = dest.dest / "metrics.jsonl"
    assert not there.exists() or b"2" not in there.read_bytes() or (dest.dest / "ckpt-00002.json").exists()


def test_the_settle_window_is_the_pods_setting_not_a_constant(tmp_path: Path) -> None:
    """The lead's (c): 5 s, hard-coded. Now GPUC_SYNC_SETTLE_S reaches the pod's config and the push."""
    from gpuc.core.podconfig import PodConfig
    from gpuc.core.settingsload import load_settings
    from gpuc.instance_side.podfiles import AgentConfig

    settings = load_settings({"GPUC_SYNC_SETTLE_S": "0.5"})
    cfg = PodConfig.for_pod(settings, pod_id="p", provider="local", experiment="e", run_id="r-0001")
    agent = AgentConfig.from_mapping(json.loads(cfg.model_dump_json()))
    assert agent.sync_settle_s == 0.5
    paths = pod(tmp_path)
    now = time.time()
    write_step(paths, 1, now - 1)  # a second old: settled for a 0.5 s window, not for 5 s
    dest = CutBucket(tmp_path / "bucket")
    assert IncrementalPush(dest, paths, FakeClock(now), settle_s=agent.sync_settle_s).run().sent == 1
    with pytest.raises(Exception, match="GPUC_SYNC_SETTLE_S is invalid: must be at least 0"):
        load_settings({"GPUC_SYNC_SETTLE_S": "-1"})


# -- the rule, part by part -------------------------------------------------------------------------------------
def listing(**files: tuple[int, float]) -> Listing:
    return Listing(
        files={n.replace("_", "-"): size for n, (size, _) in files.items()},
        mtimes={n.replace("_", "-"): int(at * 1e9) for n, (_, at) in files.items()},
    )


def test_the_plan_sends_oldest_first_and_stops_at_the_oldest_file_still_being_written() -> None:
    found = listing(c=(1, 30.0), a=(1, 10.0), b=(1, 96.0), d=(1, 20.0), e=(1, 99.0))
    chosen = plan(found, PushManifest(), 100.0, 5.0)
    assert [s.name for s in chosen.send] == ["a", "d", "c"]  # b (96) is still being written: b and e wait
    assert chosen.waiting == ("b", "e")


def test_a_long_waiting_small_file_goes_as_a_copy_only_if_nothing_older_waits() -> None:
    last = PushManifest(waiting=("log",))
    alone = plan(listing(a=(1, 10.0), log=(10, 99.0)), last, 100.0, 5.0)
    assert [(s.name, s.how) for s in alone.send] == [("a", "file"), ("log", "snapshot")]
    behind = plan(listing(a=(1, 10.0), step=(1, 97.0), log=(10, 99.0)), last, 100.0, 5.0)
    assert [s.name for s in behind.send] == ["a"] and behind.waiting == ("log", "step")


def test_a_kept_copy_goes_once_everything_older_has_gone() -> None:
    """A checkpoint rewritten more often than the window never settles: the copy an earlier push kept of it (its
    version of then) goes when nothing older than that copy waits, instead of never."""
    last = PushManifest(files={"ckpt": (10, 1)}, waiting=("ckpt",))
    held = {"ckpt": (10, int(50 * 1e9))}
    chosen = plan(listing(step=(1, 97.0), ckpt=(10, 99.5)), last, 100.0, 5.0, held=held)
    assert [(s.name, s.how, s.mtime) for s in chosen.send] == [("ckpt", "held", int(50e9))]
    too_new = plan(listing(step=(1, 97.0), ckpt=(10, 99.5)), last, 100.0, 5.0, held={"ckpt": (10, int(98e9))})
    assert too_new.send == ()


def test_files_of_one_clock_tick_go_new_names_first_and_together() -> None:
    """Two files modified in one clock tick (the kernel stamps files with a coarse clock): their order is unknown;
    new names go before the ones the destination holds a version of, and the tick waits whole if one must."""
    found = listing(step=(1, 50.0), ckpt=(1, 50.0), a=(1, 10.0))
    chosen = plan(found, PushManifest(files={"ckpt": (1, 1)}), 100.0, 5.0, known={"ckpt"})
    assert [s.name for s in chosen.send] == ["a", "step", "ckpt"]
    last = PushManifest(files={"ckpt": (1, 1)}, waiting=("ckpt",))
    held_back = plan(listing(step=(1, 98.0), ckpt=(1, 98.0)), last, 100.0, 5.0, known={"ckpt"})
    assert held_back.send == (), "the step is new at this push: the checkpoint of its tick waits with it"


def test_a_modification_time_far_ahead_of_the_clock_is_a_whole_file_placed_at_the_windows_edge() -> None:
    """A time copied with a file (a restore, tar) or a clock set back: not a write happening now. It goes, after
    the settled files and before anything still being written, instead of waiting for the clock to pass it."""
    found = listing(a=(1, 10.0), copied=(1, 5000.0), b=(1, 96.0))
    chosen = plan(found, PushManifest(), 100.0, 5.0)
    assert [s.name for s in chosen.send] == ["a", "copied"] and chosen.waiting == ("b",)
    assert chosen.send[1].mtime == int(5000 * 1e9), "announced with its own time: the restore's tick is the file's"
    close = plan(listing(soon=(1, 103.0)), PushManifest(), 100.0, 5.0)
    assert close.send == (), "a time just ahead (a coarse clock, a job writing now) is still being written"


def test_a_recovered_pod_pushes_only_what_its_job_changes_and_a_cut_then_restores_the_version_there(
    tmp_path: Path,
) -> None:
    """The restore starts the new pod's push manifest (push.adopt): its first push sends the job's new files, not
    every restored one again; and when that push is cut, a file the new attempt rewrote (the log, one line longer)
    is restored as the version the destination holds, never refused for a size its announcement did not name."""
    first = pod(tmp_path / "one")
    now = time.time()
    for step in (1, 2):
        write_step(first, step, now - 900 + step)
    write(first.results / "metrics.jsonl", b"1\n2\n", now - 890)
    IncrementalPush(CutBucket(tmp_path / "bucket"), first, FakeClock(now - 800)).run()
    source = f"file://{tmp_path / 'bucket/exp/run01'}"
    second = pod(tmp_path / "two")
    assert sorted(restore(source, second.results, paths=second)) == [
        "ckpt-00001.json",
        "ckpt-00002.json",
        "metrics.jsonl",
    ]
    write_step(second, 3, now - 100)
    with (second.results / "metrics.jsonl").open("ab") as fh:
        fh.write(b"3\n")
    stamp(second.results / "metrics.jsonl", now - 99)
    counted = CutBucket(tmp_path / "bucket", cut_at=3)  # the manifest, step 3, then killed before the log
    with pytest.raises(Outbid):
        IncrementalPush(counted, second, FakeClock(now)).run()
    assert counted.copies == 3, "only the job's two changed files were to go, after the manifest"
    third = tmp_path / "three"
    assert restored_steps(restore(source, third)) == [1, 2, 3]
    assert (third / "metrics.jsonl").read_bytes() == b"1\n2\n"


def test_a_restore_the_pod_cannot_record_is_refused(tmp_path: Path) -> None:
    """The new pod must know what the destination holds: announced without the restored files that wait in its
    first push, a cut would leave them out of the next restore (a step 1 missing under a log of step 2)."""
    first = pod(tmp_path / "one")
    write_step(first, 1, time.time() - 900)
    IncrementalPush(CutBucket(tmp_path / "bucket"), first, FakeClock(time.time())).run()
    second = PodPaths(tmp_path / "two")  # no state folder to record in
    with pytest.raises(RestoreError, match="could not record what was restored"):
        restore(f"file://{tmp_path / 'bucket/exp/run01'}", tmp_path / "two-results", paths=second)


@pytest.fixture
def large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PodPaths, Path, float]:
    """A pod whose checkpoint is large (over the SNAPSHOT_MAX set here): sent from a hard link, not a copy."""
    monkeypatch.setattr(pushmod, "SNAPSHOT_MAX", 8)
    paths = pod(tmp_path)
    now = time.time()
    write(paths.results / "ckpt.pt", b"A" * 64, now - 600)
    return paths, paths.results / "ckpt.pt", now


def test_a_file_rewritten_in_place_while_sent_fails_the_push_and_a_restore_refuses_it(
    tmp_path: Path, large: tuple[PodPaths, Path, float]
) -> None:
    """A large checkpoint is sent from a hard link (a job's rename replaces the file, not the linked version); one
    rewritten in place while it goes may arrive torn at its old size. The push sees it changed, says so, and marks
    it at the destination: a restore refuses rather than resume from it, until a push sends it whole."""
    paths, ckpt, now = large

    class Rewriting(CutBucket):
        def _copy(self, source: Path, key: str) -> None:
            super()._copy(source, key)
            if key == "ckpt.pt":
                with ckpt.open("r+b") as fh:  # torch.save(path) rewrites in place
                    fh.write(b"B" * 64)
                stamp(ckpt, now - 0.5)

    dest = Rewriting(tmp_path / "bucket")
    with pytest.raises(pushmod.ChangedWhileSent, match="rename"):
        IncrementalPush(dest, paths, FakeClock(now)).run()
    with pytest.raises(RestoreError, match=r"ckpt\.pt was rewritten in place"):
        restore(f"file://{dest.dest}", tmp_path / "r1")
    stamp(ckpt, now - 60)
    IncrementalPush(CutBucket(tmp_path / "bucket"), paths, FakeClock(now + 600)).run()
    assert restore(f"file://{dest.dest}", tmp_path / "r2") == ["ckpt.pt"]
    assert (tmp_path / "r2" / "ckpt.pt").read_bytes() == b"B" * 64


def test_a_checkpoint_saved_with_a_rename_goes_as_the_version_listed(
    tmp_path: Path, large: tuple[PodPaths, Path, float]
) -> None:
    paths, ckpt, now = large

    class Renaming(CutBucket):
        def _copy(self, source: Path, key: str) -> None:
            if key == "ckpt.pt":
                write(paths.results / ".ckpt.tmp", b"B" * 64, now - 0.5)
                os.replace(paths.results / ".ckpt.tmp", ckpt)  # the job saves again while the push sends
            super()._copy(source, key)

    dest = Renaming(tmp_path / "bucket")
    IncrementalPush(dest, paths, FakeClock(now)).run()
    assert (dest.dest / "ckpt.pt").read_bytes() == b"A" * 64, "the version listed, never a newer one"


def test_a_failed_push_is_remembered_so_a_later_cut_still_restores(tmp_path: Path) -> None:
    """A push that failed midway (a network error) left new versions at the destination the last verified
    manifest does not know; the next push, cut before it re-sent them, says they may be there (`maybe`)."""
    paths = pod(tmp_path)
    now = time.time()
    ckpt = paths.results / "ckpt.json"
    write_step(paths, 1, now - 900)
    write(ckpt, b'{"step": 1}', now - 899)
    IncrementalPush(CutBucket(tmp_path / "bucket"), paths, FakeClock(now - 800)).run()
    write_step(paths, 2, now - 700)
    write(ckpt, b'{"step": 22}', now - 699)

    class Failing(CutBucket):
        def verify(self, manifest: Manifest) -> bool:
            raise SyncError("the network went away")

    with pytest.raises(SyncError):
        IncrementalPush(Failing(tmp_path / "bucket"), paths, FakeClock(now - 600)).run()
    write_step(paths, 3, now - 500)
    write(ckpt, b'{"step": 333}', now - 499)
    with pytest.raises(Outbid):  # its manifest went (copy 1); killed before its first file
        IncrementalPush(CutBucket(tmp_path / "bucket", cut_at=2), paths, FakeClock(now)).run()
    names = restore(f"file://{tmp_path / 'bucket/exp/run01'}", tmp_path / "r")
    assert restored_steps(names) == [1, 2]
    assert json.loads((tmp_path / "r" / "ckpt.json").read_text())["step"] == 22


def s3_sync(grants: Any, tmp_path: Path, wrap: Callable[[RunObjects], RunObjects] = lambda o: o) -> S3Sync:
    """The pod's own S3 destination: run01's objects, reached through the watchdog's grants (tests/fakes/s3world.py)."""
    grants.register("pod-run01", "run01")
    objects = run_objects(grants.sync(tmp_path / "granted", "pod-run01", "run01"))
    assert objects is not None
    return S3Sync(f"s3://results/{grants.prefix}", "exp", "run01", objects=wrap(objects))


def test_s3_takes_the_files_oldest_first(grants: Any, tmp_path: Path) -> None:
    """The transport keeps the order it is given (S3Sync sorted by name before): the manifest, then oldest first."""
    uploads: list[str] = []

    class Counting:
        def __init__(self, inner: RunObjects) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def put(self, name: str, source: Path, size: int) -> None:
            uploads.append(name)
            self.inner.put(name, source, size)

        def put_many(self, files: Sequence[tuple[str, Path, int]]) -> None:
            uploads.extend(name for name, _, _ in files)
            self.inner.put_many(files)

    paths = pod(tmp_path)
    now = time.time()
    for i, name in enumerate(["ckpt.pt", "b.json", "a.json"]):
        write(paths.results / name, b"x", now - 100 + i)
    IncrementalPush(s3_sync(grants, tmp_path, Counting), paths, FakeClock(now)).run()
    assert uploads[:4] == [MANIFEST, "ckpt.pt", "b.json", "a.json"]


def test_an_escaped_name_announced_and_cut_is_restored_under_its_own_name(grants: Any, tmp_path: Path) -> None:
    """S3 keys are UTF-8: a name that is not is stored under a percent-escaped key (storekeys.py assign_keys). A push
    cut before its manifest mapped it: the restore finds the escaped key in the listing all the same."""
    paths = pod(tmp_path)
    now = time.time()
    odd = os.fsdecode(b"caf\xe9.txt")
    write(paths.results / odd, b"latin-1 name", now - 900)
    write_step(paths, 1, now - 800)
    dest = s3_sync(grants, tmp_path)

    class Cut:
        def __getattr__(self, name: str) -> Any:
            return getattr(dest, name)

        def push_files(self, results_dir: Path, files: Any) -> Manifest:
            manifest = dest.push_files(results_dir, files)
            if odd in files:
                raise Outbid  # after the files, before the verified manifest
            return manifest

    with pytest.raises(Outbid):
        IncrementalPush(Cut(), paths, FakeClock(now)).run()
    into = tmp_path / "r"
    names = restore(f"s3://results/{grants.prefix}/exp/run01", into, objects=dest.objects)
    assert sorted(names) == sorted([odd, "ckpt-00001.json"])
    assert (into / odd).read_bytes() == b"latin-1 name"


# -- the property: hundreds of cuts -----------------------------------------------------------------------------
SETTLE_S = 2.0
INTERVAL_S = 10.0
SNAPSHOT_MAX = 1024  # the test's: a checkpoint of CKPT_BYTES over it is sent from a hard link, as a real one is


@dataclass
class Version:
    name: str
    data: bytes
    at: int  # mtime, ns


@dataclass
class Job:
    """A training job: each step writes its step file (a new name) -- half of it first, the rest a moment later,
    well inside the settle window, as a slow writer does -- then saves ckpt.pt with a rename (as
    docs/interruptible.md says), then appends a line to metrics.jsonl in place. Some steps stamp two of those in
    one clock tick (the kernel's coarse file clock). `written` holds every whole version: a half-written step file
    is none, and restoring it is a torn file."""

    paths: PodPaths
    rng: random.Random
    ckpt_bytes: int
    step: int = 0
    next_at: float = 0.0
    finish_at: float | None = None
    written: list[Version] = field(default_factory=list)

    def run_until(self, now: float) -> None:
        while True:
            if self.finish_at is not None and self.finish_at <= now:
                self._finish(self.finish_at)
                self.next_at = self.finish_at + self.rng.choice((0.3, 0.7, 1.5, 2.5, 4.0))
                self.finish_at = None
            elif self.finish_at is None and self.next_at <= now:
                self._start(self.next_at)
                self.finish_at = self.next_at + self.rng.choice((0.0, 0.05, 0.4, 1.2))
            else:
                return

    def _start(self, at: float) -> None:
        self.step += 1
        path = self.paths.results / f"steps/step-{self.step:05d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._step_file()[:5])
        stamp(path, at)

    def _finish(self, at: float) -> None:
        tick = self.rng.random() < 0.2
        t1 = int(at * 1e9)
        t2 = t1 if tick else t1 + 1_000_000
        t3 = t2 + 1_000_000
        self._write(f"steps/step-{self.step:05d}.json", self._step_file(), t1)
        ckpt = json.dumps({"step": self.step}).encode().ljust(self.ckpt_bytes, b" ")
        tmp = self.paths.results / ".ckpt.pt.tmp"
        tmp.write_bytes(ckpt)
        os.utime(tmp, ns=(t2, t2))
        os.replace(tmp, self.paths.results / "ckpt.pt")
        self.written.append(Version("ckpt.pt", ckpt, t2))
        metrics = self.paths.results / "metrics.jsonl"
        with metrics.open("ab") as fh:
            fh.write(f"{self.step}\n".encode())
        os.utime(metrics, ns=(t3, t3))
        self.written.append(Version("metrics.jsonl", metrics.read_bytes(), t3))

    def _step_file(self) -> bytes:
        return json.dumps({"step": self.step}).encode()

    def _write(self, name: str, data: bytes, at: int) -> None:
        path = self.paths.results / name
        path.write_bytes(data)
        os.utime(path, ns=(at, at))
        self.written.append(Version(name, data, at))


class Contended(FileBucketSync):
    """The real file:// destination. Every request (a file written, a listing) takes a little time, during which
    the job goes on; the `cut_at`-th request never happens (the pod is killed as it starts, or midway through a
    file: its temporary copy is left behind, never renamed). Now and then a request fails (a network error)."""

    def __init__(self, bucket: Path, world: World, cut_at: int | None) -> None:
        super().__init__(bucket, "exp", "run01")
        self.world = world
        self.cut_at = cut_at
        self.requests = 0

    def _request(self) -> None:
        self.requests += 1
        self.world.clock.advance(self.world.rng.choice((0.01, 0.2, 0.9)))
        self.world.job.run_until(self.world.clock.now())
        if self.requests == self.cut_at:
            raise Outbid
        if self.world.rng.random() < 0.02:
            raise SyncError("the network went away (a request failed)")

    def _copy(self, source: Path, key: str) -> None:
        try:
            self._request()
        except Outbid:
            if self.world.rng.random() < 0.5:
                raise  # as the request starts
            with mock.patch("shutil.copyfile", _killed_midway):
                super()._copy(source, key)  # midway through writing the file
        super()._copy(source, key)

    def verify(self, manifest: Manifest) -> bool:
        self._request()
        return super().verify(manifest)


def _killed_midway(source: Path, target: Path) -> None:
    Path(target).write_bytes(Path(source).read_bytes()[:7])
    raise Outbid


@dataclass
class World:
    root: Path
    seed: int
    cut_at: int | None
    clock: FakeClock = field(init=False)
    rng: random.Random = field(init=False)
    paths: PodPaths = field(init=False)
    job: Job = field(init=False)
    pushed_at: list[float] = field(default_factory=list)  # `at` of each verified push, in order

    def __post_init__(self) -> None:
        self.clock = FakeClock(1_790_000_000.0)
        self.rng = random.Random(self.seed)
        self.paths = pod(self.root)
        # Odd seeds: a small checkpoint (copied, and kept for the next push when it never settles); even seeds: a
        # large one (a hard link: it goes when it settles).
        ckpt_bytes = 200 if self.seed % 2 else 4 * SNAPSHOT_MAX
        self.job = Job(self.paths, self.rng, ckpt_bytes, next_at=self.clock.now() + 0.5)
        self.dest = Contended(self.root / "bucket", self, self.cut_at)

    def run(self, pushes: int) -> bool:
        """True when the pod was killed before `pushes` pushes ran."""
        next_push = self.clock.now() + INTERVAL_S
        for _ in range(pushes):
            self.clock.advance(next_push - self.clock.now())
            self.job.run_until(self.clock.now())
            try:
                report = IncrementalPush(self.dest, self.paths, self.clock, settle_s=SETTLE_S).run()
                self.pushed_at.append(float(report.at or 0.0))
            except Outbid:
                return True
            except (SyncError, pushmod.ChangedWhileSent, OSError):
                pass  # a failed push: the next one sends it again
            next_push += INTERVAL_S
        return False


@dataclass
class Cut:
    seed: int
    cut_at: int
    steps: int  # contiguous step files restored
    written: int  # steps the job had written when killed
    ckpt: int  # the checkpoint's step restored (0: none)
    lost_beyond: int  # steps written before the last verified push's window that are not restored


def check_restore(world: World, seed: int, cut_at: int) -> Cut:
    into = world.root / "restored"
    try:
        names = restore(f"file://{world.dest.dest}", into)
    except RestoreError as exc:
        assert "nothing was pushed" in str(exc) and not world.pushed_at, (seed, cut_at, exc)
        names = []
    versions: dict[str, Version] = {}
    for name in names:
        data = (into / name).read_bytes()
        match = [v for v in world.job.written if v.name == name and v.data == data]
        assert match, f"seed {seed} cut {cut_at}: {name} restored torn or foreign"
        versions[name] = match[0]
    newest = max((v.at for v in versions.values()), default=-1)
    steps_written = [v for v in world.job.written if v.name.startswith("steps/")]
    missing = [v.name for v in steps_written if v.at <= newest and v.name not in versions]
    assert not missing, f"seed {seed} cut {cut_at}: restored up to {newest}, missing {missing[:5]} written before"
    steps = sorted(json.loads(v.data)["step"] for n, v in versions.items() if n.startswith("steps/"))
    assert steps == list(range(1, len(steps) + 1)), (seed, cut_at, steps)
    ckpt = json.loads(versions["ckpt.pt"].data)["step"] if "ckpt.pt" in versions else 0
    lines = versions["metrics.jsonl"].data.split() if "metrics.jsonl" in versions else []
    assert ckpt <= len(steps) and len(lines) <= len(steps), (seed, cut_at, ckpt, len(lines), len(steps))
    lost_beyond = 0
    if world.pushed_at:
        horizon = int((world.pushed_at[-1] - SETTLE_S) * 1e9)
        kept = {v.name for v in world.job.written if v.name.startswith("steps/") and v.at <= horizon}
        lost_beyond = len(kept - set(versions))
    if len(world.pushed_at) >= 3:
        # A small file rewritten all the time (the log; the small checkpoint) is at most two pushes behind: the
        # version it had at the third-to-last verified push, or a later one, is there.
        then = int(world.pushed_at[-3] * 1e9)
        for name in ("metrics.jsonl", "ckpt.pt") if world.seed % 2 else ("metrics.jsonl",):
            due = max((v.at for v in world.job.written if v.name == name and v.at <= then), default=None)
            got = versions[name].at if name in versions else None
            assert due is None or (got is not None and got >= due), (seed, cut_at, name, due, got)
    return Cut(seed, cut_at, len(steps), world.job.step, ckpt, lost_beyond)


BLOCKS = 4  # of 10 seeds each: the cuts spread over the test workers
CUTS_PER_SEED = 12
PUSHES = 8


@pytest.fixture
def quick_dir(tmp_path: Path) -> Iterator[Path]:
    """Hundreds of small worlds: in memory where Linux offers it (the disk's metadata writes cost 5x here)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=shm, prefix="gpuc-push-cuts-") as tmp:
        yield Path(tmp)


@pytest.mark.parametrize("block", range(BLOCKS))
def test_hundreds_of_outbids_at_random_moments_each_restore_a_prefix_and_lose_nothing_before_the_last_push(
    block: int, quick_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each seed, the job and its pushes run once whole (counting the requests), then again with the pod
    killed at CUTS_PER_SEED requests drawn from that count: at every cut, the restore is a prefix of what the job
    wrote (nothing restored without every step written before it; no torn file; the checkpoint and the log never
    ahead of the steps), every step written before the last verified push's settle window is there, and a small
    file rewritten all the time is at most two pushes behind. 4 blocks x 10 seeds x 12 cuts = 480 cuts."""
    monkeypatch.setattr(pushmod, "SNAPSHOT_MAX", SNAPSHOT_MAX)
    monkeypatch.setattr(os, "fsync", lambda fd: None)  # the pod's own records are fsynced: not what is tested here
    cuts: list[Cut] = []
    for seed in range(1 + 10 * block, 11 + 10 * block):
        whole = World(quick_dir / f"s{seed}-whole", seed, None)
        assert not whole.run(PUSHES)
        picks = random.Random(seed).sample(range(1, whole.dest.requests + 1), CUTS_PER_SEED)
        for cut_at in picks:
            world = World(quick_dir / f"s{seed}-c{cut_at}", seed, cut_at)
            assert world.run(PUSHES), (seed, cut_at)
            cuts.append(check_restore(world, seed, cut_at))
    assert len(cuts) == 10 * CUTS_PER_SEED
    assert sum(c.lost_beyond for c in cuts) == 0, [c for c in cuts if c.lost_beyond][:3]
    assert sum(1 for c in cuts if c.ckpt) > len(cuts) // 2, "the checkpoint, rewritten all the time, still goes"
    print(summary(cuts))


def summary(cuts: list[Cut]) -> str:
    lag = sorted(c.written - c.steps for c in cuts)
    ckpt_lag = sorted(c.steps - c.ckpt for c in cuts if c.ckpt)
    return (
        f"{len(cuts)} cuts: steps lost behind the kill median {lag[len(lag) // 2]}, max {lag[-1]}; checkpoint behind "
        f"the restored steps median {ckpt_lag[len(ckpt_lag) // 2]}, max {ckpt_lag[-1]}"
    )
