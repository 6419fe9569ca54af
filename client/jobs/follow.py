"""Waiting for a job and telling its outcome: `gpuc up ... --wait`, `gpuc run ... --wait`, `gpuc logs -f`.

While the pod lives, its job log is streamed from the pod. When the pod is gone (the wrapper destroyed it
after the sync), the rest of the log and the outcome are read where the sync put them: the results
destination. That copy is the one to trust: it exists only if the sync was verified, and it names the job
it belongs to. When it is not there, the outcome seen on the pod before its end, then the watchdog's
job_exit notification, stand in; when none of them knows, gpuc says so and exits 125.

Every outcome is the pod's word and goes through the one strict reader (client/jobs/outcome_file.py). One that
is there but unreadable (a job, or a stranger's machine, wrote it) is not replaced by a guess: the outcome
is unknown (125), and the line says what could not be read and where to look.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import BinaryIO

from gpuc.client.context import Ctx
from gpuc.client.exits import (
    ENDED_EXITS,
    KEPT_SYNC_FAILED_EXIT,
    OUTCOME_UNKNOWN_EXIT,
    RECORDED_ENDS,
    WAIT_TIMEOUT_EXIT,
)
from gpuc.client.jobs.outcome_file import BadOutcome, JobOutcome, duration_from, exit_code_from
from gpuc.client.jobs.places import Destination, result_places
from gpuc.client.jobs.podlog import CHUNK_BYTES, LogPrinter, PodLogRead, gpuc_secrets, read_pod_log
from gpuc.client.onpod.ask import OlderPod
from gpuc.client.pods.spent import Spent, spent
from gpuc.client.pods.survey import ledger_intake
from gpuc.client.runs import RunRecord
from gpuc.client.text import fmt_duration, short_span
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.errors import GpucError
from gpuc.core.pod import Pod
from gpuc.core.podjson import Unreadable

POLL_S = 1.0
# Between two looks at the provider while the pod answers: a pod that answers is there.
GONE_CHECK_S = 30.0
# A job that never shows up under its id: the wrapper could not start (its error is in .gpuc/job.out).
START_GRACE_S = 90.0
# An outcome on the pod that stays unreadable this long is not a write caught half-way (writes are atomic):
# the wait ends, the outcome unknown.
UNREADABLE_GRACE_S = 60.0
# The watchdog's own words (functions/podnews.py), which come after the pod's quoted ones: the last match
# is taken, as a FAILED job's last line ("... exit code 0") is quoted in the same message.
_EXIT_IN_NOTE = re.compile(r"exit code (-?\d{1,4})\b")
_MINUTES_IN_NOTE = re.compile(r"ran (\d+(?:\.\d+)?) min")

Say = Callable[[str], None]


@dataclass
class JobReport:
    exit_code: int
    line: str


# -- following the log -----------------------------------------------------------------------------------
@dataclass
class Follow:
    """What one follow saw: the outcome on the pod (ours), whether the pod is gone, and why it stopped."""

    printer: LogPrinter
    outcome: JobOutcome | None = None
    gone: bool = False
    stopped: str | None = None  # "kept" | "timeout" | "not_started" | "unreadable"
    job_out: str = ""
    unreadable: BadOutcome | None = None  # the pod's outcome as last read, when it could not be
    unreadable_since: float | None = None


def follow(
    ctx: Ctx,
    pod: Pod,
    *,
    job_id: str | None,
    out: BinaryIO,
    timeout_s: float | None = None,
    poll_s: float = POLL_S,
    start_grace_s: float = START_GRACE_S,
    unreadable_grace_s: float = UNREADABLE_GRACE_S,
    raw: bool = False,
    tell: Callable[[str], None] | None = None,
) -> Follow:
    """Stream the job log until the pod is gone, the job's ending keeps it (sync failed, KEEP_ALIVE), the
    outcome on the pod stays unreadable, or the timeout. `job_id`: read only the log of that job (a kept
    pod may still hold a previous job's). `tell`: said the moment the pod starts ending under the job
    (deadline, idle, the phone), not once it is gone."""
    state = Follow(LogPrinter(out, gpuc_secrets(ctx.settings), raw=raw))
    start = ctx.clock.now()
    next_check = start + GONE_CHECK_S
    offset = 0
    while True:
        read = _read(ctx, pod, offset)
        if read is None:
            if _gone(ctx, pod):
                state.gone = True
                return state
        else:
            if _unreadable_for(state, read, ctx.clock.now()) >= unreadable_grace_s:
                state.printer.flush()
                state.stopped = "unreadable"
                return state
            seen = read.outcome if isinstance(read.outcome, JobOutcome) else None
            mine = job_id is None or (seen is not None and seen.job_id == job_id)
            if mine and seen is not None:
                if tell is not None and seen.ended_by and not (state.outcome and state.outcome.ended_by):
                    state.printer.flush()
                    tell(f"{seen.not_finished()}: the pod syncs results/, then is destroyed")
                state.outcome = seen
            if mine and read.size is not None:
                if read.size < offset:  # a new job started over the log (gpuc logs -f on a kept pod)
                    state.printer.flush()
                    offset = 0
                    continue
                state.printer.feed(read.data)
                offset += len(read.data)
                if len(read.data) >= CHUNK_BYTES and not state.printer.full:
                    continue  # more is there already
            if state.outcome and state.outcome.exit_code is not None and state.outcome.ending:
                state.printer.flush()
                state.stopped = "kept"
                return state
            unseen = state.outcome is None and state.unreadable is None
            if job_id is not None and unseen and ctx.clock.now() - start > start_grace_s:
                state.stopped = "not_started"
                return state
        now = ctx.clock.now()
        if timeout_s is not None and now - start >= timeout_s:
            state.printer.flush()
            state.stopped = "timeout"
            return state
        if now >= next_check:
            next_check = now + GONE_CHECK_S
            if _gone(ctx, pod):
                state.gone = True
                return state
        ctx.clock.sleep(poll_s)


def _unreadable_for(state: Follow, read: PodLogRead, now: float) -> float:
    """How long the outcome on the pod has been unreadable (0: it is readable, or absent)."""
    if not isinstance(read.outcome, BadOutcome):
        state.unreadable = state.unreadable_since = None
        return 0.0
    state.unreadable = read.outcome
    if state.unreadable_since is None:
        state.unreadable_since = now
    return now - state.unreadable_since


def _read(ctx: Ctx, pod: Pod, offset: int) -> PodLogRead | None:
    try:
        return read_pod_log(ctx.pod_access(ctx.provider(pod.provider), pod), offset)
    except OlderPod:
        raise  # no retry changes what it runs
    except (GpucError, OSError, subprocess.SubprocessError):
        return None  # the pod may be going away, or the network blinked: the provider says which


def _gone(ctx: Ctx, pod: Pod) -> bool:
    """Only the provider's positive answer counts: an API error is no evidence either way."""
    try:
        return ctx.provider(pod.provider).get(pod.id) is None
    except GpucError:
        return False


# -- the outcome -----------------------------------------------------------------------------------------
POD_BEFORE_END = "the pod, before it ended"  # Learnt.source: the outcome read on the pod, none at the destination


@dataclass
class Learnt:
    outcome: JobOutcome | None
    source: str
    destination: Destination
    log_found: bool
    unreadable: BadOutcome | None = None  # the destination's outcome: there, but it could not be read


def learn_after_gone(ctx: Ctx, run: RunRecord, state: Follow, job_id: str | None) -> Learnt:
    """The pod is gone: the rest of the log and the outcome from the results destination."""
    dest = Destination(result_places(ctx.settings, run.provider, run.experiment, run.run_id))
    try:
        log_found = dest.print_log(state.printer, state.printer.printed) is not None
        state.printer.flush()  # what the pod's last read left held, when the destination has no log
        found = dest.read_outcome()
    finally:
        dest.close()
    if isinstance(found, BadOutcome):
        # The copy to trust is there and unreadable: neither the pod's earlier word nor the watchdog's
        # note is taken over it.
        return Learnt(None, "", dest, log_found, unreadable=found)
    outcome = found
    if outcome is not None and job_id is not None and outcome.job_id != job_id:
        outcome = None  # a previous job's, on this run's destination
    if outcome is not None and outcome.exit_code is not None:
        return Learnt(outcome, "results destination", dest, log_found)
    if state.outcome is not None and state.outcome.exit_code is not None:
        return Learnt(state.outcome, POD_BEFORE_END, dest, log_found)
    return Learnt(outcome or state.outcome, "", dest, log_found)


def watchdog_outcome(status: StatusResponse | None, pod_id: str, since: float) -> JobOutcome | None:
    """The job_exit notification the wrapper sent (its text carries the exit code): the last resort.
    The pod's words too: a code out of range, or a duration that is not one, is not taken."""
    if status is None:
        return None
    for note in reversed(status.notifications):
        if note.pod_id != pod_id or note.kind != "job_exit" or note.ts < since:
            continue
        code = _last(_EXIT_IN_NOTE, note.message)
        if code is None:
            continue
        minutes = _last(_MINUTES_IN_NOTE, note.message)
        try:
            return JobOutcome(
                job_id=None,
                exit_code=exit_code_from(int(code.group(1))),
                duration_s=duration_from(float(minutes.group(1)) * 60) if minutes else None,
            )
        except Unreadable:  # a code or a duration out of range: not a note the wrapper wrote
            continue
    return None


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the loop keeps the last
        pass
    return found


def pod_cost(ctx: Ctx, pod_id: str, records: list[PodRecord]) -> Spent | None:
    """The pod's cost as the ledger has it once the watchdog's end is taken in; else from the watchdog's
    record (its price from its start to its end)."""
    ledger_intake(ctx, records)
    found = spent(ctx, pod_id)
    if found is not None and found.final:
        return found
    for record in records:
        if record.pod_id == pod_id and record.end_at and record.started_at:
            hours = max(0.0, record.end_at - record.started_at) / 3600
            price = record.price_per_hour
            return Spent(hours, price * hours if price is not None else None, True, price, record.started_at)
    return None


def recorded_end(records: list[PodRecord], pod_id: str) -> PodRecord | None:
    """The watchdog's record of the pod's end when someone other than its agent ended it (`gpuc down`, the
    phone's destroy anyway): the outcome the pod synced cannot say so, its agent did not end it."""
    return next((r for r in records if r.pod_id == pod_id and r.end_at and r.ended_by in RECORDED_ENDS), None)


def report(ctx: Ctx, pod: Pod, run: RunRecord, state: Follow, *, job_id: str | None, since: float) -> JobReport:
    """The one-line outcome and the exit code `--wait` ends with."""
    if state.stopped == "timeout":
        return JobReport(
            WAIT_TIMEOUT_EXIT,
            f"still running on {pod.id}; stopped waiting (--timeout). The pod syncs, notifies and destroys itself"
            f" when the job exits: gpuc logs {pod.id} -f",
        )
    if state.stopped == "not_started":
        return JobReport(
            OUTCOME_UNKNOWN_EXIT,
            f"the job never started on {pod.id} (no sign of it after {START_GRACE_S:.0f}s); the pod's"
            f" .gpuc/job.out says why. The idle watch destroys the pod, or: gpuc down {pod.id}",
        )
    if state.stopped == "kept":
        assert state.outcome is not None
        return _kept(pod, state.outcome, run.warm_s)
    if state.stopped == "unreadable":
        assert state.unreadable is not None
        return JobReport(
            OUTCOME_UNKNOWN_EXIT,
            f"the job's outcome is unknown: {state.unreadable.describe()}, and stays so; stopped waiting."
            f" Its log: gpuc logs {pod.id}. The pod syncs and destroys itself when its job ends, or: gpuc down"
            f" {pod.id}",
        )
    status = _status(ctx)
    records = status.pods if status else []
    learnt = learn_after_gone(ctx, run, state, job_id)
    outcome, source = learnt.outcome, learnt.source
    unexited = learnt.unreadable is None and (outcome is None or outcome.exit_code is None)
    # Who ended the pod, when its agent did not (the outcome would say): before the job_exit note, which a job
    # killed by that destroy may still send, and before an exit code read only on the pod (none at the
    # destination the ender synced first): that may be the job's death under the destroy (137).
    asked = (unexited or source == POD_BEFORE_END) and (outcome is None or outcome.ended_by is None)
    ender = recorded_end(records, pod.id) if asked else None
    if unexited and ender is None:
        noted = watchdog_outcome(status, pod.id, since - 120)
        if noted is not None:
            outcome, source = replace(noted, job_id=job_id), "the watchdog's notification"
    cost = pod_cost(ctx, pod.id, records)
    ctx.runs.set_phase(run.run_id, "ended", now=ctx.clock.now())
    money = f"pod {pod.id} " + (cost.words() if cost is not None else "ran ?, cost not known yet (gpuc ledger)")
    where = (
        f"results and log: {learnt.destination.describe()}"
        if learnt.log_found
        else (f"results: {learnt.destination.describe()} (no job log there)")
    )
    problems = "".join(f"; could not read {e}" for e in learnt.destination.errors[:1])
    if learnt.unreadable is not None:
        return JobReport(
            OUTCOME_UNKNOWN_EXIT,
            f"the job's outcome is unknown: {learnt.unreadable.describe()}. Its log: gpuc logs {pod.id};"
            f" {money}; {where}{problems}",
        )
    ended_exit = ENDED_EXITS.get(outcome.ended_by or "") if outcome is not None and outcome.exit_code is None else None
    if outcome is not None and ended_exit is not None:
        return JobReport(ended_exit, f"{_not_finished(outcome)}; {money}; {where}{problems}")
    if ender is not None:
        return JobReport(RECORDED_ENDS[ender.ended_by or ""], f"{_ended_by(ender)}; {money}; {where}{problems}")
    if outcome is None or outcome.exit_code is None:
        began = _not_finished(outcome) if outcome else ("the job's outcome is unknown")
        seen = f"; {state.unreadable.describe()} when last read" if state.unreadable else ""
        return JobReport(
            OUTCOME_UNKNOWN_EXIT,
            f"{began}: no exit code at {learnt.destination.describe()} nor with the watchdog{seen}; {money}{problems}",
        )
    via = "" if source == "results destination" else f" (from {source})"
    return JobReport(
        outcome.exit_code,
        f"job exited with code {outcome.exit_code} after {fmt_duration(outcome.duration_s)}{via}; {money}; {where}"
        f"{problems}",
    )


def _kept(pod: Pod, outcome: JobOutcome, warm_s: float | None = None) -> JobReport:
    code = outcome.exit_code
    assert code is not None
    head = f"job exited with code {code} after {fmt_duration(outcome.duration_s)}"
    if outcome.ending == "kept_sync_failed":
        return JobReport(
            KEPT_SYNC_FAILED_EXIT,
            f"{head}; results sync FAILED: pod {pod.id} is KEPT and billing. See gpuc logs {pod.id} and the"
            f" pod's .gpuc/agent.log; then gpuc down {pod.id} (or --force to give the results up)",
        )
    if outcome.ending == "kept_alive" and warm_s:
        own = f" (kept: gpuc logs {pod.id} --job {outcome.job_id})" if outcome.job_id else ""
        return JobReport(
            code,
            f"{head}; results and log synced{own}; pod {pod.id} stays warm, billing until it has had no job for"
            f" {short_span(warm_s)}: gpuc run {pod.id} --sync --wait -- CMD runs the next job; gpuc down {pod.id}"
            " ends it now",
        )
    if outcome.ending == "kept_alive":
        return JobReport(
            code,
            f"{head}; results synced; pod {pod.id} kept (--warm, or KEEP_ALIVE=1), billing until its idle"
            f" watch ends it: gpuc run {pod.id} --sync --wait -- CMD reruns on it; gpuc down {pod.id} ends it",
        )
    return JobReport(
        code, f"{head}; results synced; the pod's self-destroy was refused: the watchdog destroys {pod.id}"
    )


def _status(ctx: Ctx) -> StatusResponse | None:
    try:
        return ctx.watchdog.status()
    except GpucError:
        return None


def _ended_by(record: PodRecord) -> str:
    if record.ended_by == "down":
        why = f" (--note {record.note[:80]!r})" if record.note else ""
        return f"the job did not finish: the pod was ended by `gpuc down`{why}, which synced results/ first"
    return "the job did not finish: destroyed from the phone (destroy anyway: results/ not synced)"


def _not_finished(outcome: JobOutcome) -> str:
    if outcome.ended_by is None:
        return "the job started but did not finish (the pod was destroyed under it)"
    return "the job started but " + outcome.not_finished().removeprefix("the job ")
