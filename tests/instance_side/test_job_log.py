"""The job's output kept on the pod (the wrapper's tee) and synced beside results/ with the outcome."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from fakes.pod import POD_ID, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.beside import JOB_LOG_NAME, OUTCOME_NAME, snapshot
from gpuc.instance_side.ending import Ending
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.gitsync import GIT_MAX_BYTES, SplitSync
from gpuc.instance_side.joblog import JobLogTee, read_outcome
from gpuc.instance_side.joblogsync import JobLogSync
from gpuc.instance_side.manifest import Manifest, ResultsSync
from gpuc.instance_side.sync import NoDestination, with_job_log
from gpuc.instance_side.wrapper import JobWrapper, job_environ


@pytest.fixture
def pod(tmp_path: Path, clock: FakeClock) -> Pod:
    return wire(tmp_path / "pod", clock, role="wrapper")


def bucket_sync(pod: Pod, tmp_path: Path) -> JobLogSync:
    sync = with_job_log(FileBucketSync(tmp_path / "bucket", "exp", "run01"), pod.paths)
    assert isinstance(sync, JobLogSync)
    return sync


def wrapper(pod: Pod, tmp_path: Path, *, job_id: str | None = "job-1", fail_sync: bool = False) -> JobWrapper:
    sync = bucket_sync(pod, tmp_path)
    if fail_sync:
        sync.inner = NoVerify(sync.inner)
    return JobWrapper(
        pod.ctx.cfg,
        pod.paths,
        ender=pod.ender(sync=sync),
        clock=pod.clock,
        log=pod.ctx.log,
        env=job_environ(os.environ, pod.ctx.secrets, POD_ID),
        terminal_delivers=False,
        job_id=job_id,
    )


class NoVerify:
    """A destination whose listing never matches (a bucket that drops writes)."""

    def __init__(self, inner: ResultsSync) -> None:
        self.inner = inner

    def describe(self) -> str:
        return self.inner.describe()

    def push(self, results_dir: Path) -> Manifest:
        return self.inner.push(results_dir)

    def verify(self, manifest: Manifest) -> bool:
        return False


JOB = (
    "import os, sys\n"
    "print('step 1', flush=True)\n"
    "print('oops', file=sys.stderr, flush=True)\n"
    "os.makedirs('results', exist_ok=True)\n"
    "open('results/metrics.json', 'w').write('{}')\n"
    "sys.exit(3)\n"
)


def test_the_job_output_is_kept_on_the_pod_and_synced_beside_results_with_its_outcome(pod: Pod, tmp_path: Path) -> None:
    code = wrapper(pod, tmp_path).run([sys.executable, "-c", JOB])
    assert code == 3
    assert pod.paths.job_log.read_text() == "step 1\noops\n", "stdout and stderr, in the order written"
    dest = tmp_path / "bucket" / "exp" / "run01"
    assert (dest / "metrics.json").exists(), "results first, where they always went"
    assert (dest / JOB_LOG_NAME).read_text() == "step 1\noops\n"
    outcome = json.loads((dest / OUTCOME_NAME).read_text())
    assert outcome["exit_code"] == 3 and outcome["job_id"] == "job-1" and outcome["run_id"] == "run01"
    assert outcome["format"] == "gpuc-outcome/1" and outcome["duration_s"] >= 0
    assert pod.calls[-2:] == ["notify:job_exit", "destroy"]


def test_a_job_that_cannot_start_says_why_in_its_log(pod: Pod, tmp_path: Path) -> None:
    assert wrapper(pod, tmp_path).run(["no-such-program-xyz"]) == 127
    assert "job could not start" in pod.paths.job_log.read_text()
    assert json.loads((tmp_path / "bucket" / "exp" / "run01" / OUTCOME_NAME).read_text())["exit_code"] == 127


def test_a_failed_sync_keeps_the_pod_and_the_outcome_on_the_pod_says_so(pod: Pod, tmp_path: Path) -> None:
    w = wrapper(pod, tmp_path, fail_sync=True)
    w.should_stop = lambda: True  # one reminder round, then stop (the test, not the user, ends the nag)
    assert w.run([sys.executable, "-c", "raise SystemExit(0)"]) == 0
    assert "destroy" not in pod.calls
    outcome = read_outcome(pod.paths)
    assert outcome is not None and outcome["exit_code"] == 0 and outcome["ending"] == "kept_sync_failed"


def test_a_running_job_announces_its_id_before_its_output(pod: Pod, tmp_path: Path) -> None:
    """A laptop waiting for job-2 on a kept pod must not take job-1's log or outcome for job-2's."""
    wrapper(pod, tmp_path, job_id="job-1").run([sys.executable, "-c", "print('first')"])
    # job-2 looks at its pod's record while it runs, and prints what it saw (into its own log).
    probe = (
        "import json, pathlib\n"
        f"o = json.loads(pathlib.Path({str(pod.paths.outcome)!r}).read_text())\n"
        f"log = pathlib.Path({str(pod.paths.job_log)!r}).read_text()\n"
        "print(json.dumps({'job_id': o['job_id'], 'exit_code': o['exit_code'], 'log': log}))\n"
    )
    wrapper(pod, tmp_path, job_id="job-2").run([sys.executable, "-c", probe])
    seen = json.loads(pod.paths.job_log.read_text().splitlines()[0])
    assert seen == {"job_id": "job-2", "exit_code": None, "log": ""}, "while job-2 runs: its id, no code, a fresh log"


def test_the_log_keeps_its_head_and_its_tail_past_the_cap(tmp_path: Path) -> None:
    r, w = os.pipe()
    tee = JobLogTee(tmp_path / "job.log", echo=None, cap_bytes=100, tail_bytes=30)
    tee.open()
    with os.fdopen(r, "rb") as reader:
        tee.start(reader)
        with os.fdopen(w, "wb") as writer:
            writer.write(b"H" * 100 + b"m" * 1000 + b"Traceback: the end\n")
        assert tee.finish(wait_s=10)
    text = (tmp_path / "job.log").read_bytes()
    assert text.startswith(b"H" * 100) and text.endswith(b"Traceback: the end\n")
    assert b"bytes in between were not kept" in text and len(text) < 300
    assert tee.truncated


def test_a_daemon_holding_the_output_does_not_hold_the_ending(tmp_path: Path) -> None:
    r, w = os.pipe()
    tee = JobLogTee(tmp_path / "job.log", echo=None)
    tee.open()
    reader = os.fdopen(r, "rb")
    tee.start(reader)
    os.write(w, b"before\n")
    started = time.monotonic()
    assert tee.finish(wait_s=0.3) is False
    assert time.monotonic() - started < 5
    os.write(w, b"after\n")
    os.close(w)
    deadline = time.monotonic() + 10
    while b"after" not in (tmp_path / "job.log").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "job.log").read_bytes().startswith(b"before\n")
    assert b"still holds its output" in (tmp_path / "job.log").read_bytes()


def test_the_job_gets_unbuffered_python_unless_it_chose(pod: Pod) -> None:
    assert job_environ({}, {}, POD_ID)["PYTHONUNBUFFERED"] == "1"
    assert job_environ({"PYTHONUNBUFFERED": ""}, {}, POD_ID)["PYTHONUNBUFFERED"] == ""


# -- the sync of the log ---------------------------------------------------------------------------------
def test_a_name_results_already_holds_is_the_jobs_own(pod: Pod, tmp_path: Path) -> None:
    results = pod.paths.results
    (results / "logs").mkdir(parents=True)
    (results / "logs" / "job.log").write_text("the job's own log")
    pod.paths.job_log.write_text("gpuc's copy of the output")
    sync = bucket_sync(pod, tmp_path)
    manifest = sync.push(results)
    assert sync.verify(manifest)
    assert (tmp_path / "bucket" / "exp" / "run01" / JOB_LOG_NAME).read_text() == "the job's own log"


class WritesDuringTheCopy(FileBucketSync):
    """The job, still running, writes to its log between the sync's listing and its copy (a periodic sync)."""

    live_log: Path

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        with self.live_log.open("a") as fh:
            fh.write("more\n" * 100)
        return super().push_files(results_dir, files)


