"""`gpuc run --clean` on the pod (instance_side/clean.py): results/ is pushed, then only what the destination holds
as it is now is removed. Never what was not pushed: a file written since (still settling, or changed after the
push), a link's target, anything when the push fails, nothing without a destination or under a running job."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.errors import SyncError
from gpuc.instance_side import clean, push, pushplan, pushrun
from gpuc.instance_side.clean import NotCleaned, clean_results
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.jobtree import job_stamp
from gpuc.instance_side.podfiles import PodPaths, atomic_write
from gpuc.instance_side.sync import NoDestination, Unavailable, with_job_log

OLD = time.time() - 3600  # written an hour ago: settled


class StillClock(FakeClock):
    """Real time, and a sleep that does not pass: a file written just now stays unsettled at every push."""

    def __init__(self) -> None:
        super().__init__(time.time())

    def sleep(self, seconds: float) -> None:
        return None


def write(path: Path, data: bytes, at: float | None = OLD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if at is not None:
        os.utime(path, (at, at))


@pytest.fixture
def paths(tmp_path: Path) -> PodPaths:
    paths = PodPaths(tmp_path / "pod")
    paths.state.mkdir(parents=True)
    for i in range(3):
        write(paths.results / f"ckpt/step{i}.pt", b"\1" * (100 + i))
    write(paths.results / "metrics.json", b'{"loss": 0.5}')
    return paths


def bucket(tmp_path: Path, paths: PodPaths) -> Any:
    return with_job_log(FileBucketSync(tmp_path / "bucket", "exp", "run1"), paths)


def test_it_removes_what_the_destination_holds_and_keeps_what_it_does_not(
    tmp_path: Path, paths: PodPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A small file still settling at a second push goes as a snapshot (pushplan.plan): this one is too big for that,
    # so it is still not at the destination when results/ is emptied.
    monkeypatch.setattr(pushplan, "SNAPSHOT_MAX", 8)  # what plan() reads
    monkeypatch.setattr(push, "SNAPSHOT_MAX", 8)  # what the staging reads
    outside = tmp_path / "dataset.bin"
    write(outside, b"the user's data")
    (paths.results / "data").symlink_to(outside)
    write(paths.results / "fresh.txt", b"just written", at=None)  # settling: never pushed while the clock stands
    sync = bucket(tmp_path, paths)
    done = clean_results(paths, sync, StillClock())
    assert done.removed == 4 and done.removed_bytes == 100 + 101 + 102 + 13
    dest = tmp_path / "bucket" / "exp" / "run1"
    assert sorted(p.name for p in (dest / "ckpt").iterdir()) == ["step0.pt", "step1.pt", "step2.pt"]
    assert (dest / "metrics.json").read_bytes() == b'{"loss": 0.5}'
    left = sorted(p.relative_to(paths.results).as_posix() for p in paths.results.rglob("*"))
    assert left == ["data", "fresh.txt"], "the settling file and the link stay; the emptied folder goes"
    assert outside.read_bytes() == b"the user's data", "never deleted through a link"
    assert any(k.startswith("fresh.txt (not at the destination") for k in done.kept), done.kept
    assert any(k.startswith("data (a link") for k in done.kept), done.kept


def test_a_file_changed_between_the_push_and_the_removal_stays(
    tmp_path: Path, paths: PodPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushed = pushrun.push_once  # what clean.py imported, replaced there below

    def push_then_write(*args: Any, **kwargs: Any) -> Any:
        report = pushed(*args, **kwargs)
        write(paths.results / "metrics.json", b'{"loss": 0.4}', at=OLD + 60)  # a process the user left running
        return report

    monkeypatch.setattr(clean, "push_once", push_then_write)
    done = clean_results(paths, bucket(tmp_path, paths), FakeClock(time.time()))
    assert (paths.results / "metrics.json").read_bytes() == b'{"loss": 0.4}'
    assert done.removed == 3 and [k.split(" ")[0] for k in done.kept] == ["metrics.json"]


@pytest.mark.parametrize(
    "sync",
    [NoDestination(), Unavailable(SyncError("s3://b: AccessDenied"))],
    ids=["no-destination", "unusable-destination"],
)
def test_nowhere_to_push_removes_nothing(tmp_path: Path, paths: PodPaths, sync: Any) -> None:
    with pytest.raises(NotCleaned, match="exists only on the pod"):
        clean_results(paths, sync, FakeClock(time.time()))
    assert len(list(paths.results.rglob("*.pt"))) == 3


def test_a_push_that_fails_removes_nothing(tmp_path: Path, paths: PodPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    sync = bucket(tmp_path, paths)
    monkeypatch.setattr(sync.inner, "verify", lambda manifest: False)  # the listing does not match
    with pytest.raises(NotCleaned, match="failed"):
        clean_results(paths, sync, FakeClock(time.time()))
    assert len(list(paths.results.rglob("*.pt"))) == 3 and (paths.results / "metrics.json").exists()


def test_never_under_a_running_job(tmp_path: Path, paths: PodPaths) -> None:
    atomic_write(paths.job, job_stamp(os.getpid()), 0o644)  # this process: alive
    with pytest.raises(NotCleaned, match="a job is running"):
        clean_results(paths, bucket(tmp_path, paths), FakeClock(time.time()))
    assert len(list(paths.results.rglob("*.pt"))) == 3
