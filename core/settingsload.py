"""Settings read once at the edge, from where the user keeps them. Precedence (highest first): the process
environment, the `.env` file (core/envfile.py), `$GPUC_HOME/config.json`, the defaults (core/settings.py). A bad
value is a ConfigError naming the variable and the one place to fix it."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuc.core.envcheck import warn_once
from gpuc.core.envfile import find_env_file, read_env_file
from gpuc.core.errors import ConfigError
from gpuc.core.rehearsal import check_rehearsal_environ
from gpuc.core.renamed import current_names
from gpuc.core.settings import (
    OLD_ENV_NAMES,
    SETTING_ENV_NAMES,
    SETTING_NAMES,
    Settings,
    env_name,
    with_current_names,
)
from gpuc.core.settingvalues import SettingError


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    loaded = _gather(environ, overrides)
    try:
        return Settings(**loaded.raw)
    except SettingError as exc:
        raise loaded.explain(exc) from None


def load_settings_lenient(environ: Mapping[str, str] | None = None) -> tuple[Settings, list[ConfigError]]:
    """For `gpuc doctor`: Settings with each bad value replaced by its default, and one error per bad value
    (the same error load_settings raises), so one typo does not hide every other check."""
    loaded = _gather(environ, {})
    problems: list[ConfigError] = []
    for _ in SETTING_NAMES:
        try:
            return Settings(**loaded.raw), problems
        except SettingError as exc:
            problems.append(loaded.explain(exc))
            if exc.field in loaded.raw:
                del loaded.raw[exc.field]
            else:  # a rule between fields whose named one is already the default: all defaults
                loaded.raw = {k: loaded.raw[k] for k in ("home", "env_file")}
    return Settings(home=loaded.raw["home"], env_file=loaded.raw["env_file"]), problems


@dataclass
class _Loaded:
    """The raw values load_settings gathered, and where each came from."""

    raw: dict[str, Any]
    env: dict[str, str]
    from_file: dict[str, str]
    env_file: Path
    config: Path
    old_names: dict[str, str] = field(default_factory=dict)  # current name -> the old one that gave its value

    def explain(self, exc: SettingError) -> ConfigError:
        current = env_name(exc.field)
        where = _source(current, self.env, self.from_file, self.env_file, self.config)
        variable = self.old_names.get(current, current)  # the name the user wrote, which is the one to fix
        if exc.fix is not None:
            return ConfigError(f"setting {variable} {exc.message}", hint=f"{exc.fix} {variable} in {where}")
        return ConfigError(f"setting {variable} is invalid: {exc.message}", hint=f"fix {variable} in {where}")


def _gather(environ: Mapping[str, str] | None, overrides: Mapping[str, Any]) -> _Loaded:
    env = dict(os.environ if environ is None else environ)
    home = Path(env.get("GPUC_HOME") or Path.home() / ".gpuc")
    env_file = find_env_file(env)
    raw: dict[str, Any] = {}
    config = home / "config.json"
    if config.exists():
        try:
            stored = json.loads(config.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                f"cannot read {config} ({exc.strerror or type(exc).__name__})",
                hint=f"make it yours and readable (chmod 600 {config}), or point GPUC_HOME at another folder",
            ) from None
        except ValueError:
            raise _config_unread(config, "not valid JSON") from None
        if not isinstance(stored, dict):
            raise _config_unread(config, "not a JSON object")
        raw.update(current_names(stored))
    from_file = read_env_file(env_file)
    warn_once(from_file, env, env_file, SETTING_ENV_NAMES)  # misspelt and empty keys, on stderr
    old_names = {new: old for old, new in OLD_ENV_NAMES.items() if _given_by(old, new, env, from_file)}
    env, from_file = with_current_names(env), with_current_names(from_file)
    merged = {**from_file, **env}
    if merged.get("GPUC_REHEARSAL"):
        problem = check_rehearsal_environ(merged, Path(merged["GPUC_REHEARSAL"]))
        if problem is not None:
            what, _, fix = problem.partition("; ")
            raise ConfigError(what, hint=fix)
    for name in SETTING_NAMES:
        variable = env_name(name)
        if variable in merged and merged[variable] != "":
            raw[name] = merged[variable]
    raw.update({"home": home, "env_file": env_file})
    raw.update(overrides)
    unknown = sorted(set(raw) - set(SETTING_NAMES))
    if unknown:
        raise ConfigError(
            f"setting {unknown[0]} in {config} is not a gpuc setting",
            hint=f"delete it from {config} (gpuc rewrites the file), or fix its spelling",
        )
    return _Loaded(raw, env, from_file, env_file, config, old_names)


def _given_by(old: str, new: str, env: Mapping[str, str], from_file: Mapping[str, str]) -> bool:
    """Whether the value in force is the old name's (the environment first, then the file; new before old)."""
    for place in (env, from_file):
        if place.get(new):
            return False
        if place.get(old):
            return True
    return False


def _source(variable: str, env: Mapping[str, str], from_file: Mapping[str, str], env_file: Path, config: Path) -> str:
    """Where a bad value came from, so the fix names the one place to edit (the environment wins)."""
    if env.get(variable):
        return "your environment (export/unset it)"
    if from_file.get(variable):
        return str(env_file)
    return f"your environment, {env_file} or {config}"


def _config_unread(config: Path, what: str) -> ConfigError:
    return ConfigError(f"{config} is {what}", hint=f"fix it or delete it (gpuc rewrites it): rm {config}")


def save_config(home: Path, *, forget: tuple[str, ...] = (), **values: Any) -> Path:
    """Merge values into $GPUC_HOME/config.json (and drop the names in `forget`), written atomically with
    mode 600 (it may hold a token)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.json"
    current: dict[str, Any] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            current = {}
    current = {**current_names(current if isinstance(current, dict) else {}), **values}
    for name in forget:
        current.pop(name, None)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(current, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path
