"""JSON that came from a pod, or from a place a pod writes to (the results destination), read without
trusting it. Stdlib only.

A pod on Vast is a stranger's machine: what it answers may be any bytes. `loads` takes JSON only within a
size, as UTF-8, without NaN/Infinity or numbers out of a float's range (`1e400`), without a key twice (which
of the two would count?), and turns every way it can fail (a nesting deep enough to exhaust the
recursion limit too) into one `Unreadable` carrying why. Types and ranges are the caller's: see
client/jobs/outcome_file.py.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_ANSWER_BYTES = 1024 * 1024  # a probe's one-line answer (a log chunk, base64) fits in well under this


class Unreadable(ValueError):
    """What a pod (or its destination) said could not be read; the message says why, in a few words."""


def _no_constant(name: str) -> Any:
    raise Unreadable(f"{name} is not a number JSON allows")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Unreadable(f"the number {text[:20]} is out of range")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise Unreadable("a key appears twice")
    return found


def loads(data: bytes | str, *, most: int = MAX_ANSWER_BYTES) -> Any:
    """The JSON value in `data`; raises Unreadable (never anything else) when it is not one, or too big."""
    if len(data) > most:
        raise Unreadable(f"larger than {most} bytes")
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise Unreadable("not UTF-8") from None
    try:
        return json.loads(data, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_no_duplicates)
    except Unreadable:
        raise
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, or an int of 4300+ digits
        raise Unreadable(f"not JSON ({type(exc).__name__})") from None


def last_json_line(out: str, *, most: int = MAX_ANSWER_BYTES) -> Any:
    """The JSON object a pod-side probe printed as its last line starting with `{` (a pod's python may
    print warnings before it). Raises Unreadable when there is none or it is not an object."""
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            found = loads(line, most=most)
            if not isinstance(found, dict):
                raise Unreadable("not a JSON object")
            return found
    raise Unreadable("no answer line")
