"""A pod's deadline as the watchdog reckons it (F15): one rule for the heartbeat answer, the reaper
and the route that moves it, so the pod and the watchdog cannot disagree.

Every pod has one. Registered by this gpuc: `up`'s start + `--max-hours`. Registered by an older gpuc
(no deadline sent): its start + the watchdog's own max_hours. A stray the reaper adopts: first sight +
max_hours, never its creation time (a store that lost its records must not find every pod overdue).
No deadline is later than the pod's start + max_lifetime_hours (`up`, `gpuc extend` and `gpuc keep`
are all held to it).
"""

from __future__ import annotations

from typing import Protocol

from gpuc.core.settings import Settings

DEADLINE_ALERT = "deadline@"  # `alerted` of a pod warned for its deadline: "deadline@<epoch>"


class Dated(Protocol):
    """What a deadline is reckoned from: a StoredPod, or the PodAuth a heartbeat reads."""

    @property
    def deadline_at(self) -> float | None: ...

    @property
    def started_at(self) -> float | None: ...

    @property
    def registered_at(self) -> float: ...

    @property
    def origin(self) -> str: ...


def start_of(pod: Dated) -> float:
    """Where its life counts from. An adopted stray's from first sight (`registered_at`): its creation
    time is older than anything this store knows of it."""
    if pod.origin == "adopted" or pod.started_at is None:
        return pod.registered_at
    return pod.started_at


def deadline_of(pod: Dated, settings: Settings) -> float:
    if pod.deadline_at is not None:
        return pod.deadline_at
    return start_of(pod) + settings.max_hours * 3600


def limit_of(pod: Dated, settings: Settings) -> float:
    """The latest deadline the user's cap allows this pod."""
    return start_of(pod) + settings.max_lifetime_hours * 3600


def alert_key(deadline_at: float) -> str:
    return f"{DEADLINE_ALERT}{deadline_at:.0f}"
