"""The envelope check for a next attempt counts what the earlier attempts spent: the run has ONE envelope, and
what is left of it after five hours on the first attempt is not what it was at the start. On the
`--recover-on-demand` last rung, an on-demand price that would fit a fresh envelope but not what is left is never
rented; nor is any attempt whose worst case, added to what was spent, passes the envelope."""

from __future__ import annotations

from gpuc.core.api import AttemptRecord
from gpuc.core.budget import Envelope, run_spent
from gpuc.functions.recovery.decide import Decision, Offer, RecoveryPlan, decide


def attempt(
    start: float, price: float, disk: float, paused_at: float | None = None, end: float | None = None
) -> AttemptRecord:
    return AttemptRecord(
        pod_id="p", start=start, price_per_hour=price, disk_per_hour=disk, paused_at=paused_at, end=end
    )


T0 = 1_800_000_000.0
H = 3600.0
DISK = 0.01
BID = Offer("901", 0.12, interruptible=True)
ON_DEMAND = Offer("903", 0.24, interruptible=False)
NOW = T0 + 5 * H + 301
SPENT_RUN = [attempt(T0, 0.12, DISK, paused_at=T0 + 5 * H)]  # five hours on the first attempt, then outbid


def after_five_hours(cap: float, offers: list[Offer], *, on_demand_last: bool = True) -> Decision:
    plan = RecoveryPlan(1, Envelope(T0, 10.0, cap), price_cap=0.12, disk_per_hour=DISK, on_demand_last=on_demand_last)
    return decide(plan, SPENT_RUN, "paused", confirmed=True, paused_for_s=301, wait_s=300, now=NOW, offers=offers)


def left_h() -> float:
    return (T0 + 10 * H - NOW) / H


def test_the_premises() -> None:
    spent = run_spent(SPENT_RUN, NOW)
    on_demand_worst = (ON_DEMAND.price_per_hour + DISK) * left_h()
    assert on_demand_worst < 1.5 < spent + on_demand_worst  # fits a fresh envelope, not what is left of this one
    assert spent + (BID.price_per_hour + DISK) * left_h() < 1.5


def test_the_last_rung_rents_on_demand_only_when_what_was_spent_leaves_room() -> None:
    d = after_five_hours(1.5, [BID, ON_DEMAND])
    assert (d.action, d.offer) == ("rerent", BID)
    assert after_five_hours(1.5, [ON_DEMAND]).action == "stop"


def test_an_interruptible_attempt_that_fits_only_a_fresh_envelope_is_not_rented() -> None:
    bid_worst = (BID.price_per_hour + DISK) * left_h()
    cap = bid_worst + run_spent(SPENT_RUN, NOW) / 2  # room for its worst case, not for it and what was spent
    d = after_five_hours(cap, [BID], on_demand_last=False)
    assert d.action == "stop" and "would pass the envelope" in d.why
