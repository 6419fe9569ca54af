"""An install without gpuc.testkit (the wheel ships it; a trimmed install may not): `gpuc demo`
and `gpuc drill` say how to get it, one line, no traceback, exit 2; the everyday commands never need it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Runs the CLI with gpuc.testkit hidden, as a `pip install gpuc` would have it.
HIDE_TESTKIT = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "gpuc.testkit" or name.startswith("gpuc.testkit."):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Hide())
import importlib.util
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.startswith("gpuc.testkit") else _find(name, *a)
from gpuc.client.cli import main
sys.argv = ["gpuc", *sys.argv[1:]]
main()
"""


def gpuc_without_testkit(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"GPUC_HOME": str(tmp_path / "home"), "GPUC_ENV_FILE": str(tmp_path / "no.env"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", HIDE_TESTKIT, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.mark.parametrize("command", ["demo", "drill"])
def test_the_scaffolded_commands_say_how_to_get_what_they_need(tmp_path: Path, command: str) -> None:
    done = gpuc_without_testkit(tmp_path, command)
    assert done.returncode == 2, done.stderr
    assert f"`gpuc {command}` needs gpuc's emulators and fakes" in done.stderr
    assert "pip install --force-reinstall 'gpuc[rehearse]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_everyday_commands_work_without_the_testkit(tmp_path: Path) -> None:
    done = gpuc_without_testkit(tmp_path, "ls")
    assert "Traceback" not in done.stderr and "testkit" not in done.stderr
    assert done.returncode == 0, done.stderr
