"""What the `gpuc watchdog` commands do and say: the local server's banner and log, one reaper pass, the
watchdog's status in lines, and a deploy to AWS that carries the local watchdog's pods over.

Output goes through two callables, `say` (stdout) and `warn` (stderr), which the commands give.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.text import span_words
from gpuc.core.clock import iso
from gpuc.core.envfile import read_env_file
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings, save_config
from gpuc.core.termsafe import clean_line

if TYPE_CHECKING:  # startup: the API models (pydantic) load with the first request that needs them
    from gpuc.core.api import ReapReport, RegisterRequest, StatusResponse

Say = Callable[[str], None]
Ask = Callable[[str], bool]


# -- serve ----------------------------------------------------------------------------------------------
def serve(ctx: Ctx, host: str, port: int, reaper_period: float | None, warn: Say) -> None:
    """The watchdog on this machine: the same handlers as on AWS, a SQLite store, the reaper on a timer."""
    import os

    from gpuc.client.runs import ensure_home
    from gpuc.functions.server import serve as run_server

    settings = ctx.settings
    if reaper_period:
        # The reaper judges its own clock by its period: passes every 30 min under a 5-min setting would
        # each look like a clock jump (and hold every destroy).
        settings = settings.with_overrides(reaper_period_s=reaper_period)
    ensure_home(settings.home)  # the store and the admin token live there: one line if it cannot be used
    log_to_stderr()

    def ready(url: str) -> None:
        for line in serve_banner(settings, url, os.environ):
            warn(line)

    run_server(settings, host=host, port=port, reaper_interval_s=settings.reaper_period_s, on_ready=ready)
    warn("watchdog stopped")


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
    from urllib.parse import urlsplit

    from gpuc.core.loopback import loopback_host  # lazy: only `serve` prints this (see serve)
    from gpuc.functions.server import plain_http_warning

    where = f"watchdog listening on {url}"
    parts = urlsplit(url)
    exposed = plain_http_warning(parts.hostname or "", parts.port or 0) if parts.scheme == "http" else None
    if exposed is None and loopback_host(url):  # 0.0.0.0 is every interface here, not this machine only
        where += (
            " (loopback: local pods only; for rented pods put TLS on a public name in front of it, or use "
            "`gpuc watchdog deploy`: README, Your first rental)"
        )
    return [
        where,
        *([exposed] if exposed is not None else []),
        f"reaper: a pass every {span_words(settings.reaper_period_s)}",
        f"admin token: kept in {token_source(settings, environ)}; never printed",
        laptop_url_line(settings, url),
        "logging each reaper pass and each refused request; Ctrl-C stops it",
    ]


def laptop_url_line(settings: Settings, url: str) -> str:
    """Where the laptop's gpuc must point to use this watchdog (`serve --port 9000` once said nothing,
    and `gpuc up` went on registering with the default port's, which was not there)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.hostname in ("0.0.0.0", "::", ""):  # every interface: this machine reaches it on loopback
        parts = parts._replace(netloc=f"127.0.0.1:{parts.port}")
    here = urlunsplit(parts).rstrip("/")
    if settings.watchdog_url.rstrip("/") == here:
        return f"this machine's gpuc already points here (GPUC_WATCHDOG_URL={here})"
    return (
        f"this machine's gpuc points at {settings.watchdog_url}, not here: to use this watchdog add "
        f"GPUC_WATCHDOG_URL={here} to {settings.env_file}"
    )


def token_source(settings: Settings, environ: Mapping[str, str]) -> str:
    """Where the admin token comes from, as load_settings ranks them: never the token itself."""
    if environ.get("GPUC_ADMIN_TOKEN"):
        return "the environment (GPUC_ADMIN_TOKEN)"
    if "GPUC_ADMIN_TOKEN" in read_env_file(settings.env_file):
        return f"{settings.env_file} (GPUC_ADMIN_TOKEN)"
    return f"{settings.home / 'config.json'}, mode 600"


# -- reap and status ---------------------------------------------------------------------------------------
def reap_lines(report: ReapReport, dry_run: bool) -> list[str]:
    prefix = "dry run: " if dry_run else ""
    lines = [f"{prefix}the reaper was BLIND this pass (a provider did not answer): no destroys"] if report.blind else []
    if not report.actions:
        lines.append(f"{prefix}nothing to do")
    lines += [clean_line(f"{prefix}{a.action:8} {a.provider}/{a.pod_id}: {a.reason}") for a in report.actions]
    return lines


def status_lines(st: StatusResponse) -> tuple[list[str], list[str]]:
    """(the lines, the warnings): the reaper's last run, each pod's state and last heartbeat."""
    from gpuc.client.pods.survey import status_warnings

    lines = [f"reaper last ran: {iso(st.reaper_last_run) or 'never'} (period {st.reaper_period_s:g}s)"]
    for pod in st.pods:  # a pod registers its own id and experiment name: its words, cleaned
        seen = f"{st.server_time - pod.last_seen:.0f}s ago" if pod.last_seen else "never"
        lines.append(clean_line(f"{pod.provider}/{pod.pod_id} {pod.experiment}: {pod.state}, last heartbeat {seen}"))
    return lines, [f"! {clean_line(w)}" for w in status_warnings(st)]


