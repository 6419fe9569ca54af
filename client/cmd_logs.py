"""`gpuc logs POD [-f]`: the job's output, from the live pod, or once it is gone from the results
destination the pod synced it to (`<dest>/logs/job.log`)."""

from __future__ import annotations

import sys

import click

from gpuc.client import podlife
from gpuc.client.deps import Deps
from gpuc.client.joblogs import (
    LOG_PRINT_MAX,
    BadOutcome,
    Destination,
    JobOutcome,
    LogPrinter,
    gpuc_secrets,
    read_pod_log,
    result_places,
)
from gpuc.client.jobwait import say
from gpuc.client.outcome import fmt_duration, follow, report
from gpuc.client.state import Run
from gpuc.core.errors import GpucError, NotFound, SafetyRefusal
from gpuc.core.models import Pod
from gpuc.core.settings import load_settings


@click.command()
@click.argument("pod")
@click.option("--follow", "-f", "keep_following", is_flag=True, help="Keep printing as the job writes, until it ends.")
@click.option(
    "--raw",
    is_flag=True,
    help="The bytes as the pod wrote them, terminal escapes included (gpuc's own keys still masked).",
)
def logs(pod: str, keep_following: bool, raw: bool) -> None:
    """Show the job's output on POD (a pod id, pod name, run id, or an experiment: its latest run).

    While the pod lives it is read from the pod; after the destroy, from where the pod synced it beside
    results/ (GPUC_RESULTS_BUCKET, the git remote, or the local provider's results folder).

    The output is the pod's: terminal escapes and control characters are stripped (a job could set the
    title, clear the screen or print a forged line of gpuc's), a carriage return becomes a newline, and a
    line starting like gpuc's own is marked [log]. --raw prints it untouched, e.g. into a file.
    """
    settings = load_settings()
    deps = podlife.build_deps(settings, echo=say)
    show(deps, pod, keep_following, raw=raw)


def find_run(deps: Deps, ref: str) -> Run:
    """A run by pod id, pod name or run id; or an experiment's latest run (what `gpuc up NAME` printed last)."""
    try:
        return deps.runs.find(ref)
    except NotFound:
        runs = [r for r in deps.runs.all() if r.experiment == ref and r.pod_id]
        if not runs:
            raise
    say(f"experiment {ref}: its latest run, pod {runs[-1].pod_id} ({len(runs)} run(s) in all)")
    return runs[-1]


def show(deps: Deps, ref: str, keep_following: bool, *, raw: bool = False) -> None:
    run = find_run(deps, ref)
    if run.pod_id is None:
        raise NotFound(f"run {run.run_id} never got a pod", hint="`gpuc ls` shows what exists")
    live = _live_pod(deps, run)
    if live is not None and keep_following:
        state = follow(deps, live, job_id=None, out=sys.stdout.buffer, raw=raw)
        sys.stdout.flush()
        say(report(deps, live, run, state, job_id=None, since=run.created_at).line)
        return
    if live is not None:
        _print_from_pod(deps, live, raw)
        return
    _print_from_destination(deps, run, raw)


def _live_pod(deps: Deps, run: Run) -> Pod | None:
    """The pod when its disk can be read now; None when it is gone (or stopped: its disk is out of reach)."""
    assert run.pod_id is not None
    try:
        pod = deps.provider(run.provider).get(run.pod_id)
    except GpucError as exc:
        say(f"{run.provider} could not be asked about {run.pod_id} ({exc.message}); reading the results destination")
        return None
    if pod is not None and not pod.managed:
        raise SafetyRefusal(f"pod {pod.id} is not marked as gpuc's", hint="gpuc never acts on pods it did not start")
    return pod if pod is not None and pod.status == "running" else None


def _print_from_pod(deps: Deps, pod: Pod, raw: bool) -> None:
    access = podlife.pod_access(deps.provider(pod.provider), pod, deps.settings)
    printer = LogPrinter(sys.stdout.buffer, gpuc_secrets(deps.settings), raw=raw)
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


def _print_from_destination(deps: Deps, run: Run, raw: bool) -> None:
    dest = Destination(result_places(deps.settings, run.provider, run.experiment, run.run_id))
    printer = LogPrinter(sys.stdout.buffer, gpuc_secrets(deps.settings), raw=raw)
    try:
        place = dest.print_log(printer)
        outcome = dest.read_outcome() if place is not None else None
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
        ended = "the job did not finish"
    say(f"{run.pod_id} is gone; its log from {place.describe()}: {ended}")