def test_a_log_that_grows_during_the_sync_still_verifies(pod: Pod, tmp_path: Path) -> None:
    pod.paths.job_log.write_text("line\n" * 100)
    inner = WritesDuringTheCopy(tmp_path / "bucket", "exp", "run01")
    inner.live_log = pod.paths.job_log
    sync = with_job_log(inner, pod.paths)
    manifest = sync.push(pod.paths.results)
    assert sync.verify(manifest), "a periodic sync of a running job's log must not fail (and alert) every time"
    assert "job log" in manifest.summary()


def test_a_copy_that_differs_at_the_destination_fails_the_sync(pod: Pod, tmp_path: Path) -> None:
    pod.paths.job_log.write_text("line\n" * 100)
    sync = bucket_sync(pod, tmp_path)
    manifest = sync.push(pod.paths.results)
    (tmp_path / "bucket" / "exp" / "run01" / JOB_LOG_NAME).write_text("cut")
    assert not sync.verify(manifest)
    outcome = pod.ender(sync=sync).end(Ending(kind="job_exit", message="job exited", exit_code=0))
    assert outcome == "destroyed", "a fresh push sends it again"


def test_git_alone_gets_a_log_cut_to_fit_its_limit(tmp_path: Path) -> None:
    src = tmp_path / "job.log"
    src.write_bytes(b"A" * 1000 + b"B" * 1000)
    dst = tmp_path / "copy.log"
    snapshot(src, dst, 500)
    data = dst.read_bytes()
    assert len(data) <= 500 and data.startswith(b"A") and data.endswith(b"B") and b"omitted" in data


