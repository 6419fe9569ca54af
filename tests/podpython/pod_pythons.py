"""The python3 interpreters this machine offers, each found, never assumed (tests/podpython)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

MINORS = (9, 10, 11, 12, 13)  # what gpuc's pod side supports (3.8: not, docs/contributing.md says why)


def find(minor: int) -> str | None:
    """An interpreter that runs and says it is 3.<minor>: on the PATH, under pyenv, or in /usr/bin, /usr/local/bin."""
    name = f"python3.{minor}"
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = [  # pyenv's own before the PATH's: its shims answer only for the versions selected
        *sorted(glob.glob(str(pyenv / "versions" / f"3.{minor}.*" / "bin" / name))),
        shutil.which(name),
        f"/usr/bin/{name}",
        f"/usr/local/bin/{name}",
    ]
    for path in candidates:
        if not path or not os.access(path, os.X_OK):
            continue
        try:
            said = subprocess.run(
                [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            continue
        if said.returncode == 0 and said.stdout.strip() == f"3.{minor}":
            return path
    return None
