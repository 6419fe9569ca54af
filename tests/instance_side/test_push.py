"""The incremental results push (instance_side/push.py): only what changed since the last verified push is
sent (uploads counted at S3 through the pod's grants, a local git remote and a file:// bucket), a file being
written waits, the manifest is kept on the pod and at the destination, a failed push moves nothing, and a
push runs at low CPU and I/O priority."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpuc.core.api import HeartbeatBody
from gpuc.core.clock import FakeClock
from gpuc.core.destinations import git_runner
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.gitsync import GitSync, SplitSync
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest, PushReport, manifest_path
from gpuc.instance_side.pushplan import SETTLE_S
from gpuc.instance_side.pushrun import heartbeat_fields, io_class, push_once
from gpuc.instance_side.sync import with_job_log

OLD = time.time() - 3600  # a file written an hour ago: settled


def pod(tmp_path: Path) -> PodPaths:
    paths = PodPaths(tmp_path / "pod")
    paths.state.mkdir(parents=True)
    (paths.results / "ckpt").mkdir(parents=True)
    for i in range(5):
        write(paths.results / f"ckpt/step{i}.pt", b"\1" * (1000 + i))
    write(paths.results / "metrics.json", b'{"loss": 0.5}')
    return paths


def write(path: Path, data: bytes, at: float = OLD) -> None:
    path.write_bytes(data)
    os.utime(path, (at, at))


class Counted:
    """Counts the files each push hands to the destination: what crosses the network."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sent: list[str] = []

    def describe(self) -> str:
        return str(self.inner.describe())

    def push_files(self, root: Path, files: Any) -> Any:
        self.sent.extend(sorted(files))
        return self.inner.push_files(root, files)

    def verify(self, manifest: Any) -> bool:
        return bool(self.inner.verify(manifest))

    # pushrun.destination() takes the destinations it knows; a test's wrapper is one of them through this.
    def push(self, root: Path) -> Any:
        raise AssertionError("the incremental push never sends the whole tree")


def run_push(dest: Any, paths: PodPaths, clock: FakeClock | None = None) -> PushReport:
    from gpuc.instance_side import pushrun

    clock = clock or FakeClock(time.time())
    original = pushrun.destination  # type: ignore[attr-defined]
    pushrun.destination = lambda sync: sync  # type: ignore[attr-defined,assignment,return-value]
    try:
        report = push_once(dest, paths, clock)
    finally:
        pushrun.destination = original  # type: ignore[attr-defined]
    assert report is not None
    return report


def results_sent(dest: Counted) -> list[str]:
    return [name for name in dest.sent if not name.startswith("logs/")]


# -- S3 (a real S3 API through the watchdog's grants: tests/fakes/s3world.py) ---------------------------------
def test_s3_a_second_push_sends_only_what_changed(grants: Any, tmp_path: Path) -> None:
    paths = pod(tmp_path)
    grants.register("pod-1", "run01")
    dest = grants.sync(tmp_path / "pod", "pod-1", "run01")
    uploads: list[str] = []
    objects = dest.objects
    put_many = objects.put_many

    def counted(files: Any) -> None:
        uploads.extend(name for name, _, _ in files)
        put_many(files)

    objects.put_many = counted
    first = run_push(dest, paths)
    assert first.error is None and first.files == 6 and first.sent == 6
    assert len([k for k in uploads if not k.startswith("logs/")]) == 6
    uploads.clear()

    second = run_push(dest, paths)
    assert second.error is None and second.sent == 0 and second.files == 6
    assert [k for k in uploads if not k.startswith("logs/")] == [], "an unchanged tree sends nothing"

    write(paths.results / "ckpt/step5.pt", b"\2" * 3000)  # a new checkpoint
    write(paths.results / "metrics.json", b'{"loss": 0.25}', OLD + 60)  # rewritten
    uploads.clear()
    third = run_push(dest, paths)
    assert sorted(k for k in uploads if not k.startswith("logs/")) == ["ckpt/step5.pt", "metrics.json"]
    assert third.sent == 2 and third.files == 7
    # The manifest at the destination names every file the destination holds, readable by a later pod.
    key = f"{grants.prefix}/exp/run01/{MANIFEST_NAME}"
    body = grants.stack.client("s3").get_object(Bucket="results", Key=key)["Body"].read()
    remote = PushManifest.from_json(body.decode())
    assert set(remote.files) == set(PushManifest.load(manifest_path(paths)).files)
    assert "ckpt/step5.pt" in remote.files and remote.files["ckpt/step5.pt"][0] == 3000


