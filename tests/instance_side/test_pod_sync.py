"""Results sync to file:// buckets (links in results/ included), and what the ending makes of each outcome."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from podfakes import POD_ID, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.core.errors import SyncError
from gpuc.instance_side.ending import Ending
from gpuc.instance_side.podfiles import AgentConfig, is_ended
from gpuc.instance_side.sync import FileBucketSync, Manifest, NoDestination, Unavailable, make_sync


def config(bucket: str | None) -> AgentConfig:
    return AgentConfig(
        pod_id=POD_ID,
        provider="local",
        experiment="exp",
        run_id="run01",
        functions_url="x",
        results_bucket=bucket,
    )


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "workspace" / "results"
    (root / "ckpt").mkdir(parents=True)
    (root / "metrics.json").write_text('{"loss": 0.1}')
    (root / "ckpt" / "model.bin").write_bytes(b"\0" * 4096)
    return root


def test_it_copies_results_under_experiment_and_run_and_verifies_names_and_sizes(
    tmp_path: Path, results: Path
) -> None:
    sync = make_sync(config(f"file://{tmp_path}/bucket"))
    manifest = sync.push(results)
    assert manifest.files == {"metrics.json": 13, "ckpt/model.bin": 4096}
    assert (tmp_path / "bucket" / "exp" / "run01" / "ckpt" / "model.bin").stat().st_size == 4096
    assert sync.verify(manifest)


def test_a_remote_copy_that_differs_does_not_verify(tmp_path: Path, results: Path) -> None:
    sync = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    manifest = sync.push(results)
    (tmp_path / "bucket" / "exp" / "run01" / "ckpt" / "model.bin").write_bytes(b"\0" * 10)
    assert not sync.verify(manifest)
    (tmp_path / "bucket" / "exp" / "run01" / "ckpt" / "model.bin").unlink()
    assert not sync.verify(manifest)


def test_no_results_directory_is_nothing_to_lose(tmp_path: Path) -> None:
    sync = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    manifest = sync.push(tmp_path / "workspace" / "results")
    assert manifest.files == {} and sync.verify(manifest)
    assert manifest.summary() == "no results/ directory: nothing to sync"


def test_a_copy_that_fails_is_a_sync_error(tmp_path: Path, results: Path) -> None:
    blocker = tmp_path / "bucket"
    blocker.write_text("a file where the bucket directory should be")
    with pytest.raises(SyncError, match="copy to file://"):
        FileBucketSync(blocker, "exp", "run01").push(results)


def test_an_unknown_scheme_fails_every_push_with_a_clear_error(results: Path) -> None:
    sync = make_sync(config("s4://bucket/x"))
    assert isinstance(sync, Unavailable)
    with pytest.raises(SyncError, match="scheme 's4' is not supported"):
        sync.push(results)
    assert not sync.verify(Manifest("x"))


def test_without_a_bucket_only_an_empty_results_directory_syncs(tmp_path: Path, results: Path) -> None:
    sync = make_sync(config(None))
    assert isinstance(sync, NoDestination)
    with pytest.raises(SyncError, match="holds 2 files but no results bucket"):
        sync.push(results)
    assert sync.verify(sync.push(tmp_path / "empty"))


def test_path_parts_from_the_config_are_plain_names(tmp_path: Path) -> None:
    with pytest.raises(SyncError):
        FileBucketSync(tmp_path, "../etc", "run01")


@pytest.mark.parametrize("bucket", ["s4://bucket", None])
def test_the_ending_keeps_the_pod_when_the_real_sync_fails(
    tmp_path: Path, clock: FakeClock, bucket: str | None
) -> None:
    pod: Pod = wire(tmp_path / "pod", clock, results_bucket=bucket)
    pod.paths.results.mkdir()
    (pod.paths.results / "out.txt").write_text("precious")
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(
        Ending(kind="job_exit", message="job exited", exit_code=0)
    )
    assert outcome == "kept_sync_failed"
    assert "destroy" not in pod.calls and not is_ended(pod.paths, POD_ID)
    assert pod.functions.kinds() == ["sync_failed"]


def test_the_ending_destroys_after_a_verified_file_sync(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    pod.paths.results.mkdir()
    (pod.paths.results / "out.txt").write_text("precious")
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(
        Ending(kind="job_exit", message="job exited", exit_code=0)
    )
    assert outcome == "destroyed"
    assert (tmp_path / "bucket" / "exp" / "run01" / "out.txt").read_text() == "precious"
    assert "sync verified: 1 files, 8 bytes" in pod.log_text()


# -- links inside results/: followed, or the pod is kept and the link named ---------------------------
@pytest.fixture
def linked(tmp_path: Path, results: Path) -> Path:
    """results/ as jobs leave it: links to a folder inside, to a folder and a file outside."""
    outside = tmp_path / "workspace" / "checkpoints"
    (outside / "step-100").mkdir(parents=True)
    (outside / "step-100" / "model.pt").write_bytes(b"\1" * 3000)
    (tmp_path / "workspace" / "eval.log").write_text("acc 0.9\n")
    (results / "latest").symlink_to(results / "ckpt")  # inside: the same files under two names
    (results / "checkpoints").symlink_to(outside)
    (results / "eval.log").symlink_to(tmp_path / "workspace" / "eval.log")
    return results


def test_links_to_files_and_folders_are_followed_and_verified(tmp_path: Path, linked: Path) -> None:
    sync = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    manifest = sync.push(linked)
    assert manifest.files == {
        "metrics.json": 13,
        "ckpt/model.bin": 4096,
        "latest/model.bin": 4096,
        "checkpoints/step-100/model.pt": 3000,
        "eval.log": 8,
    }
    assert sync.verify(manifest)
    copied = tmp_path / "bucket" / "exp" / "run01" / "checkpoints" / "step-100" / "model.pt"
    assert copied.read_bytes() == b"\1" * 3000 and not copied.is_symlink()


@pytest.mark.parametrize(
    ("make", "named", "why"),
    [
        (lambda r: (r / "broken").symlink_to(r / "nowhere"), "results/broken", "is a dangling link"),
        (lambda r: (r / "ckpt" / "up").symlink_to(r), "results/ckpt/up", "loops back to a folder above it"),
        (lambda r: (r / "self").symlink_to(r / "self"), "results/self", "is a loop of links"),
        (lambda r: (r / "null").symlink_to("/dev/null"), "results/null", "neither a file nor a folder"),
    ],
    ids=["dangling", "loop-to-parent", "self-loop", "device"],
)
def test_a_link_that_cannot_be_synced_is_named_never_skipped(
    tmp_path: Path, results: Path, make: Any, named: str, why: str
) -> None:
    make(results)
    with pytest.raises(SyncError, match=why) as exc:
        FileBucketSync(tmp_path / "bucket", "exp", "run01").push(results)
    assert exc.value.message.startswith(f"{named} -> ")
    assert "the pod is kept" in exc.value.message


def test_a_folder_that_cannot_be_read_is_named(
    tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root reads any folder, so the refusal is the kernel's answer played back, not a chmod.
    real_scandir = os.scandir
    locked = results / "ckpt"

    def scandir(path: Any) -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr("gpuc.instance_side.sync.os.scandir", scandir)
    with pytest.raises(SyncError, match="cannot read results/ckpt: Permission denied"):
        FileBucketSync(tmp_path / "bucket", "exp", "run01").push(results)


def test_the_ending_keeps_the_pod_and_names_a_dangling_link(tmp_path: Path, clock: FakeClock) -> None:
    """The incident: files behind a link were never copied, "verified" anyway, and the pod destroyed."""
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    pod.paths.results.mkdir()
    (pod.paths.results / "out.txt").write_text("precious")
    (pod.paths.results / "run").symlink_to(tmp_path / "scratch" / "run-7")  # the job wrote elsewhere; gone
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "kept_sync_failed"
    assert "destroy" not in pod.calls and not is_ended(pod.paths, POD_ID)
    [event] = pod.functions.events
    assert event.kind == "sync_failed" and "results/run -> " in event.message and "dangling link" in event.message


def test_the_ending_destroys_after_syncing_the_files_behind_a_folder_link(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    pod.paths.results.mkdir()
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "weights.pt").write_bytes(b"w" * 1000)
    (pod.paths.results / "run").symlink_to(tmp_path / "scratch")
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "destroyed"
    assert (tmp_path / "bucket" / "exp" / "run01" / "run" / "weights.pt").stat().st_size == 1000
