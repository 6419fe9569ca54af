"""Every notification title, in one shape: a lock screen shows one line, so it leads with
the experiment and the outcome and ends with the money: "kvcache FAILED (exit 3), $0.02",
"kvcache OK, $0.41", "kvcache idle: destroys at 21:40 UTC". A run id ("gpuc-cc04859008") tells the user
nothing there; it goes in the body, which leads with what to do.

Titles about no one pod (the reaper, the budget, a provider) lead with "gpuc:".
"""

from __future__ import annotations

from datetime import UTC, datetime

TITLE_MAX = 120  # Pushover's limit is 250; ntfy and Telegram show about this much on a lock screen


def title(outcome: str, *, experiment: str | None = None, cost_usd: float | None = None) -> str:
    """The one title function: `experiment outcome, $cost`, or `gpuc: outcome` for no pod."""
    head = f"{experiment} {outcome}" if experiment else f"gpuc: {outcome}"
    if cost_usd is not None:
        head += f", ${cost_usd:.2f}"
    return head if len(head) <= TITLE_MAX else head[: TITLE_MAX - 1] + "\u2026"


def exit_outcome(exit_code: int | None) -> str:
    if exit_code == 0:
        return "OK"
    if exit_code is None:
        return "ended (exit code unknown)"
    return f"FAILED (exit {exit_code})"


def clock(ts: float) -> str:
    """A time of day for a title: UTC, as the watchdog (a Lambda) has no other zone to go by."""
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M UTC")


def cost_so_far(price_per_hour: float | None, started_at: float | None, until: float | None) -> float | None:
    if price_per_hour is None or started_at is None or until is None:
        return None
    return max(0.0, until - started_at) / 3600 * price_per_hour
