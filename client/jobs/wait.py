"""`--wait` for `gpuc up` and `gpuc run` (the job they hand back, client/pods/jobline.py, is followed here by
the `gpuc` group), and `gpuc logs`: the click-facing side of client/jobs/follow.py.

The job's output goes to stdout, gpuc's own lines to stderr, so `gpuc up ... --wait > run.log` keeps the
job's output clean. `--wait` exits with the job's exit code; Ctrl-C stops the waiting, never the job.

A job must not be able to forge gpuc's own lines (`gpuc: job exited with code 0 ... results and log:
s3://elsewhere/`). Its output reaches the terminal with every escape sequence stripped, and a line of it
that starts like gpuc's is marked `[log] `; on a terminal gpuc's `gpuc:` prefix is styled (bold, reverse
video), which takes an escape sequence no job output can carry: no lookalike letters, no line wrapped to
start at the screen's edge, passes for it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

import click

from gpuc.client.context import Ctx
from gpuc.client.exits import STOPPED_WAITING_EXIT
from gpuc.client.jobs.follow import Follow, follow, report
from gpuc.client.pods.spent import spent_words
from gpuc.core.pod import Pod
from gpuc.core.termsafe import clean_line


def say(text: str) -> None:
    """One of gpuc's own lines, on stderr. Its text may quote the pod (a reason, a path): cleaned, one line.
    click drops the style when stderr is not a terminal; NO_COLOR (no-color.org) drops it everywhere."""
    prefix = "gpuc:" if os.environ.get("NO_COLOR") else click.style("gpuc:", bold=True, reverse=True)
    click.echo(f"{prefix} {clean_line(text)}", err=True)


def wait_and_exit(ctx: Ctx, pod: Pod, *, job_id: str | None, timeout_s: float | None) -> NoReturn:
    """Stream the job, print its one-line outcome, exit with its exit code."""
    run = ctx.runs.find(pod.id)
    since = ctx.clock.now()
    say(f"waiting for the job on {pod.id} (Ctrl-C stops waiting; the job goes on)")
    state: Follow | None = None
    try:
        state = follow(ctx, pod, job_id=job_id, out=sys.stdout.buffer, timeout_s=timeout_s, tell=say)
        result = report(ctx, pod, run, state, job_id=job_id, since=since)
    except KeyboardInterrupt:
        if state is not None:
            state.printer.flush()
        _flush_output()
        say(
            f"stopped waiting; the job goes on on {pod.id}: gpuc logs {pod.id} -f (gpuc down {pod.id} ends it)"
            + spent_words(ctx, run.pod_id or pod.id)
        )
        sys.exit(STOPPED_WAITING_EXIT)
    _flush_output()
    say(result.line)
    sys.exit(result.exit_code)


def _flush_output() -> None:
    """The job's output before gpuc's last line. A reader that went away (`| head`) is no error of the job's:
    the last line (stderr) and the exit code still say how it ended."""
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
