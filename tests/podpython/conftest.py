"""The pod side on every python3 the machine offers (tests/podpython/test_pod_pythons.py): each interpreter is
found, never assumed, and the run's summary says which were found and which were not (never a quiet skip)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = {minor: find(minor) for minor in MINORS}
    line = ", ".join(f"3.{m}: {p or 'NOT FOUND'}" for m, p in found.items())
    missing = [f"3.{m}" for m, p in found.items() if p is None]
    terminalreporter.write_sep(
        "!" if missing else "-",
        f"POD PYTHONS {'MISSING ' + ' '.join(missing) + ' (their tests skipped); ' if missing else ''}{line}",
        red=bool(missing),
        bold=bool(missing),
    )
