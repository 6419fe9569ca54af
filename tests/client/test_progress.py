"""Progress for a reader that is not a terminal (client/progress.py): while `up` waits on a boot, a plain line
every GPUC_PROGRESS_EVERY_S, on the loop's own clock; a terminal keeps its redrawn line and gets none."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gpuc.client.context import Ctx
from gpuc.client.pods.up import wait_running
from gpuc.client.progress import Ticker, ticking
from gpuc.core.clock import FakeClock
from gpuc.core.pod import Pod, PodStatus
from gpuc.core.settings import Settings


class Booting:
    """A provider whose pod provisions for `boot_s` of the clock, then runs."""

    name = "runpod"

    def __init__(self, clock: FakeClock, boot_s: float) -> None:
        self.clock, self.ready_at = clock, clock.now() + boot_s

    def get(self, pod_id: str) -> Pod:
        status: PodStatus = "running" if self.clock.now() >= self.ready_at else "provisioning"
        return Pod(provider="runpod", id=pod_id, name="gpuc-r1", status=status, managed=True)


def test_a_slow_boot_says_so_every_30_seconds_on_a_pipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock()
    ctx = Ctx(Settings(home=tmp_path, env_file=tmp_path / "none.env", local_boot_s=8.0), clock=clock)
    pod = wait_running(Booting(clock, 75.0), "p1", ctx, timeout_s=600)  # type: ignore[arg-type]
    assert pod.status == "running"
    said = capsys.readouterr().err.splitlines()
    assert said == [
        "  still booting (30 s): provisioning",
        "  still booting (60 s): provisioning",
        "  p1: running after 76s",
    ], said


def test_a_terminal_gets_no_plain_lines() -> None:
    clock, said = FakeClock(), list[str]()
    ticker = Ticker("booting", clock, say=said.append, plain=False)
    for _ in range(10):
        clock.advance(30)
        ticker.tick("provisioning")
    assert said == []


def test_a_blocking_step_is_said_while_it_runs_and_not_after() -> None:
    said: list[str] = []
    with ticking("preparing the pod", say=said.append, every_s=0.05, plain=True):
        deadline = time.monotonic() + 5
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    heard = len(said)
    time.sleep(0.2)
    assert heard >= 2 and len(said) == heard, said
    assert all(line.startswith("  still preparing the pod (") for line in said)


def test_a_reader_gone_ends_the_lines_never_the_step() -> None:
    def broken(_: str) -> Any:
        raise BrokenPipeError

    with ticking("uploading", say=broken, every_s=0.01, plain=True):
        time.sleep(0.1)  # the step goes on; the thread stopped at its first failed line
