"""`gpuc demo --provider runpod --serve`, as a new user rehearses a rental offline: the
real `gpuc` commands in a shell pointed at the emulator by the printed `.` line, then Ctrl-C, which leaves
no pod and no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rehearsal import shell_env

from gpuc.testkit.rehearse import SHELL_FILE

pytestmark = pytest.mark.sshd


@pytest.fixture
def rehearsal(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path, list[str]]]:
    home = tmp_path / "rehearse"
    user_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_"))}
    # The user's own key in their shell: the rehearsal's shell file must replace it, never use or print it.
    user_env["RUNPOD_API_KEY"] = "rp-PLANTED-real-user-key-000"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuc.client.cli", "demo", "--provider", "runpod", "--serve", "--home", str(home)],
        env=user_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if "Ctrl-C here" in line:
            break
    try:
        yield proc, home, lines
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # reaps it and closes its pipe (left open, it warns in whichever test runs next)


@pytest.mark.e2e
def test_a_rehearsed_rental_runs_every_command_and_ctrl_c_cleans_up(
    rehearsal: tuple[subprocess.Popen[str], Path, list[str]], tmp_path: Path
) -> None:
    proc, home, lines = rehearsal
    text = "".join(lines)
    assert f". {home / SHELL_FILE}" in text, text
    assert (home / SHELL_FILE).stat().st_mode & 0o077 == 0
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_"))},
        **shell_env(home / SHELL_FILE),
    }
    assert env["RUNPOD_API_KEY"] != "rp-PLANTED-real-user-key-000"
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(
        "import os\nos.makedirs('results', exist_ok=True)\n"
        "open('results/m.txt', 'w').write('1')\nprint('hello from the pod')\n"
    )

    def gpuc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    # A first rental's traps, as the banner suggests trying them: each said before anything is rented.
    assert "RunPod's floor is 10 GB" in text and "--gpus 4 --dry-run" in text
    doctor = gpuc("doctor")
    assert "ssh key at runpod" in doctor.stdout and "no ssh key is registered at runpod" in doctor.stdout, doctor.stdout
    small = gpuc("up", "small", "-y", "--volume-gb", "3", "--", "python", "train.py")
    assert small.returncode == 2 and "too small for RunPod" in small.stderr and "--volume-gb 10" in small.stderr
    assert "Traceback" not in small.stderr
    quad = gpuc("up", "quad", "--gpus", "4", "--dry-run")
    assert quad.returncode == 0 and "stock for 4 GPUs" in quad.stdout + quad.stderr, quad.stdout + quad.stderr
    up = gpuc("up", "first-try", "-y", "--wait", "--", "python", "train.py")
    assert up.returncode == 0, up.stdout + up.stderr
    assert "hello from the pod" in up.stdout
    assert "results and log:" in up.stderr
    # No key registered, yet the pod was reached: `up` handed it its key, and said so.
    assert "no ssh key is registered at runpod" in up.stdout + up.stderr
    listed = gpuc("ls")
    assert listed.returncode == 0, listed.stderr
    ledger = gpuc("ledger")
    assert ledger.returncode == 0 and "first-try" in ledger.stdout, ledger.stdout + ledger.stderr
    # Where the banner says: the rehearsal's bucket, kept on disk under its home (results go through the pod's grants).
    assert list((home / "bucket").rglob("m.txt")), sorted(str(f) for f in (home / "bucket").rglob("*"))

    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "stopped: no pod and no process left behind" in out
    everything = text + out + up.stdout + up.stderr + listed.stdout + ledger.stdout
    assert "rp-PLANTED-real-user-key-000" not in everything
    token = json.loads((home / "config.json").read_text())["admin_token"]
    assert token and token not in everything and token not in (home / SHELL_FILE).read_text()


def test_serve_needs_an_emulated_provider(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpuc.client.cli", "demo", "--serve", "--home", str(tmp_path / "h")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--provider runpod --serve" in done.stderr
