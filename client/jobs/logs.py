"""`gpuc logs POD [-f]`: the job's output, from the live pod, or once it is gone from the results
destination the pod synced it to (`<dest>/logs/job.log`). gpuc's own lines go to stderr (jobs/wait.py
`say`), the job's output to stdout."""

from __future__ import annotations

import sys

from gpuc.client.context import Ctx
from gpuc.client.jobs.follow import follow, report
from gpuc.client.jobs.outcome_file import BadOutcome, JobOutcome
from gpuc.client.jobs.places import Destination, LastPush, last_push, result_places
from gpuc.client.jobs.podlog import LOG_PRINT_MAX, LogPrinter, gpuc_secrets, read_pod_log
from gpuc.client.jobs.wait import say
from gpuc.client.runs import RunRecord
from gpuc.client.text import fmt_duration
from gpuc.core.errors import GpucError, NotFound, SafetyRefusal
from gpuc.core.pod import Pod


def find_run(ctx: Ctx, ref: str) -> RunRecord:
    run = ctx.runs.find(ref)
    if ref == run.experiment and ref not in (run.pod_id, run.run_id, run.name):
        say(f"experiment {ref}: pod {run.pod_id} (run {run.run_id})")
    return run


def show(ctx: Ctx, ref: str, keep_following: bool, *, raw: bool = False) -> None:
    run = find_run(ctx, ref)
    if run.pod_id is None:
        raise NotFound(f"run {run.run_id} never got a pod", hint="`gpuc ls` shows what exists")
    live = _live_pod(ctx, run)
    if live is not None and keep_following:
        state = follow(ctx, live, job_id=None, out=sys.stdout.buffer, raw=raw, tell=say)
        sys.stdout.flush()
        say(report(ctx, live, run, state, job_id=None, since=run.created_at).line)
        return
    if live is not None:
        _print_from_pod(ctx, live, raw)
        return
    _print_from_destination(ctx, run, raw)


def _live_pod(ctx: Ctx, run: RunRecord) -> Pod | None:
    """The pod when its disk can be read now; None when it is gone (or stopped: its disk is out of reach)."""
    assert run.pod_id is not None
    try:
        pod = ctx.provider(run.provider).get(run.pod_id)
    except GpucError as exc:
        say(f"{run.provider} could not be asked about {run.pod_id} ({exc.message}); reading the results destination")
        return None
    if pod is not None and not pod.managed:
        raise SafetyRefusal(f"pod {pod.id} is not marked as gpuc's", hint="gpuc never acts on pods it did not start")
    return pod if pod is not None and pod.status == "running" else None


def _print_from_pod(ctx: Ctx, pod: Pod, raw: bool) -> None:
    access = ctx.pod_access(ctx.provider(pod.provider), pod)
    printer = LogPrinter(sys.stdout.buffer, gpuc_secrets(ctx.settings), raw=raw)
    read = read_pod_log(access, 0)
    if read.size is None:
        raise NotFound(f"no job log on {pod.id}: no job has run on it yet", hint=f"start one: gpuc run {pod.id} -- CMD")
    end = min(read.size, LOG_PRINT_MAX)  # what is there now; `-f` follows what comes after
    offset = 0
    while read.data:
        printer.feed(read.data)
        offset += len(read.data)
        if offset >= end:
            break
        read = read_pod_log(access, offset)
    printer.flush()
    sys.stdout.flush()
    if isinstance(read.outcome, JobOutcome) and read.outcome.exit_code is not None:
        say(f"job exited with code {read.outcome.exit_code} after {fmt_duration(read.outcome.duration_s)}")
    elif isinstance(read.outcome, BadOutcome):
        say(f"the job's outcome is unknown: {read.outcome.describe()}")
    else:
        say(f"the job is still running on {pod.id} (gpuc logs {pod.id} -f follows it)")


def _print_from_destination(ctx: Ctx, run: RunRecord, raw: bool) -> None:
    dest = Destination(result_places(ctx.settings, run.provider, run.experiment, run.run_id))
    printer = LogPrinter(sys.stdout.buffer, gpuc_secrets(ctx.settings), raw=raw)
    push = None
    try:
        place = dest.print_log(printer)
        outcome = dest.read_outcome() if place is not None else None
        if place is not None and (outcome is None or getattr(outcome, "exit_code", None) is None):
            push = _last_push(dest)  # the job did not end there: its log is as of the last push
    finally:
        dest.close()
    sys.stdout.flush()
    if place is None:
        why = f" ({dest.errors[0]})" if dest.errors else ""
        raise NotFound(
            f"no job log for {run.pod_id} at {dest.describe()}{why}",
            hint="a pod syncs its log when its job ends; a pod ended before its job ran (or whose sync failed)"
            " has none. The watchdog's notifications: gpuc watchdog status",
        )
    if isinstance(outcome, BadOutcome):
        ended = f"the job's outcome is unknown: {outcome.describe()}"
    elif outcome is not None and outcome.exit_code is not None:
        ended = f"job exited with code {outcome.exit_code} after {fmt_duration(outcome.duration_s)}"
    else:
        ended = outcome.not_finished() if outcome is not None else "the job did not finish"
    if push is not None:
        say(f"{run.pod_id} is gone; its log as of {push.said(ctx.clock.now())}, not the pod's: {ended}")
        return
    say(f"{run.pod_id} is gone; its log from {place.describe()}: {ended}")


def _last_push(dest: Destination) -> LastPush | None:
    try:
        return last_push(dest)
    except GpucError:
        return None  # the log was read: what cannot be said is only when it was pushed
