"""`gpuc up / down / ls / keep / extend`: click only, one call each. `up` turns its options into one
`UpOptions` (client/pods/upargs.py) and hands it to client/pods/up.py; with --wait it returns the job it
started, which the `gpuc` group follows (client/pods/jobline.py says why there). `run`, the next job on a pod `up`
started, is with the job commands (client/jobs/commands.py).

Startup: `gpuc ls` loads this module; it imports survey and listing at the top, and each other command
imports its own module inside itself (down's sync gate, up's upload).
"""

from __future__ import annotations

from typing import Any

import click

from gpuc.client.context import Ctx, pass_ctx, talk
from gpuc.client.exits import EXIT_CODES_HELP
from gpuc.client.pods import survey
from gpuc.client.pods.jobline import JobToFollow, UpCommand
from gpuc.client.pods.listing import ls_lines
from gpuc.core.clock import parse_duration
from gpuc.core.termsafe import clean_line


@click.command(cls=UpCommand, context_settings={"ignore_unknown_options": False}, epilog=EXIT_CODES_HELP)
@click.argument("experiment", required=False)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--provider", "-p", default=None, help="local (default), runpod or vast.")
@click.option(
    "--gpu",
    default="RTX 4090",
    show_default=True,
    help='GPU to rent: "4090", "H100 SXM", "A100 PCIe" or the provider\'s own name; an ambiguous one lists '
    "the choices.",
)
@click.option("--gpus", "gpu_count", default=1, show_default=True, type=click.IntRange(1, 8))
@click.option(
    "--price", "price_per_hour", type=float, default=None, help="Price per hour, when the offer does not say."
)
@click.option(
    "--max-hours",
    default=None,
    help="The pod's deadline from its start: hours (a bare number: 0.5) or a duration (30m, 2h; default "
    "GPUC_MAX_HOURS, 12): then its agent syncs "
    "results/ and destroys it, and the watchdog ends it if the agent does not, whatever its job, GPU or ssh; "
    "a pod whose sync failed is STOPPED instead (the disk with results/ stays). At most "
    "GPUC_MAX_LIFETIME_HOURS (48); `gpuc extend` moves it. No provider-side limit is counted on.",
)
@click.option("--interruptible", is_flag=True, help="Rent interruptible (spot) with --bid.")
@click.option("--bid", type=float, default=None, help="Bid per GPU-hour for an interruptible pod.")
@click.option(
    "--recover",
    type=click.IntRange(0, 20),
    default=0,
    metavar="N",
    help="With --interruptible on Vast: after an outbid, re-rent and resume from the last push up to N times "
    "inside the run's one money envelope; 0 (default): no recovery, an outbid pod is destroyed after "
    "GPUC_PAUSED_LIMIT_S. Needs GPUC_RESULTS_BUCKET (s3://): gpuc and your code are kept there for the new pod.",
)
@click.option(
    "--recover-on-demand",
    is_flag=True,
    help="With --recover: the last recovery rents on-demand if the run's envelope still holds it.",
)
@click.option("--offer", "offer_id", default=None, help="Rent exactly this offer id (see gpuc offers).")
@click.option("--image", default=None, help="Container image.")
@click.option(
    "--volume-gb",
    type=click.IntRange(0, 10_000),
    default=None,
    metavar="GB",
    help="The pod's persistent volume, /workspace (your code, results/), in GB [30]. RunPod takes 10 or more.",
)
@click.option(
    "--wait", is_flag=True, help="With a command: stream its output, wait for its end, exit with its exit code."
)
@click.option("--timeout", default=None, help="With --wait: stop waiting after this long (30m, 2h); the job goes on.")
@click.option(
    "--no-upload", is_flag=True, help="Do not upload this folder (the code comes from GPUC_GIT_REMOTE's clone)."
)
@click.option(
    "--env",
    "env_names",
    multiple=True,
    metavar="NAME",
    help="Give the job this variable from your environment or .env (repeatable; a name only, never NAME=value: "
    "the value goes in the pod's mode-600 secrets file, never in argv, output or the provider's pod settings).",
)
@click.option(
    "--warm",
    default=None,
    metavar="DURATION",
    help="Keep the pod between jobs (30m): a job's end syncs results/ and notifies but does not destroy; "
    "`gpuc run POD --sync --wait -- CMD` runs the next job on it (results/ carries over: `gpuc run --clean` "
    "starts empty); idle (no job, no ssh, GPU idle) this long, it syncs and ends itself. Without --max-hours its "
    "deadline is GPUC_WARM_JOB_HOURS (1) plus the warm time after its start, then after each `gpuc run`'s "
    "start: the budget holds that much for it. `gpuc down POD` ends it.",
)
@click.option("-y", "--yes", is_flag=True, help="Create without asking (the price is still printed).")
@click.option(
    "--over-budget",
    is_flag=True,
    help="Rent even if the pod's worst case (price x --max-hours) would cross GPUC_MONTHLY_BUDGET or "
    "GPUC_EXPERIMENT_BUDGET.",
)
@click.option("--note", default=None, help="A note for the run's ledger row (later: gpuc ledger note RUN TEXT).")
@click.option("--dry-run", is_flag=True, help="Print each step; create nothing.")
@pass_ctx
def up(ctx: Ctx, /, **given: Any) -> JobToFollow | None:
    """Start a pod for EXPERIMENT; with `-- COMMAND`, run it under the wrapper.

    Before anything is rented, `up` checks the keys, the .env mode, the ssh key and that a rented pod can
    reach the watchdog and that its results destination takes a write and a list (a probe, removed), what
    the provider would refuse (RunPod: a volume under 10 GB, more GPUs than its largest pod; it warns when
    your ssh key is not registered there, and hands the pod the key itself), then
    prints the price and the most the pod can cost, and asks (on a terminal; -y skips the question, and it
    is never asked when stdin is not a terminal). With GPUC_MONTHLY_BUDGET
    (or GPUC_EXPERIMENT_BUDGET) set, it refuses a pod whose worst case would cross the month's budget.

    The current folder is uploaded into the pod's workspace, the job's folder (git-ignored files
    and results/ are not; --no-upload skips it). The pod is registered with the watchdog, its ledger
    row opened, the agent started first; when the command exits the pod syncs results/ and the job's
    log, notifies you and destroys itself. Without --wait, `up` returns once the job has STARTED.
    """
    # Lazy: `gpuc ls` loads this module and must not pay for up's upload or its flow.
    from gpuc.client.pods.up import up as start_pod
    from gpuc.client.pods.upargs import up_options

    opts = up_options(ctx, given, click.get_current_context().meta)
    pod = start_pod(opts, ctx)
    if pod is not None and opts.command and opts.wait:
        return JobToFollow(ctx, pod, opts.job_id, opts.follow_timeout_s)  # followed by the `gpuc` group
    return None


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
