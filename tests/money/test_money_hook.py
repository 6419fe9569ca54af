"""The pre-commit secret guard, run by a real `git commit` in a temporary repository."""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

import pytest

from gpuc.client.setup.doctor import run_git
from gpuc.client.setup.hook import HOOK_MARKER, install_hook

HF = "hf_" + secrets.token_hex(17)
OWN = "pw-" + secrets.token_hex(8)  # a secret with no known prefix: only .env says it is one


@pytest.fixture
def guarded(repo: Path) -> Path:
    env = repo / ".env"
    env.write_text(
        f'HF_TOKEN={HF}\nexport MY_DB_PASSWORD="{OWN}"\nGPUC_FUNCTIONS_URL=http://127.0.0.1:8787\n'
        "GPUC_PROVIDER=runpod\n",
        encoding="utf-8",
    )
    env.chmod(0o600)
    (repo / ".gitignore").write_text(".env\n", encoding="utf-8")
    install_hook(repo, env, run_git)
    return repo


def commit(repo: Path, name: str, text: str) -> subprocess.CompletedProcess[str]:
    (repo / name).write_text(text, encoding="utf-8")
    subprocess.run(["git", "add", "-f", name], cwd=repo, check=True)
    return subprocess.run(["git", "commit", "-q", "-m", f"add {name}"], cwd=repo, capture_output=True, text=True)


def test_the_guard_holds_no_secret_in_clear_and_only_its_owner_can_read_it(guarded: Path) -> None:
    hook = guarded / ".git" / "hooks" / "pre-commit"
    body = hook.read_text()
    assert HOOK_MARKER in body and HF not in body and OWN not in body
    assert hook.stat().st_mode & 0o777 == 0o700


def test_a_clean_commit_goes_through(guarded: Path) -> None:
    done = commit(guarded, "train.py", "import os\ntoken = os.environ['HF_TOKEN']\nprovider = 'runpod'\n")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("text", "label"),
    [
        (f"login('{HF}')\n", "an hf_ token"),
        ("key = 'rpa_" + "A1b2" * 8 + "'\n", "an rpa_ token"),
        ("OPENAI = 'sk-" + "x9Y" * 10 + "'\n", "an sk- token"),
    ],
    ids=["hf", "rpa", "sk"],  # the texts hold a random token: ids must be the same in every xdist worker
)
def test_token_shaped_strings_are_refused_without_being_printed(guarded: Path, text: str, label: str) -> None:
    done = commit(guarded, "train.py", "print('hi')\n" + text)
    assert done.returncode != 0
    assert "gpuc secret guard: commit refused" in done.stderr
    assert f"train.py:2: {label}" in done.stderr
    secret = text.split("'")[1]
    assert secret not in done.stderr and secret not in done.stdout
    assert run_git(["rev-parse", "--verify", "HEAD"], guarded)[0] != 0  # nothing was committed


def test_a_value_from_env_is_refused(guarded: Path) -> None:
    done = commit(guarded, "db.py", f"conn = connect(password='{OWN}')\n")
    assert done.returncode != 0
    assert "db.py:1: a secret value from .env" in done.stderr and OWN not in done.stderr


def test_a_value_from_a_moved_env_is_still_refused_by_its_digest(guarded: Path) -> None:
    (guarded / ".env").rename(guarded.parent / "elsewhere.env")
    done = commit(guarded, "db.py", f"# {OWN}\n")
    assert done.returncode != 0 and "a secret value from .env" in done.stderr


def test_non_secret_settings_from_env_do_not_block_commits(guarded: Path) -> None:
    done = commit(guarded, "notes.md", "functions at http://127.0.0.1:8787 on runpod\n")
    assert done.returncode == 0, done.stderr


def test_committing_the_env_file_itself_is_refused(guarded: Path) -> None:
    subprocess.run(["git", "add", "-f", ".env"], cwd=guarded, check=True)
    done = subprocess.run(["git", "commit", "-q", "-m", "env"], cwd=guarded, capture_output=True, text=True)
    assert done.returncode != 0 and ".env: a .env file" in done.stderr


def test_the_previous_hook_runs_after_the_guard(repo: Path) -> None:
    hooks = repo / ".git" / "hooks"
    marker = repo.parent / "local-hook-ran"
    local = hooks / "pre-commit.local"
    local.write_text(f"#!/bin/sh\ntouch {marker}\nexit 3\n")
    local.chmod(0o755)
    install_hook(repo, repo / ".env", run_git)
    done = commit(repo, "a.txt", "fine\n")
    assert marker.exists() and done.returncode != 0  # its verdict stands


def test_reinstalling_updates_the_guard(guarded: Path) -> None:
    first = (guarded / ".git" / "hooks" / "pre-commit").read_text()
    install_hook(guarded, guarded / ".env", run_git)
    second = (guarded / ".git" / "hooks" / "pre-commit").read_text()
    assert first != second  # a fresh salt each time
    assert commit(guarded, "x.py", f"'{OWN}'\n").returncode != 0