# -- deploy ------------------------------------------------------------------------------------------------
def deploy(
    ctx: Ctx,
    dry_run: bool,
    region: str | None,
    stack_name: str,
    carry: bool | None,
    *,
    say: Say,
    warn: Say,
    ask: Ask,
    reaper_every_s: float = 300.0,
    emulated: tuple[str, ...] = (),
    rotate_key: bool = False,
) -> None:
    """Deploy to AWS (Lambda + DynamoDB + EventBridge Scheduler), save its URL and a new admin token, and
    carry the local watchdog's pods over (asked on a terminal when --carry/--no-carry is not given)."""
    import boto3  # lazy: boto3 (~80 ms) and the deploy code only to deploy

    from gpuc.functions.deploy import deploy as run_deploy
    from gpuc.functions.deploy import live_registrations
    from gpuc.functions.deployplan import make_plan

    session = boto3.Session(region_name=region)
    if session.region_name is None:
        raise ConfigError("no AWS region", hint="pass --region eu-west-1 or set AWS_DEFAULT_REGION")
    settings = ctx.settings
    plan = make_plan(settings, session.region_name, stack_name, reaper_every_s=reaper_every_s, emulated=emulated)
    plan.rotate_key = rotate_key
    say(f"{'dry run: would create or update' if dry_run else 'deploying'}:")
    for line in plan.describe():
        say(f"  {line}")
    live = live_registrations(settings)
    if dry_run:
        if live:
            say(f"  {len(live)} pods watched by the local watchdog: carried over unless --no-carry")
        return
    if live and carry is None:
        carry = ask_carry(ctx, len(live), say, ask)
    if live and carry is not False:
        plan.carried = [r.pod_id for r in live]  # owned by the new watchdog though marked for this one
    done = run_deploy(settings, plan, session=session, echo=say)
    say(f"ingest URL: {done.url}")
    say(f"saved its URL (watchdog_url) and a new admin token in {done.config_path} (mode 600)")
    if live:
        ctx.settings = load_settings()  # the new URL and admin token, just saved
        carry_over(ctx, live, carry is not False, settings.watchdog_url, say=say, warn=warn)


def remove(ctx: Ctx, region: str | None, stack_name: str, force: bool, *, say: Say) -> None:
    """Remove a deployed watchdog, refusing while it watches pods: after it, nothing out of band ends them."""
    import boto3  # lazy: as in deploy

    from gpuc.functions.deploy import remove as remove_stack

    session = boto3.Session(region_name=region)
    if session.region_name is None:
        raise ConfigError("no AWS region", hint="pass --region eu-west-1 or set AWS_DEFAULT_REGION")
    if not force:
        refuse_while_watching(ctx)
    remove_stack(session, session.region_name, stack_name, echo=say)
    path = save_config(ctx.settings.home, forget=("watchdog_url", "admin_token"))
    say(f"forgot its URL and admin token in {path}: `gpuc watchdog serve` or a new deploy gives gpuc a watchdog again")


def refuse_while_watching(ctx: Ctx) -> None:
    try:
        status = ctx.watchdog.status()
    except GpucError as exc:
        raise ConfigError(
            f"cannot tell whether the watchdog still watches pods ({exc.message})",
            hint="check with `gpuc watchdog status`; --force removes it anyway",
        ) from None
    watched = [p for p in status.pods if p.state not in ("destroyed", "ended")]
    if watched:
        names = ", ".join(f"{p.pod_id} ({p.experiment})" for p in watched[:5])
        raise ConfigError(
            f"the watchdog still watches {len(watched)} pod(s): {names}; removed, nothing would end them out of band",
            hint="end them first (`gpuc down POD`), or --force to remove it anyway",
        )


def ask_carry(ctx: Ctx, count: int, say: Say, ask: Ask) -> bool:
    if not ctx.on_terminal():
        say(f"{count} pods are watched by the local watchdog: carrying them over (--no-carry to not)")
        return True
    return ask(
        f"{count} pods are watched by the local watchdog; the new deployment would leave them to it (pods "
        "started before watchdog marks: take them for strays). Carry their registrations over?"
    )


def carry_over(ctx: Ctx, live: list[RegisterRequest], carry: bool, old_url: str, *, say: Say, warn: Say) -> None:
    from gpuc.functions.deploy import carry_registrations

    if not carry:
        warn(
            f"not carried: {len(live)} pods stay with the local watchdog: keep `gpuc watchdog serve` running until "
            "they end. The new deployment leaves the ones marked for it alone (an alert a day); pods started "
            "before watchdog marks it warns about, then destroys after the unregistered grace"
        )
        return
    with ctx:
        carried, failed = carry_registrations(live, ctx.watchdog.register)
    say(f"carried {len(carried)} registrations over: {', '.join(carried) or '-'}")
    for pod_id, why in failed:
        warn(f"! could not carry {pod_id}: {why}")
    if carried:
        say(
            f"they still send heartbeats to {old_url}: keep `gpuc watchdog serve` running until they end "
            "(the new deployment alerts on their silence, it does not destroy them for it)"
        )
