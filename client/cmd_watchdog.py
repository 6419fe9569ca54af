"""`gpuc watchdog serve | reap | status` (and `deploy` for AWS)."""

from __future__ import annotations

import json

import click

from gpuc.core.settings import load_settings


@click.group()
def watchdog() -> None:
    """The out-of-band watchdog: heartbeat store, reaper, notifications."""


@watchdog.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default).")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option("--reaper-period", type=float, default=None, help="Seconds between reaper passes.")
def serve(host: str, port: int, reaper_period: float | None) -> None:
    """Run the functions locally: the same handlers as on AWS, a SQLite store, the reaper on a timer."""
    from gpuc.functions.server import serve as run_server

    settings = load_settings()
    run_server(settings, host=host, port=port, reaper_interval_s=reaper_period or settings.reaper_period_s)


@watchdog.command()
@click.option("--dry-run", is_flag=True, help="Print what the reaper would do; do nothing.")
@click.option("--json", "as_json", is_flag=True, help="The ReapReport as JSON.")
def reap(dry_run: bool, as_json: bool) -> None:
    """Run one reaper pass now (through the functions)."""
    from gpuc.client.functions_client import FunctionsClient

    report = FunctionsClient(load_settings()).reap(dry_run=dry_run)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return
    prefix = "dry run: " if dry_run else ""
    if report.blind:
        click.echo(f"{prefix}the reaper was BLIND this pass (a provider did not answer): no destroys")
    if not report.actions:
        click.echo(f"{prefix}nothing to do")
    for action in report.actions:
        click.echo(f"{prefix}{action.action:8} {action.provider}/{action.pod_id}: {action.reason}")


@watchdog.command()
@click.option("--json", "as_json", is_flag=True, help="The StatusResponse as JSON.")
def status(as_json: bool) -> None:
    """What the watchdog knows: pods, last heartbeats, the reaper's last run."""
    from gpuc.client.functions_client import FunctionsClient
    from gpuc.client.podlife import reaper_warnings
    from gpuc.core.clock import iso

    st = FunctionsClient(load_settings()).status()
    if as_json:
        click.echo(json.dumps(json.loads(st.model_dump_json()), indent=2))
        return
    click.echo(f"reaper last ran: {iso(st.reaper_last_run) or 'never'} (period {st.reaper_period_s:g}s)")
    for warning in reaper_warnings(st.reaper_last_run, st.reaper_period_s, st.server_time):
        click.echo(f"! {warning}", err=True)
    for pod in st.pods:
        seen = f"{st.server_time - pod.last_seen:.0f}s ago" if pod.last_seen else "never"
        click.echo(f"{pod.provider}/{pod.pod_id} {pod.experiment}: {pod.state}, last heartbeat {seen}")


@watchdog.command()
@click.option("--dry-run", is_flag=True, help="Print what would be created; touch nothing.")
@click.option("--region", default=None, help="AWS region (default: your AWS config's).")
@click.option("--stack-name", default="gpuc-watchdog", show_default=True)
def deploy(dry_run: bool, region: str | None, stack_name: str) -> None:
    """Deploy the watchdog to AWS (Lambda + DynamoDB + EventBridge Scheduler) and point gpuc at it."""
    import boto3

    from gpuc.core.errors import ConfigError
    from gpuc.functions.deploy import deploy as run_deploy
    from gpuc.functions.deploy import make_plan

    session = boto3.Session(region_name=region)
    if session.region_name is None:
        raise ConfigError("no AWS region", hint="pass --region eu-west-1 or set AWS_DEFAULT_REGION")
    settings = load_settings()
    plan = make_plan(settings, session.region_name, stack_name)
    prefix = "dry run: would create or update" if dry_run else "deploying"
    click.echo(f"{prefix}:")
    for line in plan.describe():
        click.echo(f"  {line}")
    if dry_run:
        return
    done = run_deploy(settings, plan, session=session, echo=click.echo)
    click.echo(f"ingest URL: {done.url}")
    click.echo(f"saved functions_url and a new admin token in {done.config_path} (mode 600)")
