"""The months gpuc counts: UTC calendar months, YYYY-MM; a pod's hours inside one."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from gpuc.core.errors import ConfigError

MONTH_RE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def check_month(month: str) -> str:
    if not MONTH_RE.match(month):
        raise ConfigError(f"month {month!r} is not YYYY-MM", hint="pass a month like --month 2026-09")
    return month


def current_month(now: float | None = None) -> str:
    """YYYY-MM of `now` (default: the wall clock), UTC: the months gpuc counts are UTC calendar months."""
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return moment.strftime("%Y-%m")


def month_window(month: str) -> tuple[float, float]:
    """[first second of the month, first second of the next), UTC."""
    year, number = (int(x) for x in check_month(month).split("-"))
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + (number == 12), number % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp(), end.timestamp()


def overlap_hours(start: float, end: float, window: tuple[float, float]) -> float:
    """Hours of [start, end] that fall inside the window (0 when they do not meet)."""
    return max(0.0, min(end, window[1]) - max(start, window[0])) / 3600.0
