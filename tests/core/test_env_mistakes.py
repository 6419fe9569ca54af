""".env mistakes are named (misspelt keys, empty values), times take units, a bad setting
names its key, problem, file and fix, and an idle warning at or after the destroy is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuc.core import envcheck
from gpuc.core.clock import duration_seconds, parse_duration
from gpuc.core.errors import ConfigError
from gpuc.core.settings import SETTING_ENV_NAMES
from gpuc.core.settingsload import load_settings, load_settings_lenient, save_config


def env_for(tmp_path: Path, text: str) -> dict[str, str]:
    env_file = tmp_path / ".env"
    env_file.write_text(text)
    return {"GPUC_HOME": str(tmp_path / "home"), "GPUC_ENV_FILE": str(env_file)}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("20m", 1200), ("2h", 7200), ("1h30m", 5400), ("1h 30m", 5400), ("1d", 86400), ("1.5h", 5400)],
)
def test_one_parser_reads_durations_with_units(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds
    assert parse_duration(text) == seconds  # the command line's (`extend 2h`) is the same parser


def test_the_command_line_wants_a_unit_and_settings_keep_bare_seconds() -> None:
    with pytest.raises(ConfigError, match="needs a unit"):
        parse_duration("2")
    assert duration_seconds("1200", bare_seconds=True) == 1200


def test_time_settings_take_units(tmp_path: Path) -> None:
    env = env_for(tmp_path, "GPUC_IDLE_DESTROY_S=20m\nGPUC_IDLE_WARN_S=900\nGPUC_MAX_HOURS=90m\n")
    settings = load_settings(env)
    assert (settings.idle_destroy_s, settings.idle_warn_s, settings.max_hours) == (1200, 900, 1.5)


def test_a_bad_duration_names_key_problem_file_and_fix(tmp_path: Path) -> None:
    env = env_for(tmp_path, "GPUC_IDLE_DESTROY_S=20 min\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    error = caught.value
    assert "GPUC_IDLE_DESTROY_S" in error.message and "unit" in error.message and "20m" in error.message
    assert error.hint == f"fix GPUC_IDLE_DESTROY_S in {tmp_path / '.env'}"


def test_doctor_loads_around_a_bad_setting(tmp_path: Path) -> None:
    env = env_for(tmp_path, "GPUC_IDLE_DESTROY_S=soon\nGPUC_SILENCE_LIMIT_S=7m\n")
    settings, problems = load_settings_lenient(env)
    assert settings.idle_destroy_s == 1200 and settings.silence_limit_s == 420  # the default, and the rest read
    assert [p.message.split(" is ")[0] for p in problems] == ["setting GPUC_IDLE_DESTROY_S"]


@pytest.mark.parametrize("warn", ["20m", "25m"])
def test_an_idle_warning_at_or_after_the_destroy_is_refused(tmp_path: Path, warn: str) -> None:
    env = env_for(tmp_path, f"GPUC_IDLE_WARN_S={warn}\nGPUC_IDLE_DESTROY_S=20m\n")
    with pytest.raises(ConfigError, match="GPUC_IDLE_WARN_S below GPUC_IDLE_DESTROY_S"):
        load_settings(env)


def test_a_misspelt_key_is_named_with_did_you_mean(tmp_path: Path) -> None:
    lines = envcheck.env_mistakes(
        {"RUNPD_API_KEY": "rpa_SECRETVALUE123", "GPUC_IDEL_DESTROY_S": "600"}, {}, tmp_path / ".env", SETTING_ENV_NAMES
    )
    assert any("RUNPD_API_KEY" in line and "did you mean RUNPOD_API_KEY?" in line for line in lines)
    assert any("did you mean GPUC_IDLE_DESTROY_S?" in line for line in lines)
    assert not any("SECRETVALUE" in line or "600" in line for line in lines)  # names, never values


def test_the_shells_other_variables_are_not_judged(tmp_path: Path) -> None:
    shell = {
        "GPU_DEVICE_ORDINAL": "0",
        "HF_HOME": "/x",
        "PATH": "/bin",
        "RUNPOD_POD_ID": "abc",
        "VASTAI_HOME": "",
        "CUDA_VISIBLE_DEVICES": "",
        "EDITOR": "",
        "HF_TOKENS": "x",  # close to HF_TOKEN, but its first word is not gpuc's or a provider's
    }
    assert envcheck.env_mistakes({}, shell, tmp_path / ".env", SETTING_ENV_NAMES) == []


def test_an_empty_value_is_named_once_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = env_for(tmp_path, "GPUC_RESULTS_BUCKET=\nGPUC_IDLE_WARN_S=600\n")
    load_settings(env)
    load_settings(env)
    err = capsys.readouterr().err
    assert err.count("GPUC_RESULTS_BUCKET") == 1 and "no value" in err and str(tmp_path / ".env") in err


def test_the_watchdog_settings_are_named_watchdog_and_the_old_names_still_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = env_for(tmp_path, "GPUC_WATCHDOG_URL=https://new.example\nGPUC_WATCHDOG_TIMEOUT_S=30s\n")
    settings = load_settings(new)
    assert (settings.watchdog_url, settings.watchdog_timeout_s) == ("https://new.example", 30.0)
    # A .env written before the rename keeps working, and is not called misspelt.
    old = env_for(tmp_path, "GPUC_FUNCTIONS_URL=https://old.example\nGPUC_FUNCTIONS_TIMEOUT_S=20s\n")
    settings = load_settings(old)
    assert (settings.watchdog_url, settings.watchdog_timeout_s) == ("https://old.example", 20.0)
    assert "GPUC_FUNCTIONS" not in capsys.readouterr().err
    # Both set: the new name wins, wherever the old one is (the environment beats the file as ever).
    both = {**env_for(tmp_path, "GPUC_WATCHDOG_URL=https://new.example\n"), "GPUC_FUNCTIONS_URL": "https://old.example"}
    assert load_settings(both).watchdog_url == "https://old.example"
    both = {**env_for(tmp_path, "GPUC_FUNCTIONS_URL=https://old.example\n"), "GPUC_WATCHDOG_URL": "https://new.example"}
    assert load_settings(both).watchdog_url == "https://new.example"
    both = env_for(tmp_path, "GPUC_FUNCTIONS_URL=https://old.example\nGPUC_WATCHDOG_URL=https://new.example\n")
    assert load_settings(both).watchdog_url == "https://new.example"


def test_a_config_json_written_before_the_watchdog_rename_keeps_its_watchdog(tmp_path: Path) -> None:
    """A deploy by an older gpuc saved `functions_url`: the laptop still talks to that watchdog, not to the
    loopback default, and the next save leaves one key under the current name."""
    env = env_for(tmp_path, "")
    home = Path(env["GPUC_HOME"])
    home.mkdir()
    (home / "config.json").write_text('{"functions_url": "https://deployed.example", "admin_token": "t"}')
    assert load_settings(env).watchdog_url == "https://deployed.example"
    save_config(home, admin_token="t2")
    assert json.loads((home / "config.json").read_text()) == {
        "admin_token": "t2",
        "watchdog_url": "https://deployed.example",
    }
    save_config(home, watchdog_url="https://new.example")
    assert load_settings(env).watchdog_url == "https://new.example"


def test_a_config_json_that_is_not_an_object_is_named_with_its_fix(tmp_path: Path) -> None:
    env = env_for(tmp_path, "")
    home = Path(env["GPUC_HOME"])
    home.mkdir()
    for text, what in [
        ("[1, 2]", "is not a JSON object"),
        ('"url"', "is not a JSON object"),
        ("{", "is not valid JSON"),
    ]:
        (home / "config.json").write_text(text)
        with pytest.raises(ConfigError, match=what) as caught:
            load_settings(env)
        assert "rm " in (caught.value.hint or "")
