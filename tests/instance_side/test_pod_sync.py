"""Results sync to file:// buckets, and what the ending makes of each outcome."""

from __future__ import annotations

from pathlib import Path

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
    (root / "dangling").symlink_to(root / "nowhere")
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
