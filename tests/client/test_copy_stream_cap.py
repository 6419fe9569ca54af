"""The pod's tar stream is capped at what its own listing can take: a hostile pod
(on Vast, a stranger's machine) that sends more than it listed is cut off there, before its stream fills this
laptop's disk as a temporary file. An honest pod's tar always fits, long names and links included."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import IO, Any, cast

import pytest
from fakes.tars import listing_of, member

from gpuc.client.context import Ctx
from gpuc.client.jobs.copyout import RESULTS, StreamTooLong, copy_results, ssh_tar, stream_cap
from gpuc.client.onpod.ssh import SshAccess, SshTarget
from gpuc.core.clock import FakeClock
from gpuc.core.podpaths import PodPaths
from gpuc.instance_side import resultscopy

MB = 1024 * 1024
MEMBERS = [member("results", "d"), member("results/loss.csv", "f", b"1\n")]


class ListingPod:
    """The pod's `resultscopy list`: two small entries."""

    def read(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        return 0, json.dumps(listing_of(MEMBERS)) + "\n"


def test_a_pod_sending_more_than_its_listing_is_cut_off_at_the_cap(tmp_path: Path, clock: FakeClock) -> None:
    cap = stream_cap(listing_of(MEMBERS))
    taken: list[int] = []

    def floods(out: IO[bytes], _timeout: float) -> None:
        for _ in range(64):  # 64 MB for a 2-byte listing; a real flood never ends
            out.write(b"\0" * MB)
            taken.append(MB)

    with pytest.raises(StreamTooLong) as caught:
        copy_results(cast(Any, ListingPod()), floods, tmp_path / "here", Ctx(clock=clock))
    assert sum(taken) <= cap < 2 * MB, "the laptop kept taking what the pod's listing never claimed"
    assert "sent more than its listing" in caught.value.message and "nothing was destroyed" in (caught.value.hint or "")
    assert not (tmp_path / "here").exists() and list(tmp_path.iterdir()) == []


class PipeAccess(SshAccess):
    """ssh as gpuc runs it, with the pod's end a local program: a pod that streams 32 MB."""

    def ssh_argv(self, script: str) -> list[str]:
        return [sys.executable, "-c", "import sys\nfor _ in range(32): sys.stdout.buffer.write(bytes(1 << 20))"]


def test_over_ssh_the_stream_is_cut_off_and_the_sender_ended(tmp_path: Path, clock: FakeClock) -> None:
    target = SshTarget("127.0.0.1", 22, tmp_path / "key", tmp_path / "known_hosts", "pod")
    access = PipeAccess(target, environ=dict(os.environ))

    def fetch(out: IO[bytes], timeout_s: float) -> None:
        ssh_tar(access, out, timeout_s, RESULTS)

    with pytest.raises(StreamTooLong):
        copy_results(cast(Any, ListingPod()), fetch, tmp_path / "here", Ctx(clock=clock))
    assert list(tmp_path.iterdir()) == []


def test_an_honest_pods_tar_always_fits_its_cap(tmp_path: Path) -> None:
    """Long names (a PAX header each), long link targets, empty and odd-sized files: never refused."""
    paths = PodPaths(tmp_path / "pod")
    deep = paths.results / ("ü" * 60) / ("x" * 200)
    deep.mkdir(parents=True)
    for i in range(50):
        (deep / f"{'é' * 80}-{i}.bin").write_bytes(os.urandom(i * 37))
        os.symlink("/".join(["..", "y" * 250, "z" * 250]) + str(i), deep / f"link-{'ö' * 90}-{i}")
    (paths.results / "empty").write_bytes(b"")
    paths.job_log.parent.mkdir(parents=True, exist_ok=True)
    paths.job_log.write_text("step 1\n")
    sent = io.BytesIO()
    resultscopy.write_tar(paths, sent)
    assert len(sent.getvalue()) <= stream_cap(resultscopy.listing(paths))


class StallingAccess(SshAccess):
    """A pod that sends a little, then nothing, forever."""

    def ssh_argv(self, script: str) -> list[str]:
        return [
            sys.executable,
            "-c",
            "import sys, time\nsys.stdout.buffer.write(b'x'); sys.stdout.flush()\ntime.sleep(600)",
        ]


def test_a_stalled_stream_ends_at_the_copys_timeout(tmp_path: Path) -> None:
    from gpuc.client.onpod.ssh import SshError

    target = SshTarget("127.0.0.1", 22, tmp_path / "key", tmp_path / "known_hosts", "pod")
    out = io.BytesIO()
    with pytest.raises(SshError, match="did not finish within"):
        ssh_tar(StallingAccess(target, environ=dict(os.environ)), out, 1.0, RESULTS)
    assert out.getvalue() == b"x"
