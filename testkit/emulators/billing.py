"""What the emulators bill: each pod's life as timed billing states, and charges planted by tests.

A provider bills what a pod did, not what gpuc wrote down, so the emulators keep a `Lifeline` per pod
(the billing state it was in, from when to when) and compute their billing endpoints from it: running
time x price, stopped time x the disk rate. Tests plant the charges a real bill can carry and the
ledger cannot: an extra charge, a pod billed at the wrong rate (`BillingBook.plant`, `.set_factor`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta


@dataclass
class Segment:
    state: str
    start: float
    end: float | None = None  # None: still in this state


@dataclass
class Lifeline:
    """One pod's billing states in time order; the last is open until the pod ends."""

    segments: list[Segment] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return bool(self.segments) and self.segments[-1].end is not None

    def move(self, state: str, at: float) -> None:
        if self.ended:
            return
        if self.segments and self.segments[-1].state == state:
            return
        if self.segments:
            self.segments[-1].end = max(at, self.segments[-1].start)
        self.segments.append(Segment(state, at))

    def end(self, at: float) -> None:
        if self.segments and not self.ended:
            self.segments[-1].end = max(at, self.segments[-1].start)

    def seconds(self, states: Collection[str], lo: float, hi: float, now: float) -> float:
        """Time spent in `states` within [lo, hi)."""
        return sum(max(0.0, min(e, hi) - max(s, lo)) for s, e in self._spans(states, now))

    def span(self, states: Collection[str], lo: float, hi: float, now: float) -> tuple[float, float] | None:
        """First and last instant spent in `states` within [lo, hi), or None."""
        clipped = [(max(s, lo), min(e, hi)) for s, e in self._spans(states, now)]
        inside = [(s, e) for s, e in clipped if e > s]
        return (inside[0][0], inside[-1][1]) if inside else None

    def _spans(self, states: Collection[str], now: float) -> Iterator[tuple[float, float]]:
        for seg in self.segments:
            if seg.state in states:
                yield seg.start, seg.end if seg.end is not None else max(now, seg.start)


@dataclass(frozen=True)
class Planted:
    """A charge a test puts on the bill: `kind` is the provider's own word (gpu, disk, ...)."""

    pod_id: str
    kind: str
    amount: float
    start: float
    end: float


class BillingBook:
    """Lifelines by pod id, plus planted charges and per-pod billing factors (1.25 = billed 25 % over)."""

    def __init__(self) -> None:
        self.lives: dict[str, Lifeline] = {}
        self.planted: list[Planted] = []
        self.factors: dict[str, float] = {}

    def observe(self, pod_id: str, state: str, at: float, created: float) -> None:
        life = self.lives.get(pod_id)
        if life is None:
            # First seen at the end of the request that created it: its life began at creation.
            life = self.lives[pod_id] = Lifeline()
            life.move(state, created)
            return
        life.move(state, at)

    def end(self, pod_id: str, at: float) -> None:
        life = self.lives.get(pod_id)
        if life is not None:
            life.end(at)

    def open_ids(self) -> set[str]:
        return {pod_id for pod_id, life in self.lives.items() if not life.ended}

    def plant(self, pod_id: str, kind: str, amount: float, start: float, end: float) -> None:
        if amount < 0 or end < start:
            raise ValueError("a planted charge has a non-negative amount and end >= start")
        self.planted.append(Planted(str(pod_id), kind, amount, start, end))

    def set_factor(self, pod_id: str, factor: float) -> None:
        if factor < 0:
            raise ValueError("a billing factor is >= 0")
        self.factors[str(pod_id)] = factor

    def factor(self, pod_id: str) -> float:
        return self.factors.get(pod_id, 1.0)

    def planted_in(self, lo: float, hi: float) -> list[Planted]:
        """Planted charges whose start falls in [lo, hi): each lands in exactly one window."""
        return [p for p in self.planted if lo <= p.start < hi]

    def pod_ids(self) -> list[str]:
        return sorted(set(self.lives) | {p.pod_id for p in self.planted})


BUCKETS = ("hour", "day", "week", "month", "year")


def bucket_floor(ts: float, size: str) -> float:
    """The start of the UTC bucket holding ts (weeks start on Monday: RunPod does not say, UNCONFIRMED)."""
    moment = datetime.fromtimestamp(ts, UTC)
    if size == "hour":
        moment = moment.replace(minute=0, second=0, microsecond=0)
    else:
        moment = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if size == "week":
        moment -= timedelta(days=moment.weekday())
    elif size == "month":
        moment = moment.replace(day=1)
    elif size == "year":
        moment = moment.replace(month=1, day=1)
    return moment.timestamp()


def bucket_next(start: float, size: str) -> float:
    moment = datetime.fromtimestamp(start, UTC)
    if size == "hour":
        return start + 3600.0
    if size == "day":
        return start + 86400.0
    if size == "week":
        return start + 7 * 86400.0
    if size == "month":
        year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
        return moment.replace(year=year, month=month).timestamp()
    return moment.replace(year=moment.year + 1).timestamp()


def buckets(lo: float, hi: float, size: str) -> Iterator[tuple[float, float]]:
    start = bucket_floor(lo, size)
    while start < hi:
        end = bucket_next(start, size)
        yield start, end
        start = end
