"""Results sync to file:// buckets (links and odd names in results/ included), and what the ending makes
of each outcome: only a byte that could be lost keeps the pod."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest
from fakes.pod import POD_ID, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.core.errors import SyncError
from gpuc.instance_side.ending import Ending
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.manifest import Manifest
from gpuc.instance_side.podfiles import AgentConfig, is_ended
from gpuc.instance_side.storekeys import assign_keys, escape_name
from gpuc.instance_side.sync import NoDestination, Unavailable, make_sync, with_job_log


def config(bucket: str | None) -> AgentConfig:
    return AgentConfig(
        pod_id=POD_ID,
        provider="local",
        experiment="exp",
        run_id="run01",
        watchdog_url="x",
        results_bucket=bucket,
    )


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "workspace" / "results"
    (root / "ckpt").mkdir(parents=True)
    (root / "metrics.json").write_text('{"loss": 0.1}')
    (root / "ckpt" / "model.bin").write_bytes(b"\0" * 4096)
    return root


def test_it_copies_results_under_experiment_and_run_and_verifies_names_and_sizes(tmp_path: Path, results: Path) -> None:
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
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "kept_sync_failed"
    assert "destroy" not in pod.calls and not is_ended(pod.paths, POD_ID)
    assert pod.functions.kinds() == ["sync_failed"]


def test_the_ending_destroys_after_a_verified_file_sync(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    pod.paths.results.mkdir()
    (pod.paths.results / "out.txt").write_text("precious")
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "destroyed"
    assert (tmp_path / "bucket" / "exp" / "run01" / "out.txt").read_text() == "precious"
    assert "sync verified: 1 file, 8 bytes" in pod.log_text()


# -- links inside results/: followed, or recorded when they hold no data ------------------------------
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
    ("make", "rel", "target"),
    [
        (lambda r: (r / "latest").symlink_to("ckpt-0300"), "latest", "ckpt-0300"),  # a rotated checkpoint
        (lambda r: (r / "ckpt" / "up").symlink_to(r), "ckpt/up", None),  # back to a folder above
        (lambda r: (r / "self").symlink_to(r / "self"), "self", None),  # a loop of links
        (lambda r: (r / "null").symlink_to("/dev/null"), "null", "/dev/null"),  # a device
    ],
    ids=["dangling", "loop-to-parent", "self-loop", "device"],
)
def test_a_link_that_holds_no_data_is_recorded_with_its_target_and_the_sync_goes_on(
    tmp_path: Path, results: Path, make: Any, rel: str, target: str | None
) -> None:
    make(results)
    sync = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    manifest = sync.push(results)
    assert manifest.links == {rel: target or os.readlink(results / rel)}
    assert manifest.files == {"metrics.json": 13, "ckpt/model.bin": 4096} and sync.verify(manifest)
    assert manifest.summary().endswith("; 1 link recorded")


def test_a_folder_that_cannot_be_read_is_named(tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Root reads any folder, so the refusal is the kernel's answer played back, not a chmod.
    real_scandir = os.scandir
    locked = results / "ckpt"

    def scandir(path: Any) -> Any:
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr("gpuc.instance_side.scan.os.scandir", scandir)
    with pytest.raises(SyncError, match="cannot read results/ckpt: Permission denied"):
        FileBucketSync(tmp_path / "bucket", "exp", "run01").push(results)


def test_a_dangling_link_never_keeps_the_pod_billing(tmp_path: Path, clock: FakeClock) -> None:
    """The incident: a `latest` link to a rotated checkpoint failed the sync, and the pod was kept, billing,
    though nothing was at risk. Now: synced, the link recorded beside the results, destroyed."""
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    (pod.paths.results / "ckpt-0400").mkdir(parents=True)
    (pod.paths.results / "ckpt-0400" / "model.pt").write_bytes(b"w" * 100)
    (pod.paths.results / "latest").symlink_to("ckpt-0300")  # rotated away
    sync = with_job_log(make_sync(pod.ctx.cfg), pod.paths)
    outcome = pod.ender(sync=sync).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "destroyed"
    [event] = pod.functions.events
    assert "1 file, 100 bytes" in event.message and "; 1 link recorded" in event.message
    entries = json.loads((tmp_path / "bucket" / "exp" / "run01" / "logs" / "entries.json").read_text())
    assert entries == {"links": {"latest": "ckpt-0300"}, "escaped": {}}


# -- names a destination cannot store: escaped, mapped, verified under the key ------------------------
UNDECODABLE = os.fsdecode(b"caf\xe9 100%.txt")  # latin-1, as an old tool writes it: not UTF-8


def test_escaped_keys_are_reversible_and_never_collide() -> None:
    assert escape_name(UNDECODABLE) == "caf%E9 100%25.txt"
    assert unquote_to_bytes(escape_name(UNDECODABLE)) == os.fsencode(UNDECODABLE)
    keys = assign_keys([UNDECODABLE, "caf%E9 100%25.txt"], lambda n: "\udce9" not in n, escape_name)
    assert keys == {UNDECODABLE: "caf%E9 100%25.txt.gpuc1"}  # the plain name keeps its own


def test_a_file_bucket_keeps_a_name_its_filesystem_takes(tmp_path: Path, results: Path) -> None:
    (results / UNDECODABLE).write_bytes(b"x" * 5)
    sync = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    manifest = sync.push(results)
    assert manifest.keys == {} and manifest.files[UNDECODABLE] == 5 and sync.verify(manifest)
    assert (tmp_path / "bucket" / "exp" / "run01" / UNDECODABLE).read_bytes() == b"x" * 5


def test_a_name_the_filesystem_refuses_is_stored_under_an_escaped_key(
    tmp_path: Path, results: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A UTF-8-only filesystem (ZFS utf8only, APFS) answers EILSEQ: the kernel's answer played back."""
    (results / "runs" / UNDECODABLE).mkdir(parents=True)
    (results / "runs" / UNDECODABLE / "a:b.txt").write_bytes(b"y" * 7)
    bucket = tmp_path / "bucket"
    real_copy = shutil.copyfile

    def copyfile(src: Any, dst: Any) -> Any:
        if str(dst).startswith(str(bucket)) and any(ch in str(dst) for ch in "\udce9:"):
            raise OSError(errno.EILSEQ, "Invalid or incomplete multibyte or wide character", str(dst))
        return real_copy(src, dst)

    monkeypatch.setattr("gpuc.instance_side.filesync.shutil.copyfile", copyfile)
    sync = FileBucketSync(bucket, "exp", "run01")
    manifest = sync.push(results)
    rel = f"runs/{UNDECODABLE}/a:b.txt"
    assert manifest.keys == {rel: "runs/caf%E9 100%25.txt/a%3Ab.txt"}
    assert (bucket / "exp" / "run01" / "runs" / "caf%E9 100%25.txt" / "a%3Ab.txt").read_bytes() == b"y" * 7
    assert sync.verify(manifest) and manifest.summary().endswith("; 1 name escaped")


