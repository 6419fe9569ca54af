"""The pod side on every python3 the machine offers (tests/podpython/test_pod_pythons.py): each interpreter is
found, never assumed, and the run's summary says which were found and which were not (never a quiet skip)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pod_pythons import MINORS, find


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
