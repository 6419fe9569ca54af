from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No test sees the developer's keys, home or .env."""
    for key in list(os.environ):
        if key.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_", "HF_")):
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("GPUC_HOME", str(tmp_path / "gpuc-home"))
    monkeypatch.setenv("GPUC_ENV_FILE", str(tmp_path / "no.env"))
    yield


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "gpuc-home"