# -- a byte that could be lost still keeps the pod --------------------------------------------------------
class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@contextmanager
def without_root_reads() -> Iterator[None]:
    """This thread without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, so a mode-000 file is truly unreadable
    even to root (the tests run as root); the capabilities come back on exit (they stay permitted)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()  # _LINUX_CAPABILITY_VERSION_3
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget failed")
    saved = [d.effective for d in data]
    data[0].effective &= ~((1 << 1) | (1 << 2))
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    try:
        yield
    finally:
        for d, effective in zip(data, saved, strict=True):
            d.effective = effective
        libc.capset(ctypes.byref(header), data)


def test_a_file_that_cannot_be_read_still_fails_the_sync_and_keeps_the_pod(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    pod.paths.results.mkdir()
    (pod.paths.results / "latest").symlink_to("gone")  # holds no data: not why the pod is kept
    secret = pod.paths.results / "weights.pt"
    secret.write_bytes(b"w" * 64)
    secret.chmod(0)
    with without_root_reads():
        with pytest.raises(PermissionError):
            secret.read_bytes()  # truly unreadable here, root or not
        outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(Ending(kind="job_exit", message="exited", exit_code=0))
    assert outcome == "kept_sync_failed"
    assert "destroy" not in pod.calls and not is_ended(pod.paths, POD_ID)
    [event] = pod.functions.events
    assert event.kind == "sync_failed" and "Permission denied" in event.message


def test_the_ending_destroys_after_syncing_the_files_behind_a_folder_link(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, results_bucket=f"file://{tmp_path}/bucket")
    pod.paths.results.mkdir()
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "weights.pt").write_bytes(b"w" * 1000)
    (pod.paths.results / "run").symlink_to(tmp_path / "scratch")
    outcome = pod.ender(sync=make_sync(pod.ctx.cfg)).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "destroyed"
    assert (tmp_path / "bucket" / "exp" / "run01" / "run" / "weights.pt").stat().st_size == 1000
