"""What a setting's value may be: a secret that never prints (SecretStr), the error that names a bad one
(SettingError), and the converter each Settings field gets from its annotation. The rules are pydantic's lax
ones for the field types used here: numbers from strings, paths from strings, secrets from strings, a
Literal's values only; a time setting takes units ("20m", "1h30m")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuc.core.clock import DURATION_SHAPES, duration_seconds


class SecretStr:
    """A secret that never prints (pydantic's SecretStr contract: `get_secret_value()`, and `**********`
    in str and repr). Anything with `get_secret_value()` (a pydantic SecretStr) converts to one."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __repr__(self) -> str:
        return f"SecretStr('{self}')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __len__(self) -> int:
        return len(self._value)


class SettingError(ValueError):
    """One field of Settings has a value of the wrong kind. Never carries the value (it may be a secret).
    `fix`, when given, is what to do to the variable ("remove the newline from"): the hint then says it."""

    def __init__(self, field: str, message: str, fix: str | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.fix = fix


def _number(kind: type[float] | type[int]) -> Callable[[str, Any], Any]:
    def convert(name: str, value: Any) -> Any:
        if isinstance(value, bool):
            raise SettingError(name, f"expected a number, got {type(value).__name__}")
        try:
            number = float(value) if kind is float else _integer(value)
        except (TypeError, ValueError):
            raise SettingError(name, "expected a number" if kind is float else "expected a whole number") from None
        if isinstance(number, float) and math.isnan(number):
            raise SettingError(name, "expected a number, got NaN")
        return number

    return convert


def _integer(value: Any) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(value)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SettingError(name, f"expected text, got {type(value).__name__}")
    return value


def _path(name: str, value: Any) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise SettingError(name, f"expected a path, got {type(value).__name__}")
    return Path(value)


def _secret(name: str, value: Any) -> SecretStr:
    if isinstance(value, SecretStr):
        secret = value
    elif isinstance(value, str):
        secret = SecretStr(value)
    elif callable(getattr(value, "get_secret_value", None)):  # a pydantic SecretStr (tests, the drill)
        secret = SecretStr(str(value.get_secret_value()))
    else:
        raise SettingError(name, f"expected text, got {type(value).__name__}")
    _header_safe(name, secret.get_secret_value())
    return secret


def _url(name: str, value: Any) -> str:
    text = _text(name, value)
    _header_safe(name, text)
    return text


def _header_safe(name: str, value: str) -> None:
    """A key, token or URL gpuc sends in a header or a request line: one line of printable ASCII. Refused
    here, when read, naming the variable: sent as it is, a trailing newline (a CRLF file, a CI secret saved
    with its newline) makes the HTTP client raise with the whole value in its message."""
    if value.isascii() and value.isprintable():
        return
    line = value.rstrip("\r\n")
    if line != value and line.isascii() and line.isprintable():
        raise SettingError(
            name,
            "ends with a newline (a file saved with CRLF, or a secret copied with its line end), which no HTTP"
            " header can carry",
            fix="remove the newline from",
        )
    at = next(i for i, c in enumerate(value) if not (c.isascii() and c.isprintable()))
    what = "a non-ASCII character"
    if value[at].isascii():
        what = "a line break" if value[at] in "\r\n" else "a control character"
    raise SettingError(
        name,
        f"holds {what} at character {at + 1} of {len(value)}, which no HTTP header can carry (a key is one line"
        " of plain ASCII)",
        fix=f"remove {what} (character {at + 1}) from",
    )


def _choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def convert(name: str, value: Any) -> str:
        if value not in choices:
            raise SettingError(name, f"expected one of {', '.join(choices)}")
        return str(value)

    return convert


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingError(name, "expected 1 or 0 (true/false, yes/no)")


def _duration(unit_s: float) -> Callable[[str, Any], Any]:
    """A time setting: a number (seconds, or hours for *_hours as before) or a duration with units ("20m",
    "1h30m"), read by the one parser `gpuc extend 2h` uses."""
    number = _number(float)

    def convert(name: str, value: Any) -> Any:
        if not isinstance(value, str):
            return number(name, value)
        try:
            float(value)
        except ValueError:
            pass
        else:
            return number(name, value)  # a bare number keeps the field's unit
        try:
            return duration_seconds(value) / unit_s
        except ValueError as exc:
            shapes = "seconds (1200)" if unit_s == 1.0 else "hours (12)"
            raise SettingError(name, f"{exc}: write {shapes} or a duration: {DURATION_SHAPES}") from None

    return convert


def _optional(convert: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else convert(name, value)


_BASE: dict[str, Callable[[str, Any], Any]] = {
    "float": _number(float),
    "int": _number(int),
    "str": _text,
    "Path": _path,
    "SecretStr": _secret,
    "bool": _flag,
}


def _converter(annotation: str) -> Callable[[str, Any], Any]:
    """From the field's annotation (a string under `from __future__ import annotations`)."""
    base, optional = annotation, annotation.endswith(" | None")
    if optional:
        base = annotation.removesuffix(" | None")
    if base.startswith("Literal["):
        inner = base.removeprefix("Literal[").removesuffix("]")
        convert = _choice(tuple(part.strip().strip("\"'") for part in inner.split(",")))
    else:
        convert = _BASE[base]  # a KeyError here: a new field type needs a converter above
    return _optional(convert) if optional else convert


def field_converter(f: dataclasses.Field[Any]) -> Callable[[str, Any], Any]:
    """Every time setting takes units: its name ends in _s (seconds) or _hours."""
    base = str(f.type).removesuffix(" | None")
    if base == "str" and f.name.endswith("_url"):  # in the request line: the rule a header's value obeys
        return _optional(_url) if str(f.type).endswith(" | None") else _url
    if base == "float" and f.name.endswith(("_s", "_hours")):
        convert = _duration(3600.0 if f.name.endswith("_hours") else 1.0)
        return _optional(convert) if str(f.type).endswith(" | None") else convert
    return _converter(str(f.type))
