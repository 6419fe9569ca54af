from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def git_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """git that ignores the developer's own config (hooksPath, templates, signing) and needs no identity."""
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Test")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "test@example.com")


@pytest.fixture
def repo(git_env: None, tmp_path: Path) -> Path:
    path = tmp_path / "experiments"
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    return path
