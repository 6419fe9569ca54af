"""`gpuc keep POD --for 2h` and `gpuc extend POD 2h`: the user's explicit acts on a pod's life, said back
in words.

`keep` sets a lease that suspends the idle destroy, and makes sure the pod's deadline (gpuc's own end
for it, `up --max-hours`) is no sooner than the lease: kept for 2 h means alive for 2 h. `extend` moves
the deadline later. Both are held to caps the watchdog enforces, and a refusal becomes what to ask for:

- a lease ends at most the watchdog's `max_hours` from now (an unbounded lease would switch the reaper
  off for the pod);
- no deadline lies past the pod's start + `max_lifetime_hours` (GPUC_MAX_LIFETIME_HOURS, default 48):
  `extend` beyond it is refused; `keep` moves the deadline as far as it allows and says so.

The pod hears a new deadline in its next heartbeat answer (a minute), the reaper on its next pass.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.pods.spent import Spent, spent
from gpuc.client.runs import RunRecord
from gpuc.client.text import clock_utc, span_words
from gpuc.core.clock import iso, parse_iso
from gpuc.core.errors import ConfigError, GpucError, WatchdogError
from gpuc.core.ledger.rows import money

if TYPE_CHECKING:
    from gpuc.core.api import DeadlineAnswer, DeadlineRequest, RunRecovery

# The watchdog's refusals name their limits:
#   "... until is too large (at most max_hours ahead, <ISO>)"  (a lease)
#   "... deadline_at is too late (at most max_lifetime_hours 48 h after the pod's start, <ISO>)"
_ISO = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"
_CAP = re.compile(rf"until is too large \(at most max_hours ahead, {_ISO}\)")
_LIFETIME = re.compile(
    rf"deadline_at is too late \(at most max_lifetime_hours ([0-9.]+) h after the pod's start, {_ISO}\)"
)
_HH_MM = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")


def keep(ref: str, seconds: float, ctx: Ctx, asked: str) -> str:
    """Set the lease and pull the deadline up to it; the sentences to print. `asked` is the user's own
    spelling ("2h"), for messages."""
    pod_id = _pod_id(ref, ctx)
    now = ctx.clock.now()
    until = now + seconds
    try:
        ctx.watchdog.keep(pod_id, until)
    except WatchdogError as exc:
        raise over_cap(exc, ref, asked, now) or exc from None
    said = f"{pod_id}: idle destroy suspended until {clock_utc(until, now)} ({span_words(seconds)})"
    from gpuc.core.api import DeadlineRequest  # startup: `gpuc ls` loads this module's neighbours

    answer = _move(pod_id, DeadlineRequest(deadline_at=until, at_least=True), ctx, ref, asked)
    return f"{said}\n{ends_words(pod_id, answer, now, kept_until=until)}"


def extend(ref: str, ctx: Ctx, *, seconds: float | None = None, to: str | None = None) -> str:
    """Move the deadline later by `seconds`, or to the time `to` names; the sentence to print."""
    from gpuc.core.api import DeadlineRequest  # startup: as in keep

    if (seconds is None) == (to is None):
        raise ConfigError("say how long or until when", hint=f"gpuc extend {ref} 2h, or gpuc extend {ref} --to 18:30")
    now = ctx.clock.now()
    wanted = {"extend_s": seconds} if to is None else {"deadline_at": parse_when(to, now)}
    try:
        request = DeadlineRequest.model_validate(wanted)
    except ValueError:  # pydantic's ValidationError: 0 s, a year and more, a time past 2100
        raise ConfigError(
            f"cannot move a deadline by {span_words(seconds or 0.0)}" if to is None else f"--to {to!r} is out of range",
            hint=f"ask for a time to come, within your cap: gpuc extend {ref} 2h",
        ) from None
    run = ctx.runs.find(ref)
    recovering = _recovering(run.run_id, ctx)
    pod_id = _pod_id(ref, ctx, recovering)
    asked = to if to is not None else f"{span_words(seconds or 0.0)} more"
    answer = _move(pod_id, request, ctx, ref, asked)
    said = ends_words(pod_id, answer, now)
    if answer.deadline_at == answer.previous:
        return said
    return f"{said}\n{worst_words(ctx, run, pod_id, answer, recovering is not None)}"


def worst_words(ctx: Ctx, run: RunRecord, pod_id: str, answer: DeadlineAnswer, recovers: bool) -> str:
    """What the new deadline puts at stake: the pod's worst case (its price from its start to the deadline)
    and what it spent so far; for a run that recovers from outbids, its envelope as the watchdog now holds it
    (moved with the deadline: functions/recovery/runs.py move_envelope), across every attempt."""
    now = ctx.clock.now()
    if recovers:
        moved = _recovering(run.run_id, ctx)
        if moved is not None:
            return (
                f"  run {run.run_id} recovers from outbids: its envelope is now {money(moved.envelope_usd)} across"
                f" every attempt, to {clock_utc(moved.deadline_at, now)}; {money(moved.spent_usd)} spent so far"
            )
    so_far = spent(ctx, run.pod_id) if run.pod_id == pod_id else None
    if so_far is None:
        so_far = _from_watchdog(ctx, pod_id)
    worst = so_far.worst_to(answer.deadline_at) if so_far is not None else None
    if so_far is None or worst is None:
        return "  its worst case is not known: no price on record (gpuc ledger)"
    was = so_far.worst_to(answer.previous)
    before = f" (was {money(was)})" if was is not None else ""
    return (
        f"  worst case now {money(worst)}{before}: {money(so_far.price_per_hour or 0.0)}/h from its start to its"
        f" deadline; {so_far.words()}"
    )


def _from_watchdog(ctx: Ctx, pod_id: str) -> Spent | None:
    """The pod's price and start as the watchdog registered them, when the ledger has no row for it."""
    try:
        records = ctx.watchdog.status().pods
    except GpucError:
        return None
    rec = next((r for r in records if r.pod_id == pod_id), None)
    if rec is None or rec.started_at is None:
        return None
    hours = max(0.0, ctx.clock.now() - rec.started_at) / 3600
    price = rec.price_per_hour
    return Spent(hours, price * hours if price is not None else None, False, price, rec.started_at)


