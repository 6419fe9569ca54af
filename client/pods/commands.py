"""`gpuc up / run / down / ls / keep / extend`: click only, one call each.

Startup: `gpuc ls` loads this module; it imports survey and listing at the top, and each other command
imports its own module inside itself (up's provisioning, run's ask, down's sync gate).
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx
from gpuc.client.exits import EXIT_CODES_HELP
from gpuc.client.pods import survey
from gpuc.client.pods.listing import ls_lines
from gpuc.core.clock import parse_duration
from gpuc.core.errors import ConfigError
from gpuc.core.termsafe import clean_line

NO_NAME = "gpuc_up_no_name"


class _UpCommand(click.Command):
    """`gpuc up -- python train.py`: click would take "python" for the experiment's name. Noted here, where
    the raw arguments are still seen: EXPERIMENT is None then, and the command keeps its first word."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            # The parser alone (no callbacks, no conversion) on what comes before `--`: a name there, or none.
            before, _rest, _order = self.make_parser(ctx).parse_args(args=args[: args.index("--")])
            ctx.meta[NO_NAME] = not isinstance(before.get("experiment"), str)  # click 8.2+: UNSET, not None
        return super().parse_args(ctx, args)


@click.command(cls=_UpCommand, context_settings={"ignore_unknown_options": False}, epilog=EXIT_CODES_HELP)
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
@click.option("--price", type=float, default=None, help="Price per hour, when the offer does not say.")
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
@click.option("--offer", "offer_id", default=None, help="Rent exactly this offer id (see gpuc offers).")
@click.option("--image", default=None, help="Container image.")
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
    "`gpuc run POD --sync --wait -- CMD` reruns on it; idle (no job, no ssh, GPU idle) this long, it syncs "
    "and ends itself. The deadline and the budget hold as always; `gpuc down POD` ends it.",
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
def up(
    ctx: Ctx,
    experiment: str | None,
    command: tuple[str, ...],
    provider: str | None,
    gpu: str,
    gpu_count: int,
    price: float | None,
    max_hours: str | None,
    interruptible: bool,
    bid: float | None,
    offer_id: str | None,
    image: str | None,
    wait: bool,
    timeout: str | None,
    no_upload: bool,
    env_names: tuple[str, ...],
    warm: str | None,
    yes: bool,
    over_budget: bool,
    note: str | None,
    dry_run: bool,
) -> None:
    """Start a pod for EXPERIMENT; with `-- COMMAND`, run it under the wrapper.

    Before anything is rented, `up` checks the keys, the .env mode, the ssh key and that a rented pod can
    reach the watchdog and that its results destination takes a write and a list (a probe, removed), then
    prints the price and the most the pod can cost, and asks (on a terminal; -y skips the question, and it
    is never asked when stdin is not a terminal). With GPUC_MONTHLY_BUDGET
    (or GPUC_EXPERIMENT_BUDGET) set, it refuses a pod whose worst case would cross the month's budget.

    The current folder is uploaded into the pod's workspace, the job's folder (git-ignored files
    and results/ are not; --no-upload skips it). The pod is registered with the watchdog, its ledger
    row opened, the agent started first; when the command exits the pod syncs results/ and the job's
    log, notifies you and destroys itself. Without --wait, `up` returns once the job has STARTED.
    """
    # Lazy, in each command here: `gpuc ls` loads this module and must not pay for up's upload or waiting.
    from gpuc.client.jobs import wait as jobwait
    from gpuc.client.onpod import upload
    from gpuc.client.pods import plan
    from gpuc.client.pods.up import up as start_pod
    from gpuc.core.ledger import check_note

    settings = ctx.settings
    if click.get_current_context().meta.get(NO_NAME) and experiment is not None:
        command = (experiment, *command)  # `up -- python train.py`: "python" is the command's, not a name
        experiment = _folder_name(ctx)
    plan.check_experiment(experiment)
    assert experiment is not None
    timeout_s = jobwait.check_wait_options(wait, timeout, command)
    if interruptible and bid is None and provider not in (None, "local"):
        raise ConfigError(
            "--interruptible needs --bid", hint="see `gpuc offers --interruptible` for min bids"
        )
    opts = plan.UpOptions(
        experiment=experiment,
        provider=provider or settings.provider,
        gpu=gpu,
        gpu_count=gpu_count,
        price_per_hour=price,
        max_hours=plan.parse_max_hours(max_hours) if max_hours is not None else settings.max_hours,
        interruptible=interruptible,
        bid=bid,
        offer_id=offer_id,
        image=image,
        command=list(command),
        dry_run=dry_run,
        # Measured before anything is rented: an oversized project is refused at no cost.
        upload=None
        if no_upload
        else upload.prepare(Path.cwd(), settings.upload_max_mb, settings.home, settings.named_secrets()),
        job_id=jobwait.new_job_id() if command else None,
        warm_s=parse_duration(warm) if warm is not None else 0.0,
        confirm=None if yes or not ctx.on_terminal() else _ask,
        over_budget=over_budget,
        note=None if note is None else check_note(note),  # refused before anything is rented
        env_names=env_names,
    )
    pod = start_pod(opts, ctx)
    if pod is not None and command and wait:
        jobwait.wait_and_exit(ctx, pod, job_id=opts.job_id, timeout_s=timeout_s)


