"""`gpuc run`, `gpuc logs`, `gpuc results` and `gpuc cp`: click only, one call each. `run` starts a job on a
pod `up` started (client/pods/commands.py) and, with --wait, returns it to be followed (client/pods/jobline.py:
the `gpuc` group follows it with client/jobs/wait.py); the pods it uses are client/pods' work."""

from __future__ import annotations

from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx, talk
from gpuc.client.exits import EXIT_CODES_HELP
from gpuc.client.pods.jobline import JobCommand, JobToFollow, check_wait_options, new_job_id
from gpuc.core.errors import ConfigError


@click.command()
@click.argument("pod")
@click.option(
    "--to",
    "to",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Copy into this folder (default: ./results/POD_ID); it must be new or empty.",
)
@click.option("--note", default=None, help="What this run concluded (goes in the ledger).")
@click.option("--dry-run", is_flag=True, help="Print each step; copy, resume and destroy nothing.")
@pass_ctx
def results(ctx: Ctx, pod: str, to: Path | None, note: str | None, dry_run: bool) -> None:
    """Copy POD's results/ and job log to this laptop, verify them, then end POD.

    For a pod kept because its results sync failed (it stops itself after the kept window, its disk
    kept). A stopped pod is resumed first, reached over ssh, copied, then destroyed; nothing is destroyed
    unless every name and size matches the pod's own listing. A pod gpuc did not start is refused.

    A pod that is gone: its results/ and job log from its last push at the destination (its final sync, when
    its job ended and synced), laid out the same, every size checked against that push's manifest.
    """
    from gpuc.client.jobs.results import results as copy_then_end  # startup: each command its own code

    with ctx:
        where = copy_then_end(pod, ctx, to=to, note=note, dry_run=dry_run)
    if where is not None:
        talk(f"results of {pod} are in {where}")


@click.command()
@click.argument("pod")
@click.option("--follow", "-f", "keep_following", is_flag=True, help="Keep printing as the job writes, until it ends.")
@click.option(
    "--raw",
    is_flag=True,
    help="The bytes as the pod wrote them, terminal escapes included (gpuc's own keys still masked).",
)
@click.option(
    "--job",
    "which",
    default=None,
    metavar="N|ID",
    help="One job's own log (1: the run's first job, or its id), as the pod sent it at that job's end: a warm "
    "pod runs many, and each keeps its own.",
)
@click.option("--jobs", "list_jobs", is_flag=True, help="List the run's jobs: number, id, start, how each ended.")
@pass_ctx
def logs(ctx: Ctx, pod: str, keep_following: bool, raw: bool, which: str | None, list_jobs: bool) -> None:
    """Show the job's output on POD (a pod id, pod name, run id, or an experiment: its latest run).

    While the pod lives it is read from the pod; after the destroy, from where the pod synced it beside
    results/ (GPUC_RESULTS_BUCKET, the git remote, or the local provider's results folder). Each job's own
    log is kept there too, never overwritten by the next job's (logs/jobs/<id>.log): --jobs lists them,
    --job N prints one.

    The output is the pod's: terminal escapes and control characters are stripped (a job could set the
    title, clear the screen or print a forged line of gpuc's), a carriage return becomes a newline, and a
    line starting like gpuc's own is marked [log]. --raw prints it untouched, e.g. into a file.
    """
    from gpuc.client.jobs.logs import show, show_job, show_jobs
    from gpuc.client.jobs.wait import say

    if (which is not None or list_jobs) and keep_following:
        raise ConfigError("-f follows the job running now; --job and --jobs read the jobs that ended", hint="drop -f")
    ctx.prefer_echo(say)
    with ctx:
        if list_jobs:
            show_jobs(ctx, pod)
        elif which is not None:
            show_job(ctx, pod, which, raw)
        else:
            show(ctx, pod, keep_following, raw=raw)