def test_without_a_destination_the_log_keeps_no_pod(pod: Pod) -> None:
    assert isinstance(with_job_log(NoDestination(), pod.paths), NoDestination)
    git_only = SplitSync(git=object(), bucket=None)  # type: ignore[arg-type]
    wrapped = with_job_log(git_only, pod.paths)
    assert isinstance(wrapped, JobLogSync) and wrapped.log_limit == GIT_MAX_BYTES - 1


def test_each_job_on_a_kept_pod_keeps_its_own_log_at_the_destination(pod: Pod, tmp_path: Path) -> None:
    """A warm pod's second job starts a fresh job.log, never over the first's: each job's own log and outcome
    go to logs/jobs/<id>.*, and logs/jobs.json lists both (what `gpuc logs POD --jobs` reads)."""
    crash = "import sys\nprint('Traceback ...', flush=True)\nprint('KeyError: lr', flush=True)\nsys.exit(1)\n"
    first = wrapper(pod, tmp_path, job_id="aaaa111111")
    first.ender.keep_alive = True  # kept after its job, as a warm pod is
    assert first.run([sys.executable, "-c", crash]) == 1
    pod.clock.advance(60)  # the user edits, then `gpuc run`s again
    second = wrapper(pod, tmp_path, job_id="bbbb222222")
    second.ender.keep_alive = True
    assert second.run([sys.executable, "-c", JOB]) == 3
    dest = tmp_path / "bucket" / "exp" / "run01"
    assert (dest / "logs/jobs/aaaa111111.log").read_text() == "Traceback ...\nKeyError: lr\n", "the crash outlives"
    assert (dest / "logs/jobs/bbbb222222.log").read_text() == "step 1\noops\n"
    assert (dest / JOB_LOG_NAME).read_text() == "step 1\noops\n", "logs/job.log: the latest job's"
    assert json.loads((dest / "logs/jobs/aaaa111111.json").read_text())["exit_code"] == 1
    listed = json.loads((dest / "logs/jobs.json").read_text())["jobs"]
    assert [(j["job_id"], j["exit_code"]) for j in listed] == [("aaaa111111", 1), ("bbbb222222", 3)]
    assert pod.paths.job_log.read_text() == "step 1\noops\n"
    assert (pod.paths.jobs / "aaaa111111.log").read_text() == "Traceback ...\nKeyError: lr\n", "and on the pod"
