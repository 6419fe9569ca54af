"""`gpuc results POD`."""

from __future__ import annotations

from pathlib import Path

import click

from gpuc.core.settings import load_settings


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
def results(pod: str, to: Path | None, note: str | None, dry_run: bool) -> None:
    """Copy POD's results/ and job log to this laptop, verify them, then end POD.

    For a pod kept because its results sync failed (it stops itself after the kept window, its disk
    kept). A stopped pod is resumed first, reached over ssh, copied, then destroyed; nothing is destroyed
    unless every name and size matches the pod's own listing. A pod gpuc did not start is refused.
    """
    from gpuc.client import podlife
    from gpuc.client.results import results as copy_then_end  # startup: this command only

    deps = podlife.build_deps(load_settings(), echo=click.echo)
    with deps.functions:
        where = copy_then_end(pod, deps, to=to, note=note, dry_run=dry_run)
    if where is not None:
        click.echo(f"results of {pod} are in {where}")
