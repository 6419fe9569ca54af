from __future__ import annotations

from pathlib import Path

import pytest

from gpuc.core.errors import ConfigError
from gpuc.core.redact import redact
from gpuc.core.settingsload import load_settings, save_config
from gpuc.core.signing import derive_key, new_token, sign, token_matches, verify


def test_env_beats_dotenv_beats_config(tmp_path: Path) -> None:
    home = tmp_path / "h"
    save_config(home, silence_limit_s=111, idle_warn_s=222, heartbeat_interval_s=333)
    env_file = tmp_path / ".env"
    env_file.write_text("GPUC_IDLE_WARN_S=44\nGPUC_HEARTBEAT_INTERVAL_S=55\nRUNPOD_API_KEY=rpa_abcdefgh12345\n")
    s = load_settings({"GPUC_HOME": str(home), "GPUC_ENV_FILE": str(env_file), "GPUC_HEARTBEAT_INTERVAL_S": "6"})
    assert (s.silence_limit_s, s.idle_warn_s, s.heartbeat_interval_s) == (111, 44, 6)
    assert s.runpod_api_key is not None and "rpa_abcdefgh12345" not in repr(s)


def test_a_bad_setting_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GPUC_SILENCE_LIMIT_S"):
        load_settings({"GPUC_HOME": str(tmp_path), "GPUC_SILENCE_LIMIT_S": "soon"})


def test_an_unreadable_env_file_is_an_error(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ConfigError, match=r"\.env line 1 is not UTF-8"):
        load_settings({"GPUC_HOME": str(tmp_path), "GPUC_ENV_FILE": str(env_file)})


def test_config_file_is_private(tmp_path: Path) -> None:
    path = save_config(tmp_path, admin_token="x")
    assert path.stat().st_mode & 0o777 == 0o600


def test_signatures() -> None:
    key = derive_key(new_token())
    sig = sign(key, 100, 7, b'{"a":1}')
    assert verify(key, 100, 7, b'{"a":1}', sig)
    assert not verify(key, 100, 8, b'{"a":1}', sig)
    assert not verify(key, 101, 7, b'{"a":1}', sig)
    assert not verify(key, 100, 7, b'{"a":2}', sig)
    assert not verify(derive_key(new_token()), 100, 7, b'{"a":1}', sig)
    assert token_matches("abc", "abc") and not token_matches("abc", "abd")


def test_redact_known_values_and_token_shapes() -> None:
    text = "key=supersecretvalue hf_abcdefghijk sk-ABCDEFGHIJKL Bearer abc.def.ghi-123"
    out = redact(text, ["supersecretvalue"])
    for leaked in ("supersecretvalue", "hf_abcdefghijk", "sk-ABCDEFGHIJKL", "abc.def.ghi-123"):
        assert leaked not in out