def _folder_name(ctx: Ctx) -> str:
    """No name given: the project folder's, said, when it is a valid one; else the name is required."""
    from gpuc.core.models import EXPERIMENT_RE  # pydantic: `up` loads it anyway

    folder = Path.cwd().name
    if not EXPERIMENT_RE.match(folder):
        raise ConfigError(
            "an experiment name is required (this folder's name is not a valid one)",
            hint="name it before the `--`: gpuc up NAME -- python train.py",
        )
    ctx.echo(f"no experiment name given: using this folder's, {folder} (gpuc up NAME -- ... names it)")
    return folder


def _ask(question: str) -> bool:
    return click.confirm(question, default=True)


@click.command(epilog=EXIT_CODES_HELP)
@click.argument("pod")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--force",
    is_flag=True,
    help="Start it even while POD runs a job (the first of the two to exit destroys the pod under the other).",
)
@click.option(
    "--wait", is_flag=True, help="Stream the job's output, wait for its end, exit with its exit code."
)
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
    dry_run: bool,
) -> None:
    """Run COMMAND on POD under the wrapper: on exit, sync → notify → destroy (a pod started with --warm is
    kept, still warm, for the next `gpuc run POD --sync --wait -- CMD`).

    Refused while POD still runs a job (checked on the pod): its exit would destroy the pod under that job,
    and when what COMMAND runs (its script) is not on the pod. Without --wait, `run` returns once the job
    has STARTED. With --sync the folder is checked here, before the pod is touched, and uploaded over the
    pod's workspace (changed files replaced; files deleted here stay there; results/ is never touched).
    """
    from gpuc.client.jobs import wait as jobwait  # lazy: see up
    from gpuc.client.onpod import upload
    from gpuc.client.pods.run import job_variables, run_job

    timeout_s = jobwait.check_wait_options(wait, timeout, command)
    bundle = (
        upload.prepare(Path.cwd(), ctx.settings.upload_max_mb, ctx.settings.home, ctx.settings.named_secrets())
        if sync_code
        else None
    )
    job_env = job_variables(env_names, ctx)  # checked here, before the pod is touched
    job_id = jobwait.new_job_id()
    started = run_job(
        pod, list(command), ctx, dry_run=dry_run, force=force, job_id=job_id, bundle=bundle, job_env=job_env
    )
    if wait and not dry_run:
        jobwait.wait_and_exit(ctx, started, job_id=job_id, timeout_s=timeout_s)


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
        click.echo(keep_lease(pod, seconds, ctx, duration))


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
        click.echo(extend_deadline(pod, ctx, seconds=seconds, to=to))
