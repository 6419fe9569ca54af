"""Endings on a rented pod, RunPod and Vast alike: the real `gpuc` in a subprocess rents from the provider's
emulator over loopback HTTP, reaches the pod over a loopback sshd, and registers with a real watchdog in a
thread (testkit/platform.py, as `gpuc demo --provider` does).

- `gpuc down` while `up --wait` waits: the wait learns from the watchdog's record that `down` ended the pod
  (its sync done first) and exits 119 with those words, where it said 125 "outcome could not be learnt";
- a `requirements.txt` that does not install: `up` destroys the fresh pod and says what it cost.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuc.client.exits import ENDED_BY_DOWN_EXIT
from gpuc.core.ledger.store import Ledger
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import new_token
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.platform import Platform, client_environ, start_platform, write_env_file
from gpuc.testkit.sshd import LoopbackSshd, start_loopback_sshd

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]  # real rentals over loopback: tens of seconds each

WAIT_S = 120.0
MONEY = r"\$\d+\.\d{4}"
HANG = "import time; print('started', flush=True); time.sleep(600)\n"


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackSshd]:
    server = start_loopback_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


@dataclass
class Rental:
    emulator: EmulatorServer
    platform: Platform
    watchdog: ServerHandle
    env: dict[str, str]
    project: Path
    home: Path

    def gpuc(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", *args],
            cwd=self.project,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuc.client.cli", *args],
            cwd=self.project,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@pytest.fixture(params=["runpod", "vast"])
def rental(sshd: LoopbackSshd, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rental]:
    emulator, platform = start_platform(request.param, sshd)
    token = new_token()
    watchdog = start_in_thread(Settings(home=tmp_path / "functions", admin_token=SecretStr(token)), port=0)
    home = tmp_path / "home"
    write_env_file(home)
    (home / "config.json").write_text('{"bootstrap_apt": ""}')
    env = client_environ(emulator, sshd, home)
    env.update({"GPUC_WATCHDOG_URL": watchdog.url, "GPUC_ADMIN_TOKEN": token})
    project = tmp_path / "project"
    project.mkdir()
    (project / "hang.py").write_text(HANG)
    try:
        yield Rental(emulator, platform, watchdog, env, project, home)
    finally:
        platform.close()
        emulator.stop()
        watchdog.stop()


def wait_for(what: str, ready: object, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None:
            raise AssertionError(f"`up` ended (exit {proc.returncode}) before {what}: {proc.communicate()[1]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached: {what}")
        time.sleep(0.2)


def test_down_during_a_wait_exits_119_with_its_words_on_runpod_and_vast(rental: Rental) -> None:
    up = rental.start("up", "exp", "-y", "--wait", "--", "python", "hang.py")
    try:
        wait_for("the job's first line", lambda: "started" in rental.gpuc("logs", "exp").stdout, up)
        down = rental.gpuc("down", "exp")
        out, err = up.communicate(timeout=WAIT_S)
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
    assert down.returncode == 0, down.stderr
    assert "results synced and verified" in down.stderr and re.search(rf"the pod ran \S+, {MONEY}", down.stderr)
    assert up.returncode == ENDED_BY_DOWN_EXIT, err
    last = err.splitlines()[-1]
    assert "the job did not finish: the pod was ended by `gpuc down`, which synced results/ first" in last, last
    assert re.search(rf"pod \S+ ran \S+, {MONEY}; results and log: file://", last), last
    assert out == "started\n"
    assert rental.platform.alive() == {}


def test_requirements_that_do_not_install_end_up_with_what_the_pod_cost(rental: Rental) -> None:
    (rental.project / "requirements.txt").write_text("numpy\n")  # unpinned: the offline bootstrap refuses it
    done = rental.gpuc("up", "exp", "-y", "--", "python", "hang.py")
    assert done.returncode != 0, done.stderr
    assert "requirements did not install on the pod" in done.stderr, done.stderr
    said = re.search(rf"destroyed (\S+) \(\S+\); it ran \S+, ({MONEY})", done.stderr)
    assert said is not None, done.stderr
    (row,) = Ledger(rental.home / "gpu-ledger.csv").rows()
    assert said.group(2) == f"${float(row.cost_usd):.4f}", "the ledger's figure"
    assert rental.platform.alive() == {}
