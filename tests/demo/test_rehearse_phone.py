"""The rehearsal rehearses the phone and stops from a script: its watchdog notifies an
ntfy stand-in whose page the rehearsal prints, so `gpuc notify --test` works in the rehearsal's shell; and
a rehearsal started from a script, its output closed, stops on SIGTERM or SIGINT within seconds, with
nothing left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rehearsal import shell_env

from gpuc.testkit.rehearse import SHELL_FILE

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]  # a whole rehearsal: `make quick` leaves it out
STOP_WITHIN_S = 15.0


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, str]]:
    """A rehearsal as a script starts it: no terminal, its own session; the banner read, then its output
    closed (the script went on to other things)."""
    home = tmp_path / "rehearse"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuc.client.cli", "demo", "--provider", "runpod", "--serve", "--home", str(home)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    banner = ""
    for line in proc.stdout:
        banner += line
        if "Ctrl-C here" in line:
            break
    try:
        yield proc, home, banner
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_the_rehearsal_has_a_phone_that_notify_test_reaches(
    scripted: tuple[subprocess.Popen[str], Path, str], tmp_path: Path
) -> None:
    proc, home, banner = scripted
    found = re.search(r"The phone: (http://127\.0\.0\.1:\d+)", banner)
    assert found, banner
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_"))},
        **shell_env(home / SHELL_FILE),
    }
    tested = subprocess.run(
        [sys.executable, "-m", "gpuc.client.cli", "notify", "--test"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "the watchdog: accepted" in tested.stdout
    sent = httpx.get(f"{found.group(1)}/json", timeout=10).json()
    assert any("through the watchdog" in m["title"] for m in sent), sent
    page = httpx.get(found.group(1), timeout=10).text
    assert "test message (through the watchdog)" in page
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=STOP_WITHIN_S)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_scripted_rehearsal_stops_on_a_signal_within_seconds(
    scripted: tuple[subprocess.Popen[str], Path, str], sig: signal.Signals
) -> None:
    proc, home, _ = scripted
    assert proc.stdout is not None
    proc.stdout.close()  # what it says next goes nowhere: the clean-up must happen all the same
    sent = time.monotonic()
    proc.send_signal(sig)
    assert proc.wait(timeout=STOP_WITHIN_S) == 0  # 0: nothing left behind
    assert time.monotonic() - sent < STOP_WITHIN_S
    leftovers = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True, check=False)
    assert leftovers.stdout.strip() == "", leftovers.stdout
