"""`up`'s results destination check, for what needs no S3 (tests/aws/test_destcheck_s3.py has that): unset,
unparsable, a `file://` folder, a git remote (a local bare repo: a real push of a probe ref, removed)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpuc.core.destcheck import EXAMPLES, check_destination
from gpuc.core.errors import ConfigError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr


def settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(home=tmp_path / "home", **extra)  # type: ignore[arg-type]


def refusal(s: Settings) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        check_destination(s, "exp")
    return caught.value


def git(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def bare_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", str(repo))
    return repo


def refs(repo: Path) -> str:
    return git("for-each-ref", cwd=repo)


# -- set, and parsable -----------------------------------------------------------------------------------
def test_no_destination_names_the_variable_and_a_working_value_per_kind(tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path))
    assert "GPUC_RESULTS_BUCKET is not set" in exc.message and "KEPT, billing" in exc.message
    for example in EXAMPLES:
        assert example in (exc.hint or "")
    assert "s3://my-bucket/gpuc" in (exc.hint or "") and ".r2.cloudflarestorage.com" in (exc.hint or "")


@pytest.mark.parametrize("bucket", ["gs://b/p", "results", "https://user:hunter22@example.com/b", "s3:///nobucket"])
def test_a_value_that_does_not_parse_is_refused_and_never_printed_whole(tmp_path: Path, bucket: str) -> None:
    exc = refusal(settings(tmp_path, results_bucket=bucket, ssh_sandbox_root=tmp_path))
    assert "GPUC_RESULTS_BUCKET" in exc.message
    assert "hunter22" not in f"{exc.message} {exc.hint}"


# -- file:// ---------------------------------------------------------------------------------------------
def test_a_file_folder_is_refused_for_a_rented_pod(tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path, results_bucket=f"file://{tmp_path / 'r'}"))
    assert "the pod's own disk" in exc.message and "destroyed with the pod" in exc.message
    assert not (tmp_path / "r").exists()


def test_a_file_folder_on_this_machine_takes_a_write_and_is_left_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    s = settings(tmp_path, results_bucket=f"file://{folder}", ssh_sandbox_root=tmp_path / "sandbox")
    result = check_destination(s, "exp")
    assert result.lines == (f"results: file://{folder / 'exp'} takes a write and answers a list (probe removed)",)
    assert not folder.exists(), "the probe (or the folders made for it) was left behind"


def test_a_file_folder_under_a_file_is_named(tmp_path: Path) -> None:
    """A folder gpuc cannot write, in a form that holds as root too (CI runs as root, and root writes
    through permission bits): a folder cannot be made under a regular file."""
    (tmp_path / "blocker").write_text("x")
    s = settings(tmp_path, results_bucket=f"file://{tmp_path / 'blocker'}", ssh_sandbox_root=tmp_path / "sandbox")
    exc = refusal(s)
    assert exc.message.startswith("cannot write the results folder") and "GPUC_RESULTS_BUCKET" in (exc.hint or "")
    assert (tmp_path / "blocker").read_text() == "x"


# -- git -------------------------------------------------------------------------------------------------
def test_a_git_remote_that_takes_a_push_passes_and_keeps_no_ref(tmp_path: Path) -> None:
    repo = bare_repo(tmp_path)
    result = check_destination(settings(tmp_path, git_remote=str(repo)), "exp")
    assert result.lines == (f"results: git {repo} takes a push and answers a list (probe ref removed)",)
    assert "10 MB or more have nowhere to go" in result.warnings[0]
    assert refs(repo) == "", "the probe ref was left in the remote"


def test_a_git_remote_that_refuses_pushes_is_refused(tmp_path: Path) -> None:
    """As a host refuses a token without push rights: the server turns the push down."""
    repo = bare_repo(tmp_path)
    hook = repo / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'permission to push denied' >&2\nexit 1\n")
    hook.chmod(0o755)
    exc = refusal(settings(tmp_path, git_remote=str(repo)))
    assert exc.message.startswith(f"git {repo} refused the push of a probe ref")
    assert "permission to push denied" in exc.message and "GPUC_GIT_TOKEN" in (exc.hint or "")
    assert refs(repo) == ""


def test_a_git_remote_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path, git_remote=str(tmp_path / "nowhere.git")))
    assert "refused the push of a probe ref" in exc.message


def test_the_laptops_git_config_does_not_make_the_check_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A global insteadOf rule (or credential helper) works on this laptop, not on the pod: left out."""
    repo = bare_repo(tmp_path)
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "{repo}"]\n\tinsteadOf = {tmp_path / "alias.git"}\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    exc = refusal(settings(tmp_path, git_remote=str(tmp_path / "alias.git")))
    assert "refused the push" in exc.message


def test_an_ssh_remote_is_refused_for_a_rented_pod(tmp_path: Path) -> None:
    for remote in ("git@github.com:you/exp.git", "ssh://git@github.com/you/exp.git"):
        exc = refusal(settings(tmp_path, git_remote=remote))
        assert "ssh remote" in exc.message and "https://github.com/you/exp.git" in (exc.hint or "")


def test_a_token_reaches_git_by_the_environment_only_and_is_never_printed(tmp_path: Path) -> None:
    token = "ghp_abcdefghijklmnop0123456789"
    seen: list[tuple[list[str], dict[str, str]]] = []

    def runner(args: list[str], cwd: Path, env: Mapping[str, str]) -> tuple[int, str]:
        seen.append((args, dict(env)))
        if "push" in args:
            return 128, f"remote: Permission denied for {token}"
        return 0, "4b825dc642cb6eb9a060e54bf8d69288fbee4904\n"

    s = settings(tmp_path, git_remote="https://github.com/you/exp.git", git_token=SecretStr(token))
    with pytest.raises(ConfigError) as caught:
        check_destination(s, "exp", git_run=runner)
    assert token not in f"{caught.value.message} {caught.value.hint}"
    assert all(token not in " ".join(args) for args, _ in seen), "the token was in git's argv"
    assert all(env.get("GPUC_GIT_TOKEN") == token for _, env in seen)
    assert all("credential.helper=" in args for args, _ in seen), "the laptop's credential helpers were not reset"


def test_credentials_in_a_git_url_are_refused(tmp_path: Path) -> None:
    exc = refusal(settings(tmp_path, git_remote="https://x:ghp_secret1234567@github.com/you/exp.git"))
    assert "credentials in the URL" in exc.message and "ghp_secret1234567" not in f"{exc.message} {exc.hint}"
