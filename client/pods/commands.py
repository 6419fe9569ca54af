"""`gpuc down / ls / keep / extend`: click only, one call each (`up` and `run`, which start a job and may
follow it, are in client/jobs/commands.py).

Startup: `gpuc ls` loads this module; it imports survey and listing at the top, and each other command
imports its own module inside itself (down's sync gate).
"""

from __future__ import annotations

import click

from gpuc.client.context import Ctx, pass_ctx, talk
from gpuc.client.pods import survey
from gpuc.client.pods.listing import ls_lines
from gpuc.core.clock import parse_duration
from gpuc.core.termsafe import clean_line


@click.command()
@click.argument("pod")
@click.option("--note", default=None, help="What this run concluded (goes in the ledger).")
@click.option("--force", is_flag=True, help="Destroy even if results cannot be synced.")
@click.option("--dry-run", is_flag=True, help="Print each step; destroy nothing.")
@pass_ctx
def down(ctx: Ctx, pod: str, note: str | None, force: bool, dry_run: bool) -> None:
    """Sync POD's results, destroy it (never stop), confirm it is gone, close its ledger row."""
    from gpuc.client.pods.down import down as end_pod  # lazy: see up

    with ctx:
        end_pod(pod, ctx, note=note, force=force, dry_run=dry_run)


@click.command()
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON array: " + ", ".join(survey.LS_FIELDS) + ", age_s, cost_usd, watchdog, last_seen, ... "
    "(times in ISO 8601 UTC).",
)
@pass_ctx
def ls(ctx: Ctx, as_json: bool) -> None:
    """List pods at every provider: GPU, age, cost so far, and the watchdog's view.

    A provider without a key is listed as not checked: "no pods" means every provider was read. Exits 1
    when a provider holding a key could not be read (its pods may be billing unseen).
    """
    with ctx:
        listing = survey.survey(ctx)
    for warning in listing.warnings:
        click.echo(f"! {clean_line(warning)}", err=True)  # a provider's or the watchdog's words may quote a pod's
    if as_json:
        click.echo(survey.dumps_rows(listing.rows))
        # stderr: the array stays what it was, and a script still learns that it is not the whole story
        for name, state in listing.providers.items():
            if state != survey.READ:
                click.echo(f"! {name}: {clean_line(state)}", err=True)
    else:
        for line in ls_lines(listing):
            click.echo(line)
    if listing.unread:  # a script (or a cron check) must not read "listed" as "nothing is billing"
        click.echo(f"gpuc ls: incomplete: {', '.join(listing.unread)} could not be read", err=True)
        click.get_current_context().exit(1)


@click.command()
@click.argument("pod")
@click.option("--for", "duration", required=True, help="How long: 30m, 2h, 1d.")
@pass_ctx
def keep(ctx: Ctx, pod: str, duration: str) -> None:
    """Suspend POD's idle destroy for a while (the heartbeat answer carries the lease to the pod).

    Its deadline moves up to the lease's end if it is sooner (never past the pod's start +
    GPUC_MAX_LIFETIME_HOURS: then it says when the pod still ends). The watchdog caps a lease at its max
    hours (GPUC_MAX_HOURS, default 12) from now.
    """
    from gpuc.client.pods.lease import keep as keep_lease  # lazy: see up

    seconds = parse_duration(duration)
    with ctx:
        talk(keep_lease(pod, seconds, ctx, duration))


@click.command()
@click.argument("pod")
@click.argument("duration", required=False)
@click.option("--to", "to", default=None, help="Move it to this time instead: 18:30 (UTC) or 2026-12-02T18:30Z.")
@pass_ctx
def extend(ctx: Ctx, pod: str, duration: str | None, to: str | None) -> None:
    """Move POD's deadline later by DURATION (30m, 2h, 1d), or to a time (--to).

    The deadline (`up --max-hours`) is when the pod's agent syncs results/ and destroys it and the
    watchdog ends it if the agent does not, whatever its job or GPU say; a pod whose sync failed is
    STOPPED instead (the disk with results/ stays). `.keep` and leases do not hold it. No deadline may lie
    past the pod's start + GPUC_MAX_LIFETIME_HOURS (default 48, the watchdog's). The pod hears the new
    one within a minute.
    """
    from gpuc.client.pods.lease import extend as extend_deadline  # lazy: see up

    seconds = parse_duration(duration) if duration is not None else None
    with ctx:
        talk(extend_deadline(pod, ctx, seconds=seconds, to=to))
