"""Times and durations the way a person reads them: "1h05m" in a table, "2 h" in a sentence, "14:05 UTC"."""

from __future__ import annotations

from datetime import UTC, datetime


def short_span(seconds: float) -> str:
    """Compact, for table cells: 45s, 12m, 1h05m, 2d03h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def span_words(seconds: float) -> str:
    """For sentences: 45 s, 30 min, 2 h, 1 h 30 min, 1 d 2 h (rounded to the minute)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    minutes = round(s / 60)
    days, rest = divmod(minutes, 1440)
    hours, mins = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{mins} min" if mins and not days else ""]
    return " ".join(p for p in parts if p) or "0 min"


def clock_utc(ts: float, now: float) -> str:
    """14:05 UTC today; 2026-12-02 14:05 UTC on another day (a lease across midnight must not read as today)."""
    when = datetime.fromtimestamp(ts, UTC)
    if when.date() == datetime.fromtimestamp(now, UTC).date():
        return when.strftime("%H:%M UTC")
    return when.strftime("%Y-%m-%d %H:%M UTC")
