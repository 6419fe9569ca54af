"""A pass's claim on a recovering run: every act is claimed before any provider call.

Money-critical, so the pass writes its intent (`Acting`, functions/recovery/runs.py) into the run's record by
compare-and-set BEFORE any provider call; a second pass at the same time (a scheduled event delivered twice,
the local loop beside a `gpuc watchdog reap`) loses that write and does nothing. The claim's step is written
again before and after each provider call (`write_step`): each write renews its lease and reads the run again,
so the stop asked since shows there. A pass that dies inside its act leaves the claim to the next pass once it
lapses (`take_over`); every step is safe to repeat (destroy is idempotent and confirmed; the new pod is looked
up by its attempt's own name before any create).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from gpuc.functions.app import Deps
from gpuc.functions.recovery import runs
from gpuc.functions.recovery.decide import Decision
from gpuc.functions.recovery.runs import Acting, StoredRun

# A claim lapses this long after its last step was written (each step renews it): far longer than one step
# (a destroy confirmed, a create with its lookups: each provider call has its own deadline), so a pass still
# inside its act is never taken over; a pass that died is, by the first pass after it. Short, because a pod
# rented by a pass cut before its register waits for this (its boot answered 409 "later") while it bills.
ACT_LEASE_S = 5 * 60.0

RecoveryAct = Literal["destroy", "skip", "confirm", "stop"]  # what recovery adds to a pass's report


class Sweep(Protocol):
    """What recovery needs of the reaper's pass (functions/reaper/state.py Pass): its deps and time, whether it
    may act at all, the providers it could not read, and its report. Recovery never imports the reaper."""

    @property
    def deps(self) -> Deps: ...

    @property
    def now(self) -> float: ...

    @property
    def dry_run(self) -> bool: ...

    @property
    def blind(self) -> Mapping[str, str]: ...

    def act(self, pod_id: str, provider: str, action: RecoveryAct, reason: str) -> None: ...


def acting_for(decision: Decision, now: float) -> Acting | None:
    if decision.action == "stop":
        return Acting(action="stop", since=now, until=now + ACT_LEASE_S, why=decision.why)
    if decision.action == "rerent" and decision.offer is not None:
        o = decision.offer
        return Acting(
            action="rerent",
            since=now,
            until=now + ACT_LEASE_S,
            why=decision.why,
            offer_id=o.id,
            price_per_hour=o.price_per_hour,
            interruptible=o.interruptible,
            min_bid=o.min_bid,
        )
    return None


def claim(r: StoredRun, read: StoredRun, seen: StoredRun, acting: Acting | None) -> StoredRun | None:
    """The CAS's condition: nothing changed that the decision rested on (another pass's claim or attempt, a
    stop asked since, the run's end)."""
    if r.done or r.acting is not None or len(r.attempts) != len(read.attempts) or r.stop_asked != read.stop_asked:
        return None
    r.paused_since = seen.paused_since
    r.attempts[-1] = r.attempts[-1].model_copy(update={"paused_at": seen.latest.paused_at})
    r.acting = acting
    return r


def take_over(r: StoredRun, read: StoredRun, now: float) -> StoredRun | None:
    if r.done or r.acting is None or read.acting is None or r.acting.since != read.acting.since:
        return None
    if now < r.acting.until or len(r.attempts) != len(read.attempts):
        return None
    r.acting = r.acting.model_copy(update={"until": now + ACT_LEASE_S})
    return r


class LostClaim(Exception):
    """The run's claim is no longer this pass's (another pass took it over after its lease): it stops here."""


def write_step(run: Sweep, stored: StoredRun, **changes: Any) -> StoredRun:
    """Write the claim's progress by CAS (renewing its lease) and read the run again: the stop asked since the
    last write shows here, before or after every provider call."""
    since = stored.acting.since if stored.acting else None
    until = max(run.now, run.deps.clock.now()) + ACT_LEASE_S

    def step(r: StoredRun) -> StoredRun | None:
        if r.done or r.acting is None or r.acting.since != since:
            return None
        r.acting = r.acting.model_copy(update={**changes, "until": until})
        return r

    written = runs.update(run.deps.store, stored.run_id, step)
    if written is None:
        raise LostClaim(f"run {stored.run_id}: the claim passed to another pass")
    return written[0]


def release(run: Sweep, stored: StoredRun) -> None:
    """A destroy that did not confirm: the claim goes, so the next pass decides afresh."""
    since = stored.acting.since if stored.acting else None

    def release(r: StoredRun) -> StoredRun | None:
        if r.acting is None or r.acting.since != since:
            return None
        r.acting = None
        return r

    runs.update(run.deps.store, stored.run_id, release)
