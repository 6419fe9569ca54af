"""`gpuc logs`, `gpuc results` and `gpuc cp`: click only, one call each."""

from __future__ import annotations

from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx


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
    """
    from gpuc.client.jobs.results import results as copy_then_end  # startup: each command its own code

    with ctx:
        where = copy_then_end(pod, ctx, to=to, note=note, dry_run=dry_run)
    if where is not None:
        click.echo(f"results of {pod} are in {where}")


@click.command()
@click.argument("pod")
@click.option("--follow", "-f", "keep_following", is_flag=True, help="Keep printing as the job writes, until it ends.")
@click.option(
    "--raw",
    is_flag=True,
    help="The bytes as the pod wrote them, terminal escapes included (gpuc's own keys still masked).",
)
@pass_ctx
def logs(ctx: Ctx, pod: str, keep_following: bool, raw: bool) -> None:
    """Show the job's output on POD (a pod id, pod name, run id, or an experiment: its latest run).

    While the pod lives it is read from the pod; after the destroy, from where the pod synced it beside
    results/ (GPUC_RESULTS_BUCKET, the git remote, or the local provider's results folder).

    The output is the pod's: terminal escapes and control characters are stripped (a job could set the
    title, clear the screen or print a forged line of gpuc's), a carriage return becomes a newline, and a
    line starting like gpuc's own is marked [log]. --raw prints it untouched, e.g. into a file.
    """
    from gpuc.client.jobs.logs import show
    from gpuc.client.jobs.wait import say

    ctx.prefer_echo(say)
    with ctx:
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
    click.echo(f"copied to {where}")