@click.command()
@click.argument("source")
@click.argument("dest", required=False, default=".")
@pass_ctx
def cp(ctx: Ctx, source: str, dest: str) -> None:
    """Copy files between here and a pod: `gpuc cp POD:PATH [DIR]` or `gpuc cp PATH POD:[DIR]`.

    PATH on the pod is relative to its workspace (the job's folder); nothing outside it is reached. From the
    pod, the copy lands in DIR (default: here) under its own name once every name and size matches the pod's
    listing, and nothing here is overwritten. To the pod, a file or folder goes into DIR of the workspace
    (default: the workspace), checked as `up` checks an upload (.gitignore, .gpucignore, no .env, nothing
    that looks like a credential) before the pod is touched; files there of the same name are replaced.
    POD is what `gpuc ls` shows: a pod id, run id or experiment name.
    """
    from gpuc.client.jobs.cp import cp as copy  # startup: each command its own code

    with ctx:
        where = copy(source, dest, ctx)
    talk(f"copied to {where}")


@click.command(cls=JobCommand, epilog=EXIT_CODES_HELP)
@click.argument("pod")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--force",
    is_flag=True,
    help="Start it even while POD runs a job (the first of the two to exit destroys the pod under the other).",
)
@click.option("--wait", is_flag=True, help="Stream the job's output, wait for its end, exit with its exit code.")
@click.option("--timeout", default=None, help="With --wait: stop waiting after this long (30m, 2h); the job goes on.")
@click.option(
    "--sync",
    "sync_code",
    is_flag=True,
    help="Upload this folder again first, as `up` does (same exclusions and checks): the job runs today's code.",
)
@click.option(
    "--env",
    "env_names",
    multiple=True,
    metavar="NAME",
    help="Give this job a variable from your environment or .env, as `up --env` does (repeatable; a name only).",
)
@click.option(
    "--clean",
    is_flag=True,
    help="Start with an empty results/ (on a warm pod it carries over from the last job): the pod pushes it first, "
    "then removes only what the destination holds as it is; what was not pushed stays, and is named. A push that "
    "fails removes nothing and starts no job.",
)
@click.option("--dry-run", is_flag=True, help="Print what would run; start nothing.")
@pass_ctx
def run(
    ctx: Ctx,
    pod: str,
    command: tuple[str, ...],
    force: bool,
    wait: bool,
    timeout: str | None,
    sync_code: bool,
    env_names: tuple[str, ...],
    clean: bool,
    dry_run: bool,
) -> JobToFollow | None:
    """Run COMMAND on POD under the wrapper: on exit, sync → notify → destroy (a pod started with --warm
    stays warm for the next `gpuc run POD --sync --wait -- CMD`, and each run moves its deadline to one job
    and its warm time from then, unless `up --max-hours` fixed it).

    Refused while POD still runs a job (checked on the pod): its exit would destroy the pod under that job
    (a warm pod runs one job at a time), and when what COMMAND runs (its script) is not on the pod. Without
    --wait, `run` returns once the job has STARTED. With --sync the folder is checked here, before the pod is
    touched, and uploaded over the pod's workspace (changed files replaced; files deleted here stay there;
    results/ is never touched). results/ carries over from the last job (a resumable script resumes it);
    --clean starts it empty, removing only what the results destination already holds.
    """
    from gpuc.client.onpod import upload  # startup: each command its own code
    from gpuc.client.pods.run import job_variables, run_job

    timeout_s = check_wait_options(wait, timeout, command)
    bundle = (
        upload.prepare(Path.cwd(), ctx.settings.upload_max_mb, ctx.settings.home, ctx.settings.named_secrets())
        if sync_code
        else None
    )
    job_env = job_variables(env_names, ctx)  # checked here, before the pod is touched
    job_id = new_job_id()
    started = run_job(
        pod,
        list(command),
        ctx,
        dry_run=dry_run,
        force=force,
        job_id=job_id,
        bundle=bundle,
        job_env=job_env,
        clean=clean,
        wait=wait,
        here=Path.cwd(),
    )
    if wait and not dry_run:
        return JobToFollow(ctx, started, job_id, timeout_s)  # followed by the `gpuc` group
    return None
