"""The pod's reading of its wire documents, against their one declaration: the JSON Schema of the pydantic models
(core/wireschema.py), which the pod bundle carries as `gpuc/core/wire.json`. Standard library only.

The watchdog stays as strict as it is (pydantic, an unknown field refused, every bound checked). The pod reads:
- its own config and boot kit (`read`): every known field's type and bound checked, the defaults filled in; an
  unknown field ignored (a pod that refuses to start sends no heartbeat, and a silent pod bills until the
  reaper's limit);
- the watchdog's answers (`read(..., lenient=True)`): a field that fails its schema is dropped, not the whole
  answer (a newer watchdog's word must not cost the pod its lease or its deadline);
- what it sends (`problems(..., unknown="refuse")`): checked as the watchdog will, before it goes.

The subset of JSON Schema pydantic writes for these models: type, anyOf, enum, const, minimum, maximum,
exclusiveMinimum, exclusiveMaximum, minLength, maxLength, pattern, items, minItems, maxItems, properties,
minProperties, maxProperties, required, additionalProperties, $ref to $defs, default. Anything else in a schema is
refused when read, so a model that starts using more fails a test, never silently on a pod.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).with_name("wire.json")
_KNOWN = {
    "type", "anyOf", "enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "pattern", "items", "minItems", "maxItems", "properties", "required", "additionalProperties",
    "$ref", "$defs", "default", "title", "description", "minProperties", "maxProperties",
}  # fmt: skip


class WireError(ValueError):
    """A document that is not what its schema says: where and what, never the value (it may be a secret)."""


@cache
def schemas() -> dict[str, Any]:
    """Every document's schema: the bundle's file, or (a clone, the laptop) made from the models."""
    try:
        data = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        from gpuc.core.wireschema import schemas as made  # laptop only: a bundle always carries the file

        data = made()
    if not isinstance(data, dict):
        raise WireError(f"{SCHEMA_FILE.name} is not an object")
    for name, schema in data.items():
        _check_known(schema, name)
    return data


def schema(name: str) -> dict[str, Any]:
    found = schemas().get(name)
    if not isinstance(found, dict):
        raise WireError(f"no schema for {name}")
    return found


def field(name: str, prop: str) -> dict[str, Any]:
    """One field's schema, a nullable one's non-null branch: where a limit or an enum is read from."""
    spec = schema(name)["properties"][prop]
    branches = [b for b in spec.get("anyOf", [spec]) if b.get("type") != "null"]
    resolved: dict[str, Any] = _resolve(branches[0], schema(name)) if branches else {}
    return resolved


def problems(name: str, value: Any, *, unknown: str = "refuse") -> list[str]:
    """What is wrong with `value` as a `name` ([] when nothing): `unknown` is "refuse" or "ignore"."""
    root = schema(name)
    out: list[str] = []
    _validate(value, root, root, "", out, unknown == "refuse")
    return out


def read(name: str, value: Any, *, lenient: bool = False) -> dict[str, Any]:
    """`value` as a `name`: known fields checked, defaults filled in, unknown fields left out. Raises WireError;
    `lenient`: a field that fails its schema, or a required one missing, is left out instead (then its default,
    if it has one)."""
    root = schema(name)
    if not isinstance(value, dict):
        raise WireError(f"{name}: an object is expected")
    props: dict[str, Any] = root.get("properties", {})
    out: dict[str, Any] = {}
    for key, spec in props.items():
        if key in value:
            found: list[str] = []
            _validate(value[key], spec, root, key, found, True)
            if not found:
                out[key] = _filled(value[key], spec, root)
                continue
            if not lenient:
                raise WireError(f"{name}: {found[0]}")
        if "default" in spec:
            out[key] = spec["default"]
        elif key in root.get("required", ()) and not lenient:
            raise WireError(f"{name}: {key}: required" if key not in value else f"{name}: {key}: invalid")
    return out


def _filled(value: Any, spec: Mapping[str, Any], root: Mapping[str, Any]) -> Any:
    """A valid value with the defaults of its nested objects filled in (a boot kit's own fields)."""
    spec = _resolve(spec, root)
    for branch in spec.get("anyOf", ()):
        if not problems_of(value, branch, root):
            return _filled(value, branch, root)
    if not isinstance(value, dict) or "properties" not in spec:
        return value
    out = dict(value)
    for key, child in spec["properties"].items():
        if key in out:
            out[key] = _filled(out[key], child, root)
        elif "default" in child:
            out[key] = child["default"]
    return out


def problems_of(value: Any, spec: Mapping[str, Any], root: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    _validate(value, spec, root, "", out, True)
    return out


def _check_known(node: Any, where: str) -> None:
    if isinstance(node, dict):
        unknown = set(node) - _KNOWN
        if unknown and not where.endswith(("properties", "$defs")):
            raise WireError(f"{where}: schema keywords the pod cannot check: {', '.join(sorted(unknown))}")
        for key, child in node.items():
            if key not in ("default", "const", "enum"):
                _check_known(child, f"{where}.{key}")
    elif isinstance(node, list):
        for child in node:
            _check_known(child, where)


def _resolve(spec: Mapping[str, Any], root: Mapping[str, Any]) -> dict[str, Any]:
    ref = spec.get("$ref")
    if ref is None:
        return dict(spec)
    if not (isinstance(ref, str) and ref.startswith("#/$defs/")):
        raise WireError(f"a reference the pod cannot follow: {ref!r}")
    return _resolve(root["$defs"][ref[len("#/$defs/") :]], root)


def _validate(
    value: Any, spec: Mapping[str, Any], root: Mapping[str, Any], at: str, out: list[str], strict: bool
) -> None:
    spec = _resolve(spec, root)
    where = at or "(top)"
    if "anyOf" in spec:
        for branch in spec["anyOf"]:
            trial: list[str] = []
            _validate(value, branch, root, at, trial, strict)
            if not trial:
                return
        out.append(f"{where}: matches none of its types")
        return
    if "const" in spec and value != spec["const"]:
        out.append(f"{where}: not the expected value")
    if "enum" in spec and value not in spec["enum"]:
        out.append(f"{where}: not one of {', '.join(map(str, spec['enum']))}")
    kind = spec.get("type")
    if kind is not None and not _is(kind, value):
        out.append(f"{where}: {kind} expected")
        return
    if isinstance(value, str):
        _string(value, spec, where, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _number(value, spec, where, out)
    elif isinstance(value, list):
        _array(value, spec, root, at, out, strict)
    elif isinstance(value, dict):
        _object(value, spec, root, at, out, strict)


def _is(kind: str, value: Any) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict) and all(isinstance(k, str) for k in value)
    raise WireError(f"a type the pod cannot check: {kind!r}")


def _string(value: str, spec: Mapping[str, Any], where: str, out: list[str]) -> None:
    if len(value) < spec.get("minLength", 0):
        out.append(f"{where}: shorter than {spec['minLength']}")
    if "maxLength" in spec and len(value) > spec["maxLength"]:
        out.append(f"{where}: longer than {spec['maxLength']}")
    if "pattern" in spec and re.search(spec["pattern"], value) is None:
        out.append(f"{where}: not of the expected shape")


def _number(value: float, spec: Mapping[str, Any], where: str, out: list[str]) -> None:
    checks = (
        ("minimum", operator.ge, "below"),
        ("maximum", operator.le, "above"),
        ("exclusiveMinimum", operator.gt, "not above"),
        ("exclusiveMaximum", operator.lt, "not below"),
    )
    for key, holds, word in checks:
        if key in spec and not holds(value, spec[key]):
            out.append(f"{where}: {word} {spec[key]}")


def _array(
    value: list[Any], spec: Mapping[str, Any], root: Mapping[str, Any], at: str, out: list[str], strict: bool
) -> None:
    if len(value) < spec.get("minItems", 0) or len(value) > spec.get("maxItems", len(value)):
        out.append(f"{at or '(top)'}: {len(value)} items is out of bounds")
    items = spec.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(item, items, root, f"{at}[{i}]", out, strict)


def _object(
    value: dict[str, Any], spec: Mapping[str, Any], root: Mapping[str, Any], at: str, out: list[str], strict: bool
) -> None:
    props: Mapping[str, Any] = spec.get("properties", {})
    if len(value) < spec.get("minProperties", 0) or len(value) > spec.get("maxProperties", len(value)):
        out.append(f"{at or '(top)'}: {len(value)} fields is out of bounds")
    for key in spec.get("required", ()):
        if key not in value:
            out.append(f"{at + '.' if at else ''}{key}: required")
    extra = spec.get("additionalProperties", True)
    for key, item in value.items():
        where = f"{at}.{key}" if at else key
        if key in props:
            _validate(item, props[key], root, where, out, strict)
        elif extra is False:
            if strict:
                out.append(f"{where}: not a field of it")
        elif isinstance(extra, dict):
            _validate(item, extra, root, where, out, strict)
