"""Which .env gpuc reads, and what it says about one it cannot read: never a key silently dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuc.core.envfile import find_env_file, read_env_file
from gpuc.core.errors import ConfigError
from gpuc.core.settingsload import load_settings


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(0o600)
    return path


def test_the_nearest_env_up_to_the_repository_root_wins(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    deep = repo / "src" / "models"
    deep.mkdir(parents=True)
    root_env = write(repo / ".env", "HF_TOKEN=hf_rootlevel1234\n")
    assert find_env_file({}, deep) == root_env
    nearer = write(repo / "src" / ".env", "HF_TOKEN=hf_nearer12345\n")
    assert find_env_file({}, deep) == nearer


def test_the_search_stops_at_the_repository_root(tmp_path: Path) -> None:
    write(tmp_path / ".env", "HF_TOKEN=hf_outside12345\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    config = tmp_path / "xdg"
    assert find_env_file({"XDG_CONFIG_HOME": str(config)}, repo) == repo / ".env"
    user_env = write(config / "gpuc" / ".env", "HF_TOKEN=hf_userlevel123\n")
    assert find_env_file({"XDG_CONFIG_HOME": str(config)}, repo) == user_env


def test_gpuc_env_file_overrides_the_search(tmp_path: Path) -> None:
    chosen = tmp_path / "elsewhere.env"
    assert find_env_file({"GPUC_ENV_FILE": str(chosen)}, tmp_path) == chosen


def test_settings_name_the_file_they_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    env = write(repo / ".env", "GPUC_SILENCE_LIMIT_S=123\n")
    monkeypatch.chdir(repo)
    settings = load_settings({"GPUC_HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "x")})
    assert settings.env_file == env
    assert settings.silence_limit_s == 123


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("HF_TOKEN=hf_abcdefgh123\nthis is not a setting\n", 2, "not a KEY=value line"),
        ('A=1\nHF_TOKEN="hf_unterminated\nB=2\n', 2, "not a KEY=value line"),
        ("A=1\n\nVAST_API_KEY\n", 3, "names VAST_API_KEY without a value"),
    ],
)
def test_a_line_that_cannot_be_parsed_is_an_error_naming_file_and_line(
    tmp_path: Path, text: str, line: int, what: str
) -> None:
    path = write(tmp_path / ".env", text)
    with pytest.raises(ConfigError) as exc:
        read_env_file(path)
    assert f"{path} line {line}" in exc.value.message and what in exc.value.message
    assert "hf_" not in str(exc.value)  # the value is never echoed


def test_a_non_utf8_file_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", b"A=1\nB=caf\xe9\n")
    with pytest.raises(ConfigError, match=r"line 2 is not UTF-8"):
        read_env_file(path)


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    path = write(tmp_path / ".env", "\ufeffHF_TOKEN=hf_withbom12345\nexport B=2\n# note\n")
    assert read_env_file(path) == {"HF_TOKEN": "hf_withbom12345", "B": "2"}
