"""`gpuc doctor`: check the setup before you rent; `--install-hook` adds the pre-commit secret guard."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuc.client.cmd_balance import check_balances, configured_remote_providers, provider_factories
from gpuc.client.doctor import DoctorDeps, install_hook, render, run_checks, run_git
from gpuc.core.api import StatusResponse
from gpuc.core.settings import Settings, load_settings


def default_deps(settings: Settings, repo: Path) -> DoctorDeps:
    def status() -> StatusResponse:
        from gpuc.client.functions_client import FunctionsClient

        return FunctionsClient(settings).status()

    remote = tuple(configured_remote_providers(settings))
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
def doctor(repo: Path | None, install_hook_flag: bool, as_json: bool) -> None:
    """Check the setup before you rent: each check passes (✓) or fails (✗) with its fix.

    Checks: .env exists, has mode 600 and is git-ignored; provider keys and the watchdog admin token
    are present (never printed); each provider balance is within the cap and above the low mark;
    the watchdog answers and its reaper ran within two periods; the experiment repo (--repo, or
    the current directory) has gpuc's pre-commit secret guard, which refuses commits holding
    hf_/rpa_/sk- tokens, values from .env, or a .env file. Exits 1 when any check fails.

    \b
    --json fields: ok (no check failed), installed_hook (path or null),
    checks[] {name, status: ok|fail|warn, detail, fix}.
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
    passed = all(c.status != "fail" for c in checks)
    if as_json:
        body = {"ok": passed, "installed_hook": str(installed) if installed else None}
        click.echo(json.dumps({**body, "checks": [c.model_dump() for c in checks]}, indent=2))
    else:
        if installed:
            click.echo(f"installed the secret guard: {installed}")
        click.echo(render(checks))
    if not passed:
        click.get_current_context().exit(1)
