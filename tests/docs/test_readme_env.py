"""The README's `.env` lines, run as a user pastes them, in a real shell: the file they make is one `gpuc
doctor` and `up` take (mode 600, every line KEY=value), whatever the shell's umask and whether a `.env`
was there before (a mode-644 one from an editor included)."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from gpuc.core.envfile import env_file_mode_ok, read_env_file
from gpuc.testkit import docgen

SHELLS = [name for name in ("bash", "sh", "zsh") if shutil.which(name)]


def env_snippet() -> str:
    """From the README's line that writes `.env` to the heredoc's end."""
    lines = (docgen.ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if ".env <<'EOF'" in line)
    end = next(i for i in range(start + 1, len(lines)) if lines[i] == "EOF")
    return "\n".join(lines[start : end + 1]) + "\n"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("before", [None, 0o644])
def test_the_readme_env_lines_make_a_file_doctor_takes(tmp_path: Path, shell: str, before: int | None) -> None:
    env = tmp_path / ".env"
    if before is not None:
        env.write_text("# mine\n")
        env.chmod(before)
    done = subprocess.run(
        [shell, "-c", "umask 022\n" + env_snippet()], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(env.stat().st_mode) == 0o600 and env_file_mode_ok(env)
    values = read_env_file(env)
    assert values["GPUC_PROVIDER"] == "runpod" and values["GPUC_MONTHLY_BUDGET"] == "40", values
    if before is not None:
        assert env.read_text().startswith("# mine\n"), "what was there is kept"