def _recovering(run_id: str, ctx: Ctx) -> RunRecovery | None:
    """The run as the watchdog keeps it when it recovers from outbids (`up --recover`) and is not done."""
    try:
        found = ctx.watchdog.run(run_id)
    except GpucError:
        return None
    return found if found is not None and not found.done else None


def ends_words(pod_id: str, answer: DeadlineAnswer, now: float, *, kept_until: float | None = None) -> str:
    when = f"{clock_utc(answer.deadline_at, now)} ({span_words(answer.deadline_at - now)} from now)"
    if answer.capped:
        return (
            f"{pod_id}: its deadline can go no later than {when}, the cap (GPUC_MAX_LIFETIME_HOURS from its start): "
            "it ends then, lease or not"
        )
    if answer.deadline_at == answer.previous:
        stays = "stays" if kept_until is None or answer.deadline_at > kept_until else "is"
        return f"{pod_id}: its deadline {stays} {when}: it ends then (`gpuc extend {pod_id} 2h` moves it)"
    return f"{pod_id}: now ends at {when}, its deadline (was {clock_utc(answer.previous, now)})"


def parse_when(text: str, now: float) -> float:
    """`--to`: an ISO 8601 time (2026-12-02T18:30Z) or HH:MM in UTC (the next one to come)."""
    found = _HH_MM.match(text.strip())
    if found is not None:
        today = datetime.fromtimestamp(now, UTC).replace(
            hour=int(found.group(1)), minute=int(found.group(2)), second=0, microsecond=0
        )
        when = today if today.timestamp() > now else today + timedelta(days=1)
        return when.timestamp()
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--to {text!r} is not a time", hint="use HH:MM (UTC) or ISO 8601, e.g. 18:30 or 2026-12-02T18:30Z"
        ) from None
    if when.tzinfo is None:
        raise ConfigError(f"--to {text!r} has no time zone", hint="add Z for UTC, e.g. 2026-12-02T18:30Z")
    return when.timestamp()


def _pod_id(ref: str, ctx: Ctx, recovering: RunRecovery | None = None) -> str:
    """The run's pod; for a run that recovers from outbids, its latest attempt still there (the first pod may
    be long gone)."""
    run = ctx.runs.find(ref)
    live = [a.pod_id for a in recovering.attempts if a.end is None] if recovering is not None else []
    if live:
        return live[-1]
    if run.pod_id is None:
        raise ConfigError(f"run {run.run_id} has no pod id", hint="`gpuc ls` shows live pods")
    return run.pod_id


def _move(pod_id: str, request: DeadlineRequest, ctx: Ctx, ref: str, asked: str) -> DeadlineAnswer:
    try:
        return ctx.watchdog.deadline(pod_id, request)
    except WatchdogError as exc:
        raise over_lifetime(exc, ref, asked, ctx.clock.now()) or exc from None


def over_cap(exc: WatchdogError, ref: str, asked: str, now: float) -> ConfigError | None:
    found = _CAP.search(exc.message) if exc.status == 400 else None
    if found is None:
        return None
    limit = parse_iso(found.group(1))
    hours = max(0, int((limit - now) // 3600))
    ask = f"gpuc keep {ref} --for {hours}h" if hours else f"gpuc keep {ref} --for {max(1, int((limit - now) // 60))}m"
    return ConfigError(
        f"--for {asked} is longer than the watchdog allows: a lease ends at most {span_words(limit - now)} "
        f"from now (by {clock_utc(limit, now)})",
        hint=f"ask for less ({ask}); the cap is the watchdog's GPUC_MAX_HOURS",
    )


def over_lifetime(exc: WatchdogError, ref: str, asked: str, now: float) -> ConfigError | None:
    if exc.status == 404 and "no such route" in exc.message:
        return ConfigError(
            "this watchdog is older than gpuc here: it cannot move a pod's deadline",
            hint="update it (`gpuc watchdog deploy`, or restart `gpuc watchdog serve`)",
        )
    found = _LIFETIME.search(exc.message) if exc.status == 400 else None
    if found is None:
        return None
    cap, limit = found.group(1), parse_iso(found.group(2))
    left = limit - now
    ask = f"gpuc extend {ref} --to {iso(limit - limit % 60)}" if left > 60 else ""
    return ConfigError(
        f"the deadline asked for ({asked}) is past the pod's cap: it may live at most {cap} h from its start, "
        f"until {clock_utc(limit, now)} ({span_words(max(0.0, left))} from now)",
        hint=(f"ask for less ({ask}), or " if ask else "")
        + "raise GPUC_MAX_LIFETIME_HOURS on the watchdog (it holds the cap)",
    )
