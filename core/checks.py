"""Documents checked by hand into read-only records (Shapes), for the paths that must not load pydantic (it costs
about three bare interpreter starts): `gpuc ls` and `gpuc ledger` read the watchdog's status and both
providers' pod listings through these.

A record is a Shape whose fields say how each value is checked (`checked(check, default)`); `build`
refuses a value of the wrong type, a word outside its set, a number out of bounds, a missing required key,
and an unknown key unless the class says EXTRA = "ignore". Nothing is ever read as a default in place of
a value that was there: an answer gpuc cannot read raises, so a listing can never read as an empty account.

Two families of checks. The strict ones (`number`, `integer`, `flag`) take JSON's own types only: gpuc's
watchdog never sends a number as text. The lax ones (`lax_number`, `lax_integer`, `lax_flag`) read what
pydantic's lax mode read from the providers before (RunPod once sent `costPerHr` as a string), minus a
bool where a number belongs: that is refused, never counted as 1.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import MISSING, dataclass
from typing import Any, ClassVar, TypeVar

Check = Callable[[Any, str], Any]
S = TypeVar("S", bound="Shape")


class Unexpected(ValueError):
    """A document is not the shape gpuc reads; the message names the field, never its value (a provider's
    listing echoes a pod's env, the watchdog's status its pods)."""


def text(max_length: int | None = None, min_length: int = 0) -> Check:
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise Unexpected(f"{where} is not text")
        if len(value) < min_length or (max_length is not None and len(value) > max_length):
            raise Unexpected(f"{where} has a length out of bounds")
        return value

    return check


def number(low: float | None = None, high: float | None = None) -> Check:
    """A float field: an int or a float (never a bool), within [low, high] when given (NaN is in none)."""

    def check(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Unexpected(f"{where} is not a number")
        if (low is not None and not value >= low) or (high is not None and not value <= high):
            raise Unexpected(f"{where} is out of bounds")
        return float(value)

    return check


def integer(low: int | None = None, high: int | None = None) -> Check:
    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Unexpected(f"{where} is not an integer")
        if (low is not None and value < low) or (high is not None and value > high):
            raise Unexpected(f"{where} is out of bounds")
        return value

    return check


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise Unexpected(f"{where} is not true or false")
    return value


def one_of(*words: str) -> Check:
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str) or value not in words:
            raise Unexpected(f"{where} is not one of {', '.join(words)}")
        return value

    return check


def maybe(inner: Check) -> Check:
    def check(value: Any, where: str) -> Any:
        return None if value is None else inner(value, where)

    return check


def many(inner: Check, max_length: int | None = None) -> Check:
    def check(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Unexpected(f"{where} is not a list")
        if max_length is not None and len(value) > max_length:
            raise Unexpected(f"{where} has too many items")
        return tuple(inner(item, f"{where}[{i}]") for i, item in enumerate(value))

    return check


def record(cls: type[S]) -> Check:
    """A nested object, built as `cls` (its own EXTRA says what an unknown key does)."""

    def check(value: Any, where: str) -> S:
        return build(cls, value, where)

    return check


@dataclass(frozen=True)
class Field:
    """How one field of a Shape is checked, and its default (MISSING: the field is required)."""

    check: Check
    default: Any = MISSING


def checked(check: Check, default: Any = MISSING) -> Any:
    """A field of a Shape: `name: type = checked(check, default)` (no default: it is required)."""
    return Field(check, default)


class Shape:
    """A checked document's record. Its fields are the class's `checked(...)` attributes, in order.

    Not a dataclass: a dataclass generates and compiles its methods when its module is imported, about a
    millisecond per class, and `gpuc ls` imports two dozen shapes on every run. A Shape is read-only, equal
    to another of its class with the same values, and its repr names no value (a pod's env must not print).
    """

    EXTRA: ClassVar[str] = "forbid"
    FIELDS: ClassVar[dict[str, Field]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found: dict[str, Field] = {}
        for klass in reversed(cls.__mro__):
            found.update((name, value) for name, value in vars(klass).items() if isinstance(value, Field))
        cls.FIELDS = found

    def __init__(self, **values: Any) -> None:
        for name, spec in self.FIELDS.items():
            if name not in values and spec.default is MISSING:
                raise TypeError(f"{type(self).__name__} needs {name}")
            object.__setattr__(self, name, values.pop(name, spec.default))
        if values:
            raise TypeError(f"{type(self).__name__} has no field {sorted(values)[0]!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self.FIELDS)})"


def as_dict(shape: Shape) -> dict[str, Any]:
    """A Shape as JSON-like values (nested shapes as dicts, tuples as lists)."""
    return {name: _plain(getattr(shape, name)) for name in shape.FIELDS}


def _plain(value: Any) -> Any:
    if isinstance(value, Shape):
        return as_dict(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def replaced(shape: S, **changes: Any) -> S:
    """A copy of `shape` with some fields changed (unchecked: for tests and for gpuc's own values)."""
    return type(shape)(**{**{name: getattr(shape, name) for name in shape.FIELDS}, **changes})


def build(cls: type[S], raw: Any, where: str) -> S:
    """`cls` from a JSON object: every required key present, every value checked, and every key known
    unless `cls.EXTRA` is "ignore" (a provider's answer: it grows fields gpuc does not read)."""
    if not isinstance(raw, dict):
        raise Unexpected(f"{where or 'the answer'} is not an object")
    known = cls.FIELDS
    if cls.EXTRA != "ignore":
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise Unexpected(f"{where or 'the answer'} has an unknown field {unknown[0]!r}")
    values: dict[str, Any] = {}
    for name, spec in known.items():
        here = f"{where}.{name}" if where else name
        if name in raw:
            values[name] = spec.check(raw[name], here)
        elif spec.default is MISSING:
            raise Unexpected(f"{here} is missing")
    return cls(**values)


_ANY_NUMBER, _ANY_INTEGER = number(), integer()


def lax_number(value: Any, where: str) -> float:
    """A float as a provider may send it: a JSON number or a numeric string."""
    if isinstance(value, str):
        try:
            if value.isascii():  # float() reads other scripts' digits too; pydantic does not
                return float(value)
        except ValueError:
            pass
        raise Unexpected(f"{where} is not a number")
    return float(_ANY_NUMBER(value, where))


# "7", "+7", "1_000", "4.00" as pydantic reads them; ASCII digits only (int() takes any script's).
_INTEGER_TEXT = re.compile(r"([+-]?[0-9](?:_?[0-9])*)(?:\.0+)?")


def lax_integer(value: Any, where: str) -> int:
    """An int as a provider may send it: an integer, a float with no fraction, or digits as text."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, str):
        digits = _INTEGER_TEXT.fullmatch(value.strip())
        if digits is None:
            raise Unexpected(f"{where} is not an integer")
        return int(digits.group(1))
    return int(_ANY_INTEGER(value, where))


_TRUE, _FALSE = ("1", "true", "t", "yes", "y", "on"), ("0", "false", "f", "no", "n", "off")


def lax_flag(value: Any, where: str) -> bool:
    """A bool as pydantic's lax mode reads one: true/false, 0/1, or their usual words."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise Unexpected(f"{where} is not true or false")


def anything(value: Any, where: str) -> Any:
    return value


def mapping(value: Any, where: str) -> dict[str, Any]:
    """A JSON object, its values unchecked (a pod's env as RunPod's REST API gives it)."""
    if not isinstance(value, dict):
        raise Unexpected(f"{where} is not an object")
    return value


def either(*checks: Check) -> Check:
    """The first check that accepts the value; the last one's refusal otherwise."""

    def check(value: Any, where: str) -> Any:
        for inner in checks[:-1]:
            try:
                return inner(value, where)
            except Unexpected:
                continue
        return checks[-1](value, where)

    return check


class ProviderShape(Shape):
    """The base of a provider's wire shape (RunPod's pods and GPU types, Vast's instance rows): their answers
    grow fields gpuc does not read, so an unknown one is ignored and a known one checked (lax)."""

    EXTRA: ClassVar[str] = "ignore"


TEXT, OPT_TEXT = text(), maybe(text())
OPT_NUMBER, OPT_INT, OPT_FLAG = maybe(lax_number), maybe(lax_integer), maybe(lax_flag)