# -- git (a local bare repo) ----------------------------------------------------------------------------
def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


RUN_BRANCH = "gpuc-results/run01"  # the run's own branch (instance_side/gitsync.py run_branch)


def test_git_a_second_push_commits_only_what_changed(tmp_path: Path) -> None:
    bare = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    git("clone", "--quiet", str(bare), str(seed))
    (seed / "README").write_text("x")
    git("add", "README", cwd=seed)
    git("commit", "--quiet", "-m", "seed", cwd=seed)
    git("push", "--quiet", "origin", "HEAD:main", cwd=seed)
    paths = pod(tmp_path)
    gitsync = GitSync(f"file://{bare}", "exp", "run01", paths.results_repo, environ=dict(os.environ), runner=git_runner)
    dest = Counted(SplitSync(gitsync, FileBucketSync(tmp_path / "bucket", "exp", "run01")))
    assert run_push(dest, paths).error is None
    assert len(results_sent(dest)) == 6
    commits = int(git("rev-list", "--count", RUN_BRANCH, cwd=bare).strip())

    dest.sent.clear()
    assert run_push(dest, paths).sent == 0
    assert dest.sent == [], "an unchanged tree sends nothing, not even its manifest"
    assert int(git("rev-list", "--count", RUN_BRANCH, cwd=bare).strip()) == commits, "no empty commit per interval"
    write(paths.results / "ckpt/step1.pt", b"\3" * 1001, OLD + 60)  # same size, rewritten: mtime says so
    dest.sent.clear()
    report = run_push(dest, paths)
    assert report.error is None and results_sent(dest) == ["ckpt/step1.pt"]
    tree = git("ls-tree", "-r", "-l", RUN_BRANCH, "--", "results/run01/", cwd=bare)
    assert "results/run01/ckpt/step1.pt" in tree and f"results/run01/{MANIFEST_NAME}" in tree
    assert int(git("rev-list", "--count", RUN_BRANCH, cwd=bare).strip()) == commits + 2  # the file, then the manifest


# -- what waits, what fails -----------------------------------------------------------------------------
def test_a_file_being_written_waits_for_the_next_push(tmp_path: Path) -> None:
    paths = pod(tmp_path)
    dest = Counted(FileBucketSync(tmp_path / "bucket", "exp", "run01"))
    now = time.time()
    write(paths.results / "ckpt/writing.pt", b"\0" * 500, now - 1)  # changed a second ago: still being written
    clock = FakeClock(now)
    report = run_push(dest, paths, clock)
    assert "ckpt/writing.pt" not in dest.sent and report.waiting == 1
    assert not (tmp_path / "bucket/exp/run01/ckpt/writing.pt").exists()
    assert "ckpt/writing.pt" not in PushManifest.load(manifest_path(paths)).files

    dest.sent.clear()
    clock.advance(SETTLE_S + 1)  # it settled: the next push sends it, and only it
    report = run_push(dest, paths, clock)
    assert results_sent(dest) == ["ckpt/writing.pt"] and report.waiting == 0
    assert (tmp_path / "bucket/exp/run01/ckpt/writing.pt").stat().st_size == 500


def test_a_log_appended_all_the_time_goes_as_a_snapshot_from_its_second_push(tmp_path: Path) -> None:
    """A metrics log appended every second never settles: waiting for it would lose it all with the pod."""
    paths = pod(tmp_path)
    dest = Counted(FileBucketSync(tmp_path / "bucket", "exp", "run01"))
    clock = FakeClock(time.time())
    log = paths.results / "metrics.jsonl"
    write(log, b'{"step": 1}\n', clock.now() - 1)
    assert run_push(dest, paths, clock).waiting == 1 and "metrics.jsonl" not in dest.sent
    clock.advance(600)
    write(log, b'{"step": 1}\n{"step": 2}\n', clock.now() - 1)  # still being appended at the next push
    dest.sent.clear()
    report = run_push(dest, paths, clock)
    assert results_sent(dest) == ["metrics.jsonl"] and report.waiting == 0
    assert (tmp_path / "bucket/exp/run01/metrics.jsonl").read_bytes() == log.read_bytes()


