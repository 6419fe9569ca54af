"""`gpuc doctor` (check the setup before you rent; `--install-hook` adds the pre-commit secret guard): click
only, one call. `gpuc demo` and `gpuc drill` run on the test kit and live there (testkit/commands.py)."""

from __future__ import annotations

from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx


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
@pass_ctx
def doctor(ctx: Ctx, repo: Path | None, install_hook_flag: bool, as_json: bool, live: bool) -> None:
    """Check the setup before you rent: each check passes (✓) or fails (✗) with its fix.

    Checks: .env exists, has mode 600 and is git-ignored; provider keys and the watchdog admin token
    are present (never printed); each provider balance is within the cap and above the low mark;
    the watchdog answers and its reaper ran within two periods; GPUC_NOTIFY_URLS is set and the watchdog
    holds the same channels (named by number and kind, never by URL); the experiment repo (--repo, or
    the current directory) has gpuc's pre-commit secret guard, which refuses commits holding
    hf_/rpa_/sk- tokens, values from .env, or a .env file. Exits 1 when any check fails.

    --live reads (never writes) each provider whose key is set: its pod list, balance and one offer
    search, the pod-scoped key's rights on a running gpuc pod (probed on the pod over ssh), and says of
    each provider fact the README lists as unconfirmed whether this account confirms or refutes it. With
    Vast's outbid webhook set up (GPUC_VAST_WEBHOOK_SECRET, GPUC_VAST_WEBHOOK_ID), it also asks Vast for
    its signed test delivery and checks that the watchdog verified it (nothing on the account changes).

    \b
    --json fields: ok (no check failed), installed_hook (path or null),
    checks[] {name, status: ok|fail|warn, detail, fix}; with --live also
    facts[] {provider, fact, status: confirmed|refuted|unknown, detail}.
    """
    from gpuc.client.setup.doctor import doctor_deps, doctor_json, doctor_text, env_path, run_checks, settings_checks
    from gpuc.client.setup.doctor_live import live_checks
    from gpuc.client.setup.hook import install_hook

    cwd = Path.cwd()
    bad = settings_checks(ctx)
    deps = doctor_deps(ctx, (repo or cwd).resolve())
    installed = install_hook(deps.repo, env_path(ctx.settings, cwd), deps.git) if install_hook_flag else None
    checks = bad + run_checks(deps, cwd)
    facts = live_checks(ctx) if live else None
    click.echo(doctor_json(checks, facts, installed) if as_json else doctor_text(checks, facts, installed))
    if any(c.status == "fail" for c in [*checks, *(facts.checks if facts else [])]):
        click.get_current_context().exit(1)
