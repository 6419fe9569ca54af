from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

GPUC = str(Path(sys.executable).parent / "gpuc")


def gpuc(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GPUC, *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=60
    )


def test_fast_help_lists_the_same_commands_as_click() -> None:
    from gpuc.client.cli import cli
    from gpuc.client.command_table import top_help

    fast = top_help()
    for name in cli.list_commands(None):  # type: ignore[arg-type]
        assert f"  {name} " in fast
    assert "Usage: gpuc" in gpuc("--help").stdout


@pytest.mark.parametrize(
    ("args", "message", "fix"),
    [
        (("up",), "an experiment name is required", "gpuc up NAME"),
        (("up", "bad name!"), "is not valid", "letters, digits"),
        (("down", "lp-nosuchpod"), "no pod, run or experiment 'lp-nosuchpod' was started by gpuc", "gpuc ls"),
        (("keep", "lp-x", "--for", "soon"), "duration 'soon' is not valid", "2h"),
    ],
)
def test_bad_input_gets_one_line_and_a_fix(args: tuple[str, ...], message: str, fix: str) -> None:
    proc = gpuc(*args)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert message in proc.stderr and "fix:" in proc.stderr and fix in proc.stderr


def test_an_unreadable_env_file_is_reported(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("A=1\n")
    env_file.chmod(0o000)
    if os.access(env_file, os.R_OK):  # root reads anything: make it undecodable instead
        env_file.chmod(0o600)
        env_file.write_bytes(b"\xff\xfe\x00")
    proc = gpuc("ls", env={"GPUC_ENV_FILE": str(env_file)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot read" in proc.stderr or "line 1 is not UTF-8" in proc.stderr


def test_a_world_readable_env_file_is_refused_before_any_pod_exists(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    # Built at run time: the upload (run from this repository) refuses a file holding a value gpuc holds.
    token = "hf_" + "worldReadable0a1b2c3d"
    env_file.write_text(f"HF_TOKEN={token}\n")
    env_file.chmod(0o644)
    proc = gpuc("up", "exp1", env={"GPUC_ENV_FILE": str(env_file)})
    assert proc.returncode == 2 and "chmod 600" in proc.stderr
    assert token not in proc.stderr + proc.stdout


def test_run_documents_force() -> None:
    out = gpuc("run", "--help").stdout
    assert "--force" in out and "Refused while POD still runs a job" in out
