"""Settings without pydantic (every `gpuc` command reads it first): the same rules as before, checked by
the dataclass itself: numbers from text, secrets that never print, a Literal's values only, unknown
settings refused, bounds kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import SecretStr as PydanticSecret

from gpuc.core.errors import ConfigError
from gpuc.core.settings import SETTING_NAMES, Settings
from gpuc.core.settingsload import load_settings
from gpuc.core.settingvalues import SecretStr, SettingError

PLANTED = "rpa_PLANTEDsecret0123456789"


def test_text_from_the_environment_becomes_numbers_paths_and_secrets(tmp_path: Path) -> None:
    raw: dict[str, object] = {"reaper_period_s": "30", "max_destroys_per_run": "7", "runpod_api_key": PLANTED}
    s = Settings(home=str(tmp_path), **raw)  # type: ignore[arg-type]
    assert (s.reaper_period_s, s.max_destroys_per_run, s.home) == (30.0, 7, tmp_path)
    assert isinstance(s.runpod_api_key, SecretStr) and s.runpod_api_key.get_secret_value() == PLANTED


def test_a_secret_never_prints(tmp_path: Path) -> None:
    s = Settings(home=tmp_path, admin_token=PydanticSecret(PLANTED))  # type: ignore[arg-type]
    assert PLANTED not in repr(s) and PLANTED not in str(s.admin_token) and s.secret_values() == [PLANTED]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("silence_limit_s", "soon"),
        ("max_destroys_per_run", "2.5"),
        ("runpod_cloud_type", "PRIVATE"),
        ("provider", 5),
        ("upload_max_mb", 0),
        ("reaper_period_s", "nan"),
    ],
)
def test_a_value_of_the_wrong_kind_is_refused(field: str, value: object) -> None:
    with pytest.raises(SettingError) as caught:
        Settings(**{field: value})  # type: ignore[arg-type]
    assert caught.value.field == field


def test_an_unknown_setting_in_config_json_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"reaper_perod_s": 30}))
    with pytest.raises(ConfigError, match="reaper_perod_s"):
        load_settings({"GPUC_HOME": str(tmp_path), "GPUC_ENV_FILE": str(tmp_path / "no.env")})


def test_a_bad_value_names_its_variable_and_never_its_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({"GPUC_HOME": str(tmp_path), "GPUC_MAX_HOURS": "forever-PLANTED"})
    assert "GPUC_MAX_HOURS" in caught.value.message and "PLANTED" not in str(caught.value)


def test_overrides_are_checked_like_any_value(tmp_path: Path) -> None:
    s = Settings(home=tmp_path).with_overrides(admin_token="tok", reaper_period_s="60")
    assert isinstance(s.admin_token, SecretStr) and s.reaper_period_s == 60.0
    with pytest.raises(SettingError):
        s.with_overrides(local_boot_s="slow")


def test_settings_are_frozen_and_list_their_names(tmp_path: Path) -> None:
    s = Settings(home=tmp_path)
    with pytest.raises(AttributeError):
        s.home = Path("/")  # type: ignore[misc]
    assert {"home", "admin_token", "runpod_cloud_type"} <= set(SETTING_NAMES) and s.as_dict()["home"] == tmp_path
