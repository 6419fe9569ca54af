"""The `.env` file: which one gpuc reads, and its KEY=value lines read strictly (a line that is not one is an
error naming the file and the line)."""

from __future__ import annotations

import io
import stat
from collections.abc import Mapping
from pathlib import Path

from gpuc.core.errors import ConfigError


def read_env_file(path: Path) -> dict[str, str]:
    """The .env file as a dict, or {} when absent. A file that cannot be read, is not UTF-8, or has a line
    that is not `KEY=value` is an error naming the file and the line: a key silently dropped would send a
    pod off without the secret the user thinks it has."""
    if not path.exists():
        return {}
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path}: {exc.strerror or type(exc).__name__}",
            hint=f"make it readable by you (mode 600): chmod 600 {path}",
        ) from None
    text = _decode_env(path, raw)
    _check_env_lines(path, text)
    from dotenv import dotenv_values  # lazy: only a .env pays for python-dotenv; the Lambda has none

    values = dotenv_values(stream=io.StringIO(text))
    return {k: v for k, v in values.items() if v is not None}


def _decode_env(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")  # an editor's BOM is not part of the first key
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} line {line} is not UTF-8",
            hint=f"save {path} as UTF-8 (KEY=value lines); `iconv -f latin1 -t utf-8` converts a Latin-1 file",
        ) from None


def _check_env_lines(path: Path, text: str) -> None:
    from dotenv.parser import parse_stream  # lazy: as in read_env_file

    consumed = 0  # lines before this binding: the parser's own count skips blank lines
    for binding in parse_stream(io.StringIO(text)):
        chunk = binding.original.string
        line = consumed + 1 + chunk[: len(chunk) - len(chunk.lstrip())].count("\n")
        consumed += chunk.count("\n")
        if binding.error:
            raise ConfigError(
                f"{path} line {line} is not a KEY=value line",
                hint=f"fix line {line} of {path}: KEY=value, quotes closed on the same line; comments start with #",
            )
        if binding.key is not None and binding.value is None:
            raise ConfigError(
                f"{path} line {line} names {binding.key} without a value",
                hint=f"write {binding.key}=value on line {line} of {path}, or delete the line",
            )


def find_env_file(environ: Mapping[str, str], cwd: Path | None = None) -> Path:
    """Which .env gpuc reads: GPUC_ENV_FILE if set; else the nearest .env from the current folder up to the
    repository root (the first folder holding .git); else the user's config folder
    ($XDG_CONFIG_HOME/gpuc/.env or ~/.config/gpuc/.env). When none exists, the current folder's (to create)."""
    explicit = environ.get("GPUC_ENV_FILE")
    if explicit:
        return Path(explicit)
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".env").is_file():
            return folder / ".env"
        if (folder / ".git").exists():
            break
    config = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "gpuc" / ".env"
    return config if config.is_file() else here / ".env"


def env_file_mode_ok(path: Path) -> bool:
    return path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077 == 0
