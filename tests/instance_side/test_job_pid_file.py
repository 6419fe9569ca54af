"""An unreadable job pid file is an uncertain reading, so the pod counts as busy: never "no job", which
would let the idle watch destroy the pod under a running job. Root-proof ways to make it unreadable: a
directory where the file should be, and bytes that are not a pid's ASCII."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fakes.pod import MINUTE, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.jobtree import JobScanError, JobTreeProbe, read_job_stamp
from gpuc.testkit.podfakes import FakeProcTree


def as_directory(job_file: Path) -> None:
    job_file.mkdir()


def as_foreign_bytes(job_file: Path) -> None:
    job_file.write_bytes(b"\xff\xfe4\x002\x004\x002\x00")  # "4242" in UTF-16, as an editor might save it


UNREADABLE = pytest.mark.parametrize("spoil", [as_directory, as_foreign_bytes], ids=["directory", "not-ascii"])


@UNREADABLE
def test_an_unreadable_pid_file_is_a_failed_scan_never_no_job(tmp_path: Path, spoil: Callable[[Path], None]) -> None:
    job_file = tmp_path / "job.pid"
    spoil(job_file)
    with pytest.raises(JobScanError, match=r"cannot read job\.pid"):
        read_job_stamp(job_file)
    proc = FakeProcTree(tmp_path / "proc")
    proc.add(4242, "python3", ["python3", "train.py"], start=7000)
    with pytest.raises(JobScanError):
        JobTreeProbe(job_file, proc.root).sample()


def test_a_missing_pid_file_is_no_job(tmp_path: Path) -> None:
    assert read_job_stamp(tmp_path / "job.pid") is None


@UNREADABLE
def test_a_pod_whose_pid_file_is_unreadable_is_busy_and_never_idles_out(
    tmp_path: Path, clock: FakeClock, spoil: Callable[[Path], None]
) -> None:
    pod: Pod = wire(tmp_path / "pod", clock)
    proc = FakeProcTree(tmp_path / "proc")
    spoil(pod.paths.job)
    pod.job = JobTreeProbe(pod.paths.job, proc.root)  # type: ignore[assignment]
    agent = pod.agent()
    for _ in range(40):  # twice the idle window: no GPU use, no python, no ssh
        agent.tick(pod.clock.now())
        pod.clock.advance(MINUTE)
    assert "destroy" not in pod.calls and "notify:idle_warning" not in pod.calls
    last = pod.functions.heartbeats[-1]
    assert last.job_running, "an unreadable pid file was reported as no job"
    assert last.busy_reason is not None and "job scan failed" in last.busy_reason
