"""After the destroy, `gpuc logs` and `--wait` read the job's log and outcome where the pod's sync put them:
an S3 bucket (a real S3 API on loopback, tests/fakes/s3world.py) and the experiment's git repo (a bare repo over
file://). Pushed by the pod's own sync code, read back by the laptop's."""

from __future__ import annotations

import io
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gpuc.client.jobs.outcome_file import JobOutcome
from gpuc.client.jobs.places import Destination, result_places
from gpuc.client.jobs.podlog import LogPrinter
from gpuc.core.destinations import git_environ
from gpuc.core.podpaths import PodPaths
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.instance_side.beside import JOB_LOG_NAME, OUTCOME_NAME
from gpuc.instance_side.gitsync import GitSync, SplitSync
from gpuc.instance_side.joblog import OUTCOME_FORMAT
from gpuc.instance_side.sync import with_job_log

KEY, SECRET = "AKIAEXAMPLEKEY000002", "s3cr3t-laptop-value"


def pod_with_a_finished_job(root: Path) -> PodPaths:
    paths = PodPaths(root)
    paths.state.mkdir(parents=True)
    paths.results.mkdir(parents=True)
    (paths.results / "metrics.json").write_text("{}")
    paths.job_log.write_bytes(b"epoch 1\n\xff not utf-8\nTraceback: boom\n")
    outcome = {"format": OUTCOME_FORMAT, "job_id": "j1", "exit_code": 1, "duration_s": 12.0}
    paths.outcome.write_text(json.dumps(outcome))
    return paths


def test_the_laptop_reads_the_log_the_pod_sent_to_s3(grants: Any, tmp_path: Path) -> None:
    """The pod sent it through its grants (it holds no key); the laptop reads it with its own key."""
    paths = pod_with_a_finished_job(tmp_path / "pod")
    grants.register("pod-1", "run01")
    sync = with_job_log(grants.sync(tmp_path / "pod", "pod-1", "run01"), paths)
    assert sync.verify(sync.push(paths.results))
    laptop = Settings(
        home=tmp_path / "home",
        results_bucket=f"s3://results/{grants.prefix}",
        s3_endpoint_url=grants.stack.url,
        s3_access_key_id=SecretStr(grants.key[0]),
        s3_secret_access_key=SecretStr(grants.key[1]),
    )
    dest = Destination(result_places(laptop, "runpod", "exp", "run01"))
    log, outcome = dest.read(JOB_LOG_NAME), dest.read(OUTCOME_NAME)
    assert log is not None and log.data == paths.job_log.read_bytes(), "byte for byte, not UTF-8 or not"
    assert outcome is not None and json.loads(outcome.data)["exit_code"] == 1
    assert Destination(result_places(laptop, "runpod", "exp", "run02")).read(JOB_LOG_NAME) is None
    assert_read_by_parts(dest, paths.job_log.read_bytes())


def assert_read_by_parts(dest: Destination, log: bytes) -> None:
    """A place's file is read by ranges (never whole: the destination is the pod's to fill)."""
    part = dest.read(JOB_LOG_NAME, 6, 5)
    assert part is not None and part.data == log[6:11]
    past = dest.read(JOB_LOG_NAME, len(log) + 10, 5)
    assert past is not None and past.data == b"", "there, with nothing past its end"
    assert dest.read_outcome() == JobOutcome("j1", 1, 12.0)
    out = io.BytesIO()
    assert dest.print_log(LogPrinter(out, [], raw=True), 3, part_bytes=7) is not None
    assert out.getvalue() == log[3:], "the rest of the log, in parts of 7 bytes"


def git(*args: str, cwd: Path | None = None) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", "-b", "main", str(bare))
    seed = tmp_path / "seed"
    git("clone", "--quiet", str(bare), str(seed))
    (seed / "train.py").write_text("print('hi')\n")
    git("checkout", "--quiet", "-b", "main", cwd=seed)
    git("add", ".", cwd=seed)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "code", cwd=seed)
    git("push", "--quiet", "origin", "main", cwd=seed)
    return bare


def test_the_laptop_reads_the_log_the_pod_committed_to_git(
    remote: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    paths = pod_with_a_finished_job(tmp_path / "pod")
    url = f"file://{remote}"
    git_sync = GitSync(url, "exp", "run01", paths.results_repo, environ=git_environ({"PATH": "/usr/bin:/bin"}, {}))
    sync = with_job_log(SplitSync(git_sync, None), paths)
    assert sync.verify(sync.push(paths.results))
    dest = Destination(result_places(Settings(home=tmp_path / "home", git_remote=url), "runpod", "exp", "run01"))
    try:
        log = dest.read(JOB_LOG_NAME)
        assert log is not None and log.data.endswith(b"Traceback: boom\n")
        assert dest.read("metrics.json") is not None
        assert_read_by_parts(dest, paths.job_log.read_bytes())
        assert list(scratch.glob("gpuc-logs-*")), "read from one temporary clone"
    finally:
        dest.close()
    assert not list(scratch.glob("gpuc-logs-*")), "the temporary clone is removed"


def test_an_unreadable_destination_is_said_not_taken_for_no_log(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/no-such-repo.git"
    dest = Destination(result_places(Settings(home=tmp_path / "home", git_remote=url), "runpod", "exp", "run01"))
    assert dest.read(JOB_LOG_NAME) is None
    assert dest.errors and "cannot read the results repo" in dest.errors[0]
