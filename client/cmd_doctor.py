"""`gpuc doctor`: check the setup before you rent; `--install-hook` adds the pre-commit secret guard."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuc.client.cmd_balance import check_balances, provider_factories
from gpuc.client.doctor import DoctorDeps, install_hook, render, run_checks, run_git
from gpuc.client.live import LiveReport, configured_factories, live_report, ssh_probe
from gpuc.client.live import render as render_facts
from gpuc.core.api import StatusResponse
from gpuc.core.providers.registry import keyed_providers
from gpuc.core.settings import Settings, load_settings


def live_checks(settings: Settings) -> LiveReport:
    return live_report(configured_factories(settings), ssh_probe(settings))


def default_deps(settings: Settings, repo: Path) -> DoctorDeps:
    def status() -> StatusResponse:
        # Lazy: `gpuc doctor --help` and every TAB load this module; httpx (~50 ms) loads only to ask.
        from gpuc.client.functions_client import FunctionsClient

        return FunctionsClient(settings).status()

    remote = tuple(keyed_providers(settings))
    return DoctorDeps(
        settings=settings,
        repo=repo,
        git=run_git,
        status=status,
        balances=lambda: check_balances(settings, provider_factories(settings, remote)),
    )


@click.command("doctor")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None, help="[current dir]")
@click.option(
    "--install-hook",
    "install_hook_flag",
    is_flag=True,
    help="Install the pre-commit secret guard in the repo first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON (fields below).")
@click.option(
    "--live",
    is_flag=True,
    help="Also read each configured provider account (reads only, never writes) and settle unconfirmed facts.",
)
def doctor(repo: Path | None, install_hook_flag: bool, as_json: bool, live: bool) -> None:
    """Check the setup before you rent: each check passes (✓) or fails (✗) with its fix.

    Checks: .env exists, has mode 600 and is git-ignored; provider keys and the watchdog admin token
    are present (never printed); each provider balance is within the cap and above the low mark;
    the watchdog answers and its reaper ran within two periods; the experiment repo (--repo, or
    the current directory) has gpuc's pre-commit secret guard, which refuses commits holding
    hf_/rpa_/sk- tokens, values from .env, or a .env file. Exits 1 when any check fails.

    --live reads (never writes) each provider whose key is set: its pod list, balance and one offer
    search, the pod-scoped key's rights on a running gpuc pod (probed on the pod over ssh), and says of
    each provider fact the README lists as unconfirmed whether this account confirms or refutes it.

    \b
    --json fields: ok (no check failed), installed_hook (path or null),
    checks[] {name, status: ok|fail|warn, detail, fix}; with --live also
    facts[] {provider, fact, status: confirmed|refuted|unknown, detail}.
    """
    settings = load_settings()
    cwd = Path.cwd()
    repo = (repo or cwd).resolve()
    deps = default_deps(settings, repo)
    installed = None
    if install_hook_flag:
        env_file = settings.env_file if settings.env_file.is_absolute() else cwd / settings.env_file
        installed = install_hook(repo, env_file, deps.git)
    checks = run_checks(deps, cwd)
    report = live_checks(settings) if live else None
    if report is not None:
        checks += report.checks
    passed = all(c.status != "fail" for c in checks)
    if as_json:
        body: dict[str, object] = {"ok": passed, "installed_hook": str(installed) if installed else None}
        if report is not None:
            body["facts"] = [f.model_dump() for f in report.facts]
        click.echo(json.dumps({**body, "checks": [c.model_dump() for c in checks]}, indent=2))
    else:
        if installed:
            click.echo(f"installed the secret guard: {installed}")
        click.echo(render(checks))
        if report is not None:
            click.echo(render_facts(report))
    if not passed:
        click.get_current_context().exit(1)