def test_a_push_that_does_not_verify_moves_nothing_and_is_sent_again(tmp_path: Path) -> None:
    paths = pod(tmp_path)
    inner = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    dest = Counted(inner)
    assert run_push(dest, paths).error is None
    write(paths.results / "ckpt/step9.pt", b"\4" * 77)
    before = manifest_path(paths).read_text()
    verified = inner.verify
    inner.verify = lambda manifest: False  # type: ignore[method-assign]
    failed = run_push(dest, paths)
    assert failed.error is not None and "does not match" in failed.error
    assert failed.files == 6, "the report keeps the last verified push"
    assert manifest_path(paths).read_text() == before
    inner.verify = verified  # type: ignore[method-assign]
    dest.sent.clear()
    assert run_push(dest, paths).error is None
    assert results_sent(dest) == ["ckpt/step9.pt"]


def test_the_heartbeat_says_when_how_many_and_where(tmp_path: Path) -> None:
    paths = pod(tmp_path)
    clock = FakeClock(time.time())
    report = run_push(Counted(FileBucketSync(tmp_path / "bucket", "exp", "run01")), paths, clock)
    assert json.loads((paths.state / "push.json").read_text())["files"] == 6
    fields = heartbeat_fields(PushReport.load(paths), report.at + 360)  # type: ignore[operator]
    assert fields["pushed_ago_s"] == 360 and fields["pushed_files"] == 6
    assert fields["pushed_to"].startswith("file://") and fields["pushed_to"].endswith("exp/run01")
    assert heartbeat_fields(None, 0.0) == {}
    # Whatever push.json says, the heartbeat stays inside the wire's bounds (a refused ping is a silent pod).
    huge = PushReport(at=0.0, files=5_000_000, destination="s3://b/" + "x" * 400)
    HeartbeatBody.model_validate({"pod_id": "p", "seq": 1, "sent_at": 1.8e9, **heartbeat_fields(huge, 1.8e9)})


def test_the_job_log_goes_beside_the_results_when_it_changed(tmp_path: Path) -> None:
    paths = pod(tmp_path)
    paths.job_log.write_text("epoch 1\n")
    dest = Counted(FileBucketSync(tmp_path / "bucket", "exp", "run01"))
    run_push(dest, paths)
    assert (tmp_path / "bucket/exp/run01/logs/job.log").read_text() == "epoch 1\n"
    dest.sent.clear()
    run_push(dest, paths)
    assert "logs/job.log" not in dest.sent
    with paths.job_log.open("a") as fh:
        fh.write("epoch 2\n")
    dest.sent.clear()
    run_push(dest, paths)
    assert "logs/job.log" in dest.sent
    assert (tmp_path / "bucket/exp/run01/logs/job.log").read_text() == "epoch 1\nepoch 2\n"


# -- priority ----------------------------------------------------------------------------------------
def test_a_push_lowers_its_own_cpu_and_io_priority() -> None:
    code = (
        "import os; from gpuc.instance_side.pushrun import lower_priority, io_class;"
        "said = lower_priority(); print(os.nice(0), io_class(), said)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "19"
    assert out[1] == "3", "the idle I/O class"
    assert io_class() != 3, "only the push's own process, never the test's (or the agent's)"


def test_the_jobs_final_sync_is_recorded_as_a_push(tmp_path: Path) -> None:
    """After the job's end the destination's manifest lists everything the final sync sent, not only what the
    last periodic push had: `gpuc results` of the gone pod, or a later pod, reads it."""
    paths = pod(tmp_path)
    bucket = FileBucketSync(tmp_path / "bucket", "exp", "run01")
    run_push(Counted(bucket), paths)
    write(paths.results / "final.pt", b"\5" * 999)  # written after the last periodic push
    paths.job_log.write_text("done\n")
    sync = with_job_log(bucket, paths)
    assert sync.verify(sync.push(paths.results))  # the ending's gate
    remote = PushManifest.from_json((tmp_path / "bucket/exp/run01" / MANIFEST_NAME).read_text())
    assert remote.files["final.pt"][0] == 999 and len([n for n in remote.files if not n.startswith("logs/")]) == 7
    assert PushReport.load(paths).files == 7  # type: ignore[union-attr]
