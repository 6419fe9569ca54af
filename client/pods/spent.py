"""What a pod cost, in the words every ending says: `up` stopped early (Ctrl-C, a failed install), `down`,
`--wait`'s last line and its Ctrl-C, `extend`. One figure, the ledger's: its closed row (final) or its open
row at its price until now (so far), so the words and `gpuc ledger` never disagree. A run that recovers
(`up --recover`) is one row: its first pod's, closed at the run's cost across every attempt.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuc.client.context import Ctx
from gpuc.client.text import fmt_duration
from gpuc.core.errors import GpucError
from gpuc.core.ledger.rows import LedgerRow, money, parse_price, parse_time, row_cost, row_hours


@dataclass(frozen=True)
class Spent:
    """A pod's cost as the ledger has it. `final`: its row is closed; else so far, at `price_per_hour`."""

    hours: float | None
    usd: float | None
    final: bool
    price_per_hour: float | None = None
    start: float | None = None

    def words(self) -> str:
        """ "ran 1m05s, $0.0021" (closed), "$0.0012 so far (1m05s at $0.44/h)" (open)."""
        ran = fmt_duration(self.hours * 3600 if self.hours is not None else None)
        if self.usd is None:
            return f"ran {ran}, cost not known (no price in the ledger: gpuc ledger)"
        if self.final:
            return f"ran {ran}, {money(self.usd)}"
        rate = f" at {money(self.price_per_hour)}/h" if self.price_per_hour is not None else ""
        return f"{money(self.usd)} so far ({ran}{rate})"

    def worst_to(self, deadline_at: float) -> float | None:
        """What the pod costs if it runs to `deadline_at`: its price from its start (None: no price)."""
        if self.price_per_hour is None or self.start is None:
            return None
        return self.price_per_hour * max(0.0, deadline_at - self.start) / 3600


def of_row(row: LedgerRow, now: float) -> Spent:
    price, start = parse_price(row.price_per_hour), parse_time(row.start)
    if row.end:
        return Spent(row_hours(row), row_cost(row), True, price, start)
    hours = max(0.0, now - start) / 3600 if start is not None else None
    usd = price * hours if price is not None and hours is not None else None
    return Spent(hours, usd, False, price, start)


def spent(ctx: Ctx, pod_id: str | None) -> Spent | None:
    """The ledger's figure for the pod; None when the ledger has no row for it or cannot be read (an ending
    never fails for want of its price)."""
    if pod_id is None:
        return None
    try:
        entries = ctx.ledger().entries()
    except (GpucError, OSError):
        return None
    row = next((e.row for e in reversed(entries) if e.pod_id == pod_id), None)
    return None if row is None else of_row(row, ctx.clock.now())


def spent_words(ctx: Ctx, pod_id: str | None) -> str:
    """ "; it ran 1m05s, $0.0021" (or "; $0.0012 so far (...)") for a sentence's end; "" when the ledger does
    not know the pod."""
    found = spent(ctx, pod_id)
    if found is None:
        return ""
    return f"; it {found.words()}" if found.final else f"; {found.words()}"
