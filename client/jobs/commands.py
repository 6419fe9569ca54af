"""`gpuc up`, `gpuc run`, `gpuc logs`, `gpuc results` and `gpuc cp`: click only, one call each. `up` and `run`
start a job and, with --wait, follow it (client/jobs/wait.py); the pods they make are client/pods' work."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx, talk
from gpuc.client.exits import EXIT_CODES_HELP
from gpuc.core.clock import parse_duration
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


NO_NAME = "gpuc_up_no_name"
DASHES = "gpuc_up_dashes"


class _JobCommand(click.Command):
    """A command that runs a job (`up`, `run`): an option of the job typed without `--` before it (`gpuc up
    exp python train.py --lr 3e-4`) is click's "No such option"; said with the line that was meant."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if "--" in given or exc.option_name not in given:
                raise
            meant = self._meant(ctx, given, given.index(exc.option_name))
            raise click.NoSuchOption(
                exc.option_name,
                message=f"No such option: {exc.option_name} (the job's options go after `--`: {meant})",
                ctx=ctx,
            ) from None

    def _meant(self, ctx: click.Context, args: list[str], cut: int) -> str:
        """The line with `--` where it belongs: gpuc's options and the name, then the job's words."""
        before, _rest, _order = self.make_parser(ctx).parse_args(args=list(args[:cut]))
        first = next(p.name for p in self.params if isinstance(p, click.Argument))
        name = before.get(first)
        words = [str(w) for w in before.get("command") or ()]
        from gpuc.client.onpod.script import is_runner  # only on this error

        options = list(args[:cut])
        for word in ([name] if isinstance(name, str) else []) + words:
            options.remove(word)
        if isinstance(name, str) and is_runner(name) and self.name == "up":  # `gpuc up python train.py --lr 3`
            words, name = [name, *words], "NAME"
        head = [*ctx.command_path.split(), *([name] if isinstance(name, str) else []), *options]
        return f"{shlex.join(head)} -- {shlex.join([*words, *args[cut:]])}"


class _UpCommand(_JobCommand):
    """`gpuc up -- python train.py`: click would take "python" for the experiment's name. Noted here, where
    the raw arguments are still seen: EXPERIMENT is None then, and the command keeps its first word. Whether
    `--` was typed at all is noted too: `gpuc up python train.py` is refused (script.check_dashes)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[DASHES] = "--" in args
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
    recover: int,
    recover_on_demand: bool,
    offer_id: str | None,
    image: str | None,
    volume_gb: int | None,
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
    # Lazy, in each command here: `gpuc ls` loads this module and must not pay for up's upload or waiting.
    from gpuc.client.jobs import wait as jobwait
    from gpuc.client.onpod import upload
    from gpuc.client.onpod.script import check_dashes
    from gpuc.client.pods import plan
    from gpuc.client.pods.up import up as start_pod
    from gpuc.core.ledger.rows import check_note

    settings = ctx.settings
    meta = click.get_current_context().meta
    if experiment is not None:  # before the folder's name is taken: a slip is said as typed
        check_dashes(experiment, list(command), dashes=bool(meta.get(DASHES)))
    if meta.get(NO_NAME) and experiment is not None:
        command = (experiment, *command)  # `up -- python train.py`: "python" is the command's, not a name
        experiment = _folder_name(ctx)
    plan.check_experiment(experiment)
    assert experiment is not None
    timeout_s = jobwait.check_wait_options(wait, timeout, command)
    if interruptible and bid is None and provider not in (None, "local"):
        raise ConfigError("--interruptible needs --bid", hint="see `gpuc offers --interruptible` for min bids")
    warm_s = parse_duration(warm) if warm is not None else 0.0
    if warm_s and max_hours is None:  # a warm pod's deadline follows its jobs (client/pods/warm.py)
        from gpuc.client.pods.warm import deadline_hours

        hours, warm_job_s = deadline_hours(settings, warm_s), settings.warm_job_hours * 3600
    else:
        hours = plan.parse_max_hours(max_hours) if max_hours is not None else settings.max_hours
        warm_job_s = 0.0
    opts = plan.UpOptions(
        experiment=experiment,
        provider=provider or settings.provider,
        gpu=gpu,
        gpu_count=gpu_count,
        price_per_hour=price,
        max_hours=hours,
        interruptible=interruptible,
        bid=bid,
        offer_id=offer_id,
        image=image,
        volume_gb=volume_gb,
        command=list(command),
        dry_run=dry_run,
        # Measured before anything is rented: an oversized project is refused at no cost.
        upload=None
        if no_upload
        else upload.prepare(Path.cwd(), settings.upload_max_mb, settings.home, settings.named_secrets()),
        job_id=jobwait.new_job_id() if command else None,
        warm_s=warm_s,
        warm_job_s=warm_job_s,
        confirm=None if yes or not ctx.on_terminal() else _ask,
        over_budget=over_budget,
        note=None if note is None else check_note(note),  # refused before anything is rented
        env_names=env_names,
        recover=recover,
        recover_on_demand=recover_on_demand,
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
    return click.confirm(question, default=True, err=True)


@click.command(cls=_JobCommand, epilog=EXIT_CODES_HELP)
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
) -> None:
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
        jobwait.wait_and_exit(ctx, started, job_id=job_id, timeout_s=timeout_s)
