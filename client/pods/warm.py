"""A warm pod (`gpuc up NAME --warm 30m`) on the laptop: its deadline and its words.

A warm pod outlives its jobs: a job's end syncs results/ and notifies, the pod stays for the next `gpuc run`,
and with no job for its warm time it syncs and ends itself (instance_side/idle.py). Its deadline, unless
`--max-hours` fixes it, follows its jobs (core/warm.py): GPUC_WARM_JOB_HOURS plus the warm time after its
start, moved by each `gpuc run` to as much after that job's start (never earlier, never past
GPUC_MAX_LIFETIME_HOURS from the pod's start). So the budget holds one job and one warm time for it at a time
(`up`'s price line says how much), not GPUC_MAX_HOURS, and the deadline is still a hard one: the watchdog
records each move and the pod's agent adopts it from its next heartbeat answer; both end the pod at it.

A move the month's budget cannot hold is not made: the job runs to the current deadline, and the user is told
(the watchdog's own pull-in would undo it anyway). A watchdog that cannot be reached moves nothing either: the
deadline the pod knows holds, which costs no more than what `up` showed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.pods.budgetcheck import weigh
from gpuc.client.text import clock_utc, short_span
from gpuc.core.budget import usd
from gpuc.core.errors import GpucError, SafetyRefusal
from gpuc.core.warm import warm_deadline

ENDING = "it is ending"  # client/pods/run.py job_on_pod's words for a pod whose ending is under way

if TYPE_CHECKING:
    from gpuc.client.runs import RunRecord
    from gpuc.core.api import PodRecord
    from gpuc.core.pod import Pod
    from gpuc.core.settings import Settings


def deadline_hours(settings: Settings, warm_s: float) -> float:
    """A warm pod's first deadline, in hours from its start, when --max-hours does not fix it."""
    hours = (warm_deadline(0.0, warm_s, settings.warm_job_hours)) / 3600
    return min(hours, settings.max_lifetime_hours)


def kept_words(warm_s: float) -> str:
    """What a warm pod does after a job, for `up`'s and `run`'s start lines."""
    return (
        f"when it exits the pod syncs results/ and the log, notifies you and stays warm: with no job for"
        f" {short_span(warm_s)} it ends itself"
    )


def no_job_yet(pod_id: str, warm_s: float, deadline_at: float, now: float) -> str:
    return (
        f"no job started: warm pod: with no job for {short_span(warm_s)} it syncs and ends itself, and at the latest"
        f" at {clock_utc(deadline_at, now)}; `gpuc run {pod_id} --sync --wait -- CMD` starts one"
    )


def busy_refusal(pod_id: str, busy: str, run: RunRecord) -> SafetyRefusal:
    """`run` on a warm pod that runs a job (one at a time: two would share results/ and the log), or that is
    ending (its warm time is over, or `gpuc down`): a new warm pod is what takes the next job then."""
    if busy.startswith(ENDING):
        again = f"gpuc up {run.experiment} --warm {short_span(run.warm_s or 0.0)} -- CMD"
        return SafetyRefusal(f"pod {pod_id}: {busy}; it takes no more jobs", hint=f"start a new warm pod: {again}")
    return SafetyRefusal(
        f"pod {pod_id}: {busy}; a warm pod runs one job at a time (two would share results/ and its log)",
        hint=f"wait for it (`gpuc logs {pod_id} -f` follows it), or start it anyway with: "
        f"gpuc run {pod_id} --force -- ...",
    )


def move_deadline(run: RunRecord, pod: Pod, ctx: Ctx) -> str | None:
    """Before `gpuc run` starts a job on a warm pod whose deadline follows its jobs: the deadline to one job
    allowance and the warm time from now, if the budget holds it. The line to say; None when nothing rolls."""
    if not run.warm_s or not run.warm_job_s:
        return None
    now = ctx.clock.now()
    wanted = warm_deadline(now, run.warm_s, run.warm_job_s / 3600)
    try:
        records = ctx.watchdog.status().pods
    except GpucError as exc:
        return f"warm pod: its deadline was not moved for this job (the watchdog: {exc.message}); it holds as it was"
    record = next((r for r in records if r.pod_id == pod.id), None)
    if record is None or record.deadline_at is None:
        return f"warm pod: the watchdog has no deadline for {pod.id}: not moved"
    if record.deadline_at >= wanted:
        return None
    crossed = _over_budget(record, wanted, records, run, ctx)
    if crossed is not None:
        ends = clock_utc(record.deadline_at, now)
        return (
            f"budget: moving {pod.id}'s deadline for this job would cross {crossed}: it stays {ends}"
            f" ({short_span(record.deadline_at - now)} from now), and this job must end by then"
            f" (`gpuc extend {pod.id} 1h` moves it anyway)"
        )
    from gpuc.core.api import DeadlineRequest  # pydantic: only a warm pod's `run` loads it

    try:
        answer = ctx.watchdog.deadline(pod.id, DeadlineRequest(deadline_at=wanted, at_least=True, quiet=True))
    except GpucError as exc:
        return f"warm pod: its deadline was not moved for this job (the watchdog: {exc.message}); it holds as it was"
    capped = ", the latest its cap allows (GPUC_MAX_LIFETIME_HOURS from its start)" if answer.capped else ""
    price, left = record.price_per_hour, answer.deadline_at - now
    held = "" if price is None else f"; the budget holds {usd(price * left / 3600)} for it"
    return (
        f"warm pod: deadline {clock_utc(answer.deadline_at, now)}{capped} ({short_span(answer.deadline_at - now)}"
        f" from now: this job's {short_span(run.warm_job_s)} and {short_span(run.warm_s)} warm){held}"
    )


def _over_budget(record: PodRecord, wanted: float, records: list[PodRecord], run: RunRecord, ctx: Ctx) -> str | None:
    """The budget the move would cross, in words; None when every budget holds it (or none is set)."""
    assert record.deadline_at is not None
    now = ctx.clock.now()
    price = record.price_per_hour
    extra = None if price is None else price * (wanted - max(record.deadline_at, now)) / 3600
    weights, _notes = weigh(ctx, records, run.experiment, extra)
    over = [w for w in weights if w.over]
    if not over:
        return None
    return f"{over[0].scope} ({usd(over[0].outlook.total_usd)} at worst of {usd(over[0].limit_usd)} already)"
