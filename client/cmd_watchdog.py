"""`gpuc watchdog serve | reap | status` (and `deploy` for AWS)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from gpuc.client.human import span_words
from gpuc.client.state import ensure_home
from gpuc.core.clock import iso
from gpuc.core.errors import ConfigError
from gpuc.core.settings import Settings, load_settings, read_env_file
from gpuc.core.termsafe import clean_line

if TYPE_CHECKING:  # startup: the API models (pydantic) load with the first request that needs them
    from gpuc.core.api import RegisterRequest


@click.group()
def watchdog() -> None:
    """The out-of-band watchdog: heartbeat store, reaper, notifications."""


@watchdog.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Bind address (loopback by default).")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option("--reaper-period", type=float, default=None, help="Seconds between reaper passes.")
def serve(host: str, port: int, reaper_period: float | None) -> None:
    """Run the functions locally: the same handlers as on AWS, a SQLite store, the reaper on a timer.

    Prints where it listens, the reaper's period and where the admin token is kept (never the token),
    then one log line per reaper pass and per refused request.
    """
    # Lazy, in each subcommand: they all load this module (and TAB does); each loads only its own stack.
    from gpuc.functions.server import serve as run_server

    settings = load_settings()
    if reaper_period:
        # The reaper judges its own clock by its period: passes every 30 min under a 5-min setting would
        # each look like a clock jump (and hold every destroy).
        settings = settings.with_overrides(reaper_period_s=reaper_period)
    ensure_home(settings.home)  # the store and the admin token live there: one line if it cannot be used
    log_to_stderr()

    def ready(url: str) -> None:
        for line in serve_banner(settings, url, os.environ):
            click.echo(line, err=True)

    run_server(settings, host=host, port=port, reaper_interval_s=settings.reaper_period_s, on_ready=ready)
    click.echo("watchdog stopped", err=True)


def log_to_stderr() -> None:
    """The server's and the reaper's INFO lines, with a UTC timestamp; nothing else of the stdlib's."""
    formatter = logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    for name in ("gpuc.functions", "gpuc.reaper", "gpuc.notify"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        if not any(h.name == "gpuc-serve" for h in logger.handlers):  # once per process
            handler = logging.StreamHandler(sys.stderr)
            handler.set_name("gpuc-serve")
            handler.setFormatter(formatter)
            logger.addHandler(handler)


def serve_banner(settings: Settings, url: str, environ: Mapping[str, str]) -> list[str]:
    from gpuc.client.precheck import loopback_host  # lazy: only `serve` prints this (see serve)

    where = f"watchdog listening on {url}"
    if loopback_host(url):
        where += " (loopback: local pods only; rented pods need `gpuc watchdog deploy`)"
    return [
        where,
        f"reaper: a pass every {span_words(settings.reaper_period_s)}",
        f"admin token: kept in {token_source(settings, environ)}; never printed",
        "logging each reaper pass and each refused request; Ctrl-C stops it",
    ]


def token_source(settings: Settings, environ: Mapping[str, str]) -> str:
    """Where the admin token comes from, as load_settings ranks them: never the token itself."""
    if environ.get("GPUC_ADMIN_TOKEN"):
        return "the environment (GPUC_ADMIN_TOKEN)"
    if "GPUC_ADMIN_TOKEN" in read_env_file(settings.env_file):
        return f"{settings.env_file} (GPUC_ADMIN_TOKEN)"
    return f"{settings.home / 'config.json'}, mode 600"


@watchdog.command()
@click.option("--dry-run", is_flag=True, help="Print what the reaper would do; do nothing.")
@click.option("--json", "as_json", is_flag=True, help="The ReapReport as JSON.")
def reap(dry_run: bool, as_json: bool) -> None:
    """Run one reaper pass now (through the functions)."""
    from gpuc.client.functions_client import FunctionsClient  # lazy: httpx only to call the watchdog (see serve)

    with FunctionsClient(load_settings()) as client:
        report = client.reap(dry_run=dry_run)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
        return
    prefix = "dry run: " if dry_run else ""
    if report.blind:
        click.echo(f"{prefix}the reaper was BLIND this pass (a provider did not answer): no destroys")
    if not report.actions:
        click.echo(f"{prefix}nothing to do")
    for action in report.actions:
        click.echo(clean_line(f"{prefix}{action.action:8} {action.provider}/{action.pod_id}: {action.reason}"))


@watchdog.command()
@click.option("--json", "as_json", is_flag=True, help="The StatusResponse as JSON.")
def status(as_json: bool) -> None:
    """What the watchdog knows: pods, last heartbeats, the reaper's last run."""
    from gpuc.client.functions_client import FunctionsClient
    from gpuc.client.podlife import status_warnings  # lazy: httpx and the pod code (see serve)

    with FunctionsClient(load_settings()) as client:
        st = client.status()
    if as_json:
        click.echo(json.dumps(json.loads(st.model_dump_json()), indent=2))
        return
    click.echo(f"reaper last ran: {iso(st.reaper_last_run) or 'never'} (period {st.reaper_period_s:g}s)")
    for warning in status_warnings(st):
        click.echo(f"! {clean_line(warning)}", err=True)
    for pod in st.pods:  # a pod registers its own id and experiment name: its words, cleaned
        seen = f"{st.server_time - pod.last_seen:.0f}s ago" if pod.last_seen else "never"
        click.echo(clean_line(f"{pod.provider}/{pod.pod_id} {pod.experiment}: {pod.state}, last heartbeat {seen}"))


@watchdog.command()
@click.option("--dry-run", is_flag=True, help="Print what would be created; touch nothing.")
@click.option("--region", default=None, help="AWS region (default: your AWS config's).")
@click.option("--stack-name", default="gpuc-watchdog", show_default=True)
@click.option(
    "--carry/--no-carry",
    default=None,
    help="Register the pods the local watchdog watches into the new deployment (asked on a terminal; "
    "default: carry).",
)
def deploy(dry_run: bool, region: str | None, stack_name: str, carry: bool | None) -> None:
    """Deploy the watchdog to AWS (Lambda + DynamoDB + EventBridge Scheduler) and point gpuc at it.

    Pods the local watchdog (`gpuc watchdog serve`) watches are strays to a new deployment: it would warn
    about them and destroy them after the unregistered grace. Carried over, the new deployment knows
    them; they still ping the local watchdog, so keep it running until they end."""
    import boto3  # lazy: boto3 (~80 ms) and the deploy code only to deploy (see serve)

    from gpuc.functions.deploy import deploy as run_deploy
    from gpuc.functions.deploy import live_registrations, make_plan

    session = boto3.Session(region_name=region)
    if session.region_name is None:
        raise ConfigError("no AWS region", hint="pass --region eu-west-1 or set AWS_DEFAULT_REGION")
    settings = load_settings()
    plan = make_plan(settings, session.region_name, stack_name)
    prefix = "dry run: would create or update" if dry_run else "deploying"
    click.echo(f"{prefix}:")
    for line in plan.describe():
        click.echo(f"  {line}")
    live = live_registrations(settings)
    if dry_run:
        if live:
            click.echo(f"  {len(live)} pods watched by the local watchdog: carried over unless --no-carry")
        return
    if live and carry is None:
        carry = _ask_carry(len(live))
    done = run_deploy(settings, plan, session=session, echo=click.echo)
    click.echo(f"ingest URL: {done.url}")
    click.echo(f"saved functions_url and a new admin token in {done.config_path} (mode 600)")
    if live:
        _carry(live, carry is not False, settings.functions_url)


def _on_terminal() -> bool:
    return sys.stdin.isatty()


def _ask_carry(count: int) -> bool:
    if not _on_terminal():
        click.echo(f"{count} pods are watched by the local watchdog: carrying them over (--no-carry to not)")
        return True
    return click.confirm(
        f"{count} pods are watched by the local watchdog; the new deployment would take them for strays. "
        "Carry their registrations over?",
        default=True,
    )


def _carry(live: list[RegisterRequest], carry: bool, old_url: str) -> None:
    from gpuc.client.functions_client import FunctionsClient  # lazy: as in reap
    from gpuc.functions.deploy import carry_registrations

    if not carry:
        click.echo(
            f"not carried: {len(live)} pods stay with the local watchdog; the new deployment warns about them, "
            "then destroys them after the unregistered grace (register them, or end them first)",
            err=True,
        )
        return
    with FunctionsClient(load_settings()) as client:  # the new URL and admin token, just saved
        carried, failed = carry_registrations(live, client.register)
    click.echo(f"carried {len(carried)} registrations over: {', '.join(carried) or '-'}")
    for pod_id, why in failed:
        click.echo(f"! could not carry {pod_id}: {why}", err=True)
    if carried:
        click.echo(
            f"they still send heartbeats to {old_url}: keep `gpuc watchdog serve` running until they end "
            "(the new deployment alerts on their silence, it does not destroy them for it)"
        )
