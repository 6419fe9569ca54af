"""`gpuc watchdog serve | reap | status | resume | deploy` and `gpuc notify --test`: click only, one call each.

Startup: every TAB loads this module; each command loads its own stack (the server, httpx, boto3)."""

from __future__ import annotations

import json

import click

from gpuc.client.context import Ctx, pass_ctx, talk


def _warn(text: str) -> None:
    click.echo(text, err=True)


@click.group()
def watchdog() -> None:
    """The out-of-band watchdog: heartbeat store, reaper, notifications."""


@watchdog.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default).")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option("--reaper-period", type=float, default=None, help="Seconds between reaper passes.")
@pass_ctx
def serve(ctx: Ctx, host: str, port: int, reaper_period: float | None) -> None:
    """Run the watchdog here: the same handlers as on AWS, a SQLite store, the reaper on a timer.

    Prints where it listens, the reaper's period and where the admin token is kept (never the token),
    then one log line per reaper pass and per refused request.
    """
    from gpuc.client.watchdog import admin

    admin.serve(ctx, host, port, reaper_period, warn=_warn)


@watchdog.command()
@click.option("--dry-run", is_flag=True, help="Print what the reaper would do; do nothing.")
@click.option("--json", "as_json", is_flag=True, help="The ReapReport as JSON.")
@pass_ctx
def reap(ctx: Ctx, dry_run: bool, as_json: bool) -> None:
    """Run one reaper pass now (through the watchdog)."""
    from gpuc.client.watchdog.admin import reap_lines

    with ctx:
        report = ctx.watchdog.reap(dry_run=dry_run)
    click.echo(report.model_dump_json(indent=2) if as_json else "\n".join(reap_lines(report, dry_run)))


@watchdog.command()
@click.option("--json", "as_json", is_flag=True, help="The StatusResponse as JSON.")
@pass_ctx
def status(ctx: Ctx, as_json: bool) -> None:
    """What the watchdog knows: pods, last heartbeats, the reaper's last run."""
    from gpuc.client.watchdog.admin import status_lines

    with ctx:
        st = ctx.watchdog.status()
    if as_json:
        click.echo(json.dumps(json.loads(st.model_dump_json()), indent=2))
        return
    lines, warnings = status_lines(st)
    click.echo(lines[0])
    for warning in warnings:
        _warn(warning)
    for line in lines[1:]:
        click.echo(line)


@watchdog.command()
@pass_ctx
def resume(ctx: Ctx) -> None:
    """Let `gpuc up` start pods again after "pause new pods" from the phone (running pods are untouched)."""
    with ctx:
        answer = ctx.watchdog.resume()
    if answer.resumed:
        talk("new pods resumed: `gpuc up` may start pods again")
    else:
        talk("new pods were not paused: nothing to resume")


@watchdog.command()
@click.option("--dry-run", is_flag=True, help="Print what would be created; touch nothing.")
@click.option("--region", default=None, help="AWS region (default: your AWS config's).")
@click.option("--stack-name", default="gpuc-watchdog", show_default=True)
@click.option(
    "--carry/--no-carry",
    default=None,
    help="Register the pods the local watchdog watches into the new deployment (asked on a terminal; default: carry).",
)
@click.option(
    "--reaper-every",
    default="5m",
    show_default=True,
    help="How often the reaper runs: whole minutes (1m ... ). Sooner ends a silent pod sooner, for more "
    "Lambda invocations (a pod's worst case adds one period).",
)
@click.option("--emulated", multiple=True, hidden=True, help="Tests: NAME=VALUE for an emulated deployment.")
@click.option(
    "--rotate-key",
    is_flag=True,
    help="Give the watchdog a new key (a new watchdog): pods it knows keep pinging, but a lost store can no "
    "longer recognise them by their claims.",
)
@pass_ctx
def deploy(
    ctx: Ctx,
    dry_run: bool,
    region: str | None,
    stack_name: str,
    carry: bool | None,
    reaper_every: str,
    emulated: tuple[str, ...],
    rotate_key: bool,
) -> None:
    """Deploy the watchdog to AWS (Lambda + DynamoDB + EventBridge Scheduler) and point gpuc at it.

    Pods the local watchdog (`gpuc watchdog serve`) started carry its mark: a new deployment leaves them
    alone and says so once a day. Carried over, the new deployment owns them (their ids go into its config:
    no provider re-marks a running pod); they still ping the local watchdog, so keep it running until they
    end. A redeploy keeps the watchdog's key; --rotate-key makes a new one (a new watchdog)."""
    from gpuc.client.watchdog import admin

    def ask(question: str) -> bool:
        return click.confirm(question, default=True, err=True)

    from gpuc.core.clock import parse_duration

    every_s = parse_duration(reaper_every)
    admin.deploy(
        ctx,
        dry_run,
        region,
        stack_name,
        carry,
        say=talk,
        warn=_warn,
        ask=ask,
        reaper_every_s=every_s,
        emulated=emulated,
        rotate_key=rotate_key,
    )


@watchdog.command()
@click.option("--region", default=None, help="AWS region (default: your AWS config's).")
@click.option("--stack-name", default="gpuc-watchdog", show_default=True)
@click.option("--force", is_flag=True, help="Remove it even while it watches pods (they lose the out-of-band layer).")
@pass_ctx
def remove(ctx: Ctx, region: str | None, stack_name: str, force: bool) -> None:
    """Remove the deployed watchdog: its stack, its SecureStrings and its code zips. Refused while it watches
    a pod, since nothing out of band would end that pod afterwards."""
    from gpuc.client.watchdog import admin

    admin.remove(ctx, region, stack_name, force, say=talk)


@click.command("notify")
@click.option("--test", "test", is_flag=True, required=True, help="Send one test message through every route.")
@pass_ctx
def notify(ctx: Ctx, test: bool) -> None:
    """Send one test message through each channel of GPUC_NOTIFY_URLS (from here) and one through the
    watchdog, and say which each service accepted. Exits 1 when any route did not.

    "Accepted" is what a service answers; whether the phone shows it only the phone can tell. The
    watchdog's line also says whether it holds the channels set here (a channel added after it started
    must reach it, or be reported)."""
    from gpuc.functions.channels import send_test  # startup: this command only

    with ctx:
        results = send_test(
            ctx.settings,
            watchdog_notify=ctx.watchdog.notify,
            watchdog_status=ctx.watchdog.status,
            now=ctx.clock.now(),
        )
    for result in results:
        click.echo(f"{'✓' if result.arrived else '✗'} {result.route}: {result.detail}")
    if not all(result.arrived for result in results):
        click.get_current_context().exit(1)
