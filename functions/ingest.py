"""Whether the watchdog's own ingest refused heartbeats (F18): a flood that fills it makes real pings
fail, and then a pod's silence is no evidence. The reaper asks an IngestHealth (reaper.trust); the local
server counts its refusals in an IngestLog, the Lambda reads its CloudWatch metrics
(aws.CloudWatchIngestHealth)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Protocol


class IngestHealth(Protocol):
    """Whether the watchdog's own ingest refused or failed requests (throttled, erroring, overloaded):
    then a pod's heartbeats may not have landed, and its silence is no evidence (F18)."""

    def trouble(self, since: float, now: float) -> str | None:
        """What went wrong between since and now ("was throttled 40 times"), None if nothing did.
        Raises when it cannot tell: the reaper then holds silence kills too."""
        ...


class IngestLog:
    """The local server's own account (functions.server): refused, failed and too-slow requests per
    minute, in memory, for the reaper that runs in the same process. Bounded: only KEEP_S is kept."""

    KEEP_S = 6 * 3600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._minutes: dict[int, Counter[str]] = {}

    def record(self, what: str, now: float) -> None:
        minute = int(now // 60)
        with self._lock:
            self._minutes.setdefault(minute, Counter())[what] += 1
            for old in [m for m in self._minutes if m < minute - self.KEEP_S // 60]:
                del self._minutes[old]

    def trouble(self, since: float, now: float) -> str | None:
        first, last = int(since // 60), int(now // 60)
        total: Counter[str] = Counter()
        with self._lock:
            for minute, counts in self._minutes.items():
                if first <= minute <= last:
                    total.update(counts)
        if not total:
            return None
        details = ", ".join(f"{what} {n}" for what, n in sorted(total.items()))
        return f"refused or failed {sum(total.values())} requests ({details})"
