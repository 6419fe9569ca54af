"""Time as an injected dependency: every decision takes `now` from a Clock, so tests and the drill
run hours of pod life in milliseconds with a virtual clock."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime
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
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise ConfigError(f"duration {text!r} is not valid", hint="use a number and a unit: 90s, 30m, 2h, 1d")
    return float(match.group(1)) * _UNITS[match.group(2)]
