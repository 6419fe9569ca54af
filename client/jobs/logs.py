"""`gpuc logs POD [-f]`: the job's output, from the live pod, or once it is gone from the results
destination the pod synced it to (`<dest>/logs/job.log`). gpuc's own lines go to stderr (jobs/wait.py
`say`), the job's output to stdout."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from gpuc.client.context import Ctx
from gpuc.client.jobs.follow import follow, report
from gpuc.client.jobs.outcome_file import OUTCOME_MAX_BYTES, BadOutcome, JobOutcome, outcome_from, parse_outcome
from gpuc.client.jobs.places import Destination, LastPush, last_push, result_places
from gpuc.client.jobs.podlog import LOG_PRINT_MAX, LogPrinter, gpuc_secrets, read_pod_log
from gpuc.client.jobs.wait import say
from gpuc.client.runs import RunRecord
from gpuc.client.text import clock_utc, fmt_duration, render_table
from gpuc.core.errors import ConfigError, GpucError, NotFound, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.core.podjson import Unreadable, loads
from gpuc.instance_side.joblog import JOB_ID_RE, OUTCOME_FORMAT
from gpuc.instance_side.sync import JOBS_DIR, JOBS_INDEX


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


# -- each job's own log (a warm pod runs many: `gpuc logs POD --jobs`, `--job N`) ---------------------------
JOBS_MAX_BYTES = 4 * 1024 * 1024  # ~150 bytes a job: far more is not a list gpuc wrote


@dataclass(frozen=True)
class JobEntry:
    """One job of the run, as the pod's list of its jobs says (logs/jobs.json at the destination), checked."""

    number: int  # 1: the run's first job
    outcome: JobOutcome
    started_at: float | None


def read_jobs(dest: Destination) -> list[JobEntry] | None:
    """Every job the pod ran, oldest first; None when the destination holds no list. The list is the pod's word:
    each row goes through the one strict outcome reader, and its job id must be one that names a file."""
    found = dest.read(JOBS_INDEX, 0, JOBS_MAX_BYTES + 1)
    if found is None:
        return None
    where = f"{found.place.describe()}{JOBS_INDEX}"
    try:
        value = loads(found.data, most=JOBS_MAX_BYTES)
        rows = value.get("jobs") if isinstance(value, dict) else None
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise Unreadable("no list of jobs")
        entries = [_entry(i, row) for i, row in enumerate(rows, 1)]
    except Unreadable as exc:
        raise GpucError(f"{where} is unreadable ({exc})") from None
    return entries


def _entry(number: int, row: dict[str, object]) -> JobEntry:
    outcome = outcome_from({**row, "format": OUTCOME_FORMAT})
    if outcome.job_id is None or not JOB_ID_RE.match(outcome.job_id):
        raise Unreadable(f"job {number} has no job id gpuc could have given")
    started = row.get("started_at")
    return JobEntry(number, outcome, float(started) if isinstance(started, int | float) else None)


def show_jobs(ctx: Ctx, ref: str) -> None:
    """`gpuc logs POD --jobs`: the run's jobs, numbered, with when each started and how it ended."""
    run, dest = _destination(ctx, ref)
    try:
        jobs = read_jobs(dest)
    finally:
        dest.close()
    if jobs is None:
        why = f" ({dest.errors[0]})" if dest.errors else ""
        raise NotFound(
            f"no list of jobs for {run.pod_id} at {dest.describe()}{why}",
            hint="a pod sends it with each job's results, when the job ends; `gpuc logs POD` shows the latest job",
        )
    now = ctx.clock.now()
    rows = [
        [
            str(job.number),
            job.outcome.job_id or "",
            clock_utc(job.started_at, now) if job.started_at is not None else "?",
            fmt_duration(job.outcome.duration_s),
            _ended(job.outcome),
        ]
        for job in jobs
    ]
    for line in render_table(["JOB", "ID", "STARTED", "RAN", "ENDED"], rows, right=(0,)):
        print(line)
    sys.stdout.flush()
    say(f"each job's own log: gpuc logs {ref} --job N (or its ID); from {dest.describe()}")


def _ended(outcome: JobOutcome) -> str:
    if outcome.exit_code is not None:
        return f"exit {outcome.exit_code}"
    return outcome.not_finished().removeprefix("the job ")


def show_job(ctx: Ctx, ref: str, which: str, raw: bool) -> None:
    """`gpuc logs POD --job N|ID`: one job's own log, as the pod sent it at that job's end (logs/jobs/<id>.log)."""
    run, dest = _destination(ctx, ref)
    printer = LogPrinter(sys.stdout.buffer, gpuc_secrets(ctx.settings), raw=raw)
    try:
        job_id, label = _which_job(dest, which)
        place = dest.print_log(printer, name=f"{JOBS_DIR}{job_id}.log")
        found = dest.read(f"{JOBS_DIR}{job_id}.json", most=OUTCOME_MAX_BYTES + 1) if place is not None else None
    finally:
        dest.close()
    sys.stdout.flush()
    if place is None:
        why = f" ({dest.errors[0]})" if dest.errors else ""
        raise NotFound(
            f"no log of job {label} at {dest.describe()}{why}",
            hint=f"a job's own log goes there when it ends: `gpuc logs {ref} --jobs` lists them, "
            f"`gpuc logs {ref} -f` follows the job running now",
        )
    outcome = None if found is None else parse_outcome(found.data, f"{found.place.describe()}{JOBS_DIR}{job_id}.json")
    if isinstance(outcome, JobOutcome) and outcome.exit_code is not None:
        ended = f"exited with code {outcome.exit_code} after {fmt_duration(outcome.duration_s)}"
    elif isinstance(outcome, JobOutcome):
        ended = outcome.not_finished().removeprefix("the job ")
    elif isinstance(outcome, BadOutcome):
        ended = f"outcome unknown: {outcome.describe()}"
    else:
        ended = "outcome not there"
    say(f"job {label} of {run.pod_id}: {ended}; its log from {place.describe()}")


def _which_job(dest: Destination, which: str) -> tuple[str, str]:
    """(the job id, how to name it) for `--job N` (1: the first; read from the pod's list) or `--job ID`."""
    if which.isdigit():
        jobs = read_jobs(dest) or []
        number = int(which)
        if not 1 <= number <= len(jobs):
            raise NotFound(
                f"there is no job {number}: {len(jobs)} job(s) at {dest.describe()}",
                hint="`gpuc logs POD --jobs` lists them",
            )
        job_id = jobs[number - 1].outcome.job_id
        assert job_id is not None  # read_jobs checked it
        return job_id, f"{number} ({job_id})"
    if not JOB_ID_RE.match(which):
        raise ConfigError(f"--job {which!r} is neither a job's number nor its id", hint="gpuc logs POD --jobs")
    return which, which


def _destination(ctx: Ctx, ref: str) -> tuple[RunRecord, Destination]:
    run = find_run(ctx, ref)
    if run.pod_id is None:
        raise NotFound(f"run {run.run_id} never got a pod", hint="`gpuc ls` shows what exists")
    return run, Destination(result_places(ctx.settings, run.provider, run.experiment, run.run_id))
