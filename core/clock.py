"""Time as an injected dependency: every decision takes `now` from a Clock, so tests and the drill
run hours of pod life in milliseconds with a virtual clock."""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timezone
from typing import Protocol

from gpuc.core.errors import ConfigError


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A virtual clock: `sleep` advances time instantly. Thread-safe."""

    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self._t = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._t

    def sleep(self, seconds: float) -> None:
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._t += seconds


def iso(ts: float | None) -> str:
    """Seconds since the epoch as an ISO-8601 UTC string (second precision); '' for None."""
    if ts is None:
        return ""
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?\s*[smhd]\s*)+$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION_SHAPES = "90s, 20m, 2h, 1h30m, 1d"


def duration_seconds(text: str, *, bare_seconds: bool = False) -> float:
    """Seconds in "90s", "20m", "2h", "1h30m", "1d" (units may repeat in any order: "1h 30m"). A bare number
    is seconds when `bare_seconds` (settings, where it always was) and refused otherwise (`extend 2`: two
    what?). Raises ValueError saying what is wrong, never quoting the text."""
    clean = text.strip().lower()
    if bare_seconds:
        try:
            return float(clean)
        except ValueError:
            pass
    if not clean:
        raise ValueError("it is empty")
    if not _DURATION.match(clean):
        alone = not re.search(r"[a-z]", clean)
        raise ValueError("a number needs a unit here" if alone else "it is not a number with a unit s, m, h or d")
    return sum(float(n) * _UNITS[u] for n, u in _DURATION_PART.findall(clean))


def duration_text(seconds: float) -> str:
    """A duration as it is typed, to the second, that reads back as itself: 7m, 12h, 1h30m, 1m30s."""
    left = max(0, round(seconds))
    parts: list[str] = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def hours_text(hours: float) -> str:
    """`--max-hours` as the user would type it: 7m, not 0.116667."""
    return duration_text(hours * 3600)


def parse_duration(text: str) -> float:
    """A duration typed on the command line (`extend 2h`, `keep --for 30m`, `--timeout`)."""
    try:
        return duration_seconds(text)
    except ValueError as exc:
        raise ConfigError(
            f"duration {text!r} is not valid: {exc}", hint=f"use a number and a unit: {DURATION_SHAPES}"
        ) from None
