"""core/checks.Shape: the records `gpuc ls` reads the watchdog and the providers into, without dataclasses'
generated code. They must still behave as frozen records: read-only, compared by value, their repr
naming no value (a pod's env, a watchdog's note)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuc.core.checks import Shape, Unexpected, as_dict, build, checked, many, maybe, record, replaced, text


class Inner(Shape):
    word: str = checked(text())


class Outer(Shape):
    name: str = checked(text())
    note: str | None = checked(maybe(text()), None)
    inner: tuple[Inner, ...] = checked(many(record(Inner)), ())


class Loose(Outer):
    EXTRA = "ignore"


def test_built_from_a_document_with_defaults_and_nested_records() -> None:
    got = build(Outer, {"name": "a", "inner": [{"word": "w"}]}, "")
    assert (got.name, got.note, got.inner[0].word) == ("a", None, "w")
    assert as_dict(got) == {"name": "a", "note": None, "inner": [{"word": "w"}]}


def test_read_only_compared_by_value_and_never_printing_a_value() -> None:
    got = build(Outer, {"name": "s3cr", "note": "et-value"}, "")
    with pytest.raises(AttributeError):
        got.name = "other"
    assert got == build(Outer, {"name": "s3cr", "note": "et-value"}, "")
    assert got != replaced(got, note="else")
    assert "s3cr" not in repr(got) and "et-value" not in repr(got)
    with pytest.raises(TypeError):
        hash(got)


@pytest.mark.parametrize(
    ("doc", "word"),
    [({}, "name is missing"), ({"name": 3}, "name is not text"), ({"name": "a", "x": 1}, "unknown field 'x'"),
     ({"name": "a", "inner": [{"word": 1}]}, r"inner\[0\]\.word"), ([], "not an object")],
)  # fmt: skip
def test_each_break_is_refused_and_named(doc: Any, word: str) -> None:
    with pytest.raises(Unexpected, match=word):
        build(Outer, doc, "")


def test_a_loose_shape_ignores_unknown_keys_but_checks_known_ones() -> None:
    assert build(Loose, {"name": "a", "x": 1}, "").name == "a"
    with pytest.raises(Unexpected):
        build(Loose, {"name": 1, "x": 1}, "")


def test_constructed_by_hand_it_needs_every_required_field_and_knows_no_other() -> None:
    with pytest.raises(TypeError, match="needs name"):
        Outer()
    with pytest.raises(TypeError, match="no field 'bogus'"):
        Outer(name="a", bogus=1)
    assert list(Loose.FIELDS) == ["name", "note", "inner"]
