"""`gpuc doctor` (check the setup before you rent; `--install-hook` adds the pre-commit secret guard),
`gpuc demo` and `gpuc drill`: click only, one call each."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuc.client.command_table import require_testkit
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


@click.group(invoke_without_command=True)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the demo's state here (default: a temporary folder, removed after; a rehearsal's is kept).",
)
@click.option(
    "--provider",
    type=click.Choice(["local", "runpod", "vast"]),
    default="local",
    show_default=True,
    help="runpod / vast: against that provider's emulator, pods reached over a loopback sshd.",
)
@click.option(
    "--serve",
    is_flag=True,
    help="With --provider runpod|vast: keep the emulator, sshd, an S3 API and a watchdog up until Ctrl-C and print "
    "the line that points a shell at them, to rehearse a rental offline with every gpuc command.",
)
@click.pass_context
def demo(click_ctx: click.Context, home: Path | None, provider: str, serve: bool) -> None:
    """Run the whole pod life end to end (no accounts, no network): on the embedded default, or
    against a RunPod or Vast emulator through the rented-pod path (create, ssh, install, self-destroy).
    Results go to an S3 API on loopback through the pod's own grants, as a rented pod's do.

    In a rehearsal's shell (`--serve`), `gpuc demo outbid POD` has another renter outbid an interruptible pod."""
    if click_ctx.invoked_subcommand is not None:
        return
    require_testkit("demo")
    if serve:
        _serve(home, provider)
    # Lazy: `gpuc demo --help` and every TAB load this module; the demo's stack (~180 ms) loads only to run.
    from gpuc.client.setup.demo import run_demo

    code = run_demo(click.echo, home=home, keep_home=home is not None, provider=provider)
    raise SystemExit(code)


@demo.command("outbid")
@click.argument("pod")
@pass_ctx
def outbid(ctx: Ctx, pod: str) -> None:
    """In a Vast rehearsal's shell: another renter outbids POD (its id, experiment or run id), through the
    emulator's own outbid: the instance pauses, its processes die, its disk is kept. With `up --recover N` the
    watchdog then re-rents it (`gpuc ls` shows attempt 2/3); without, the pod waits paused until its limit."""
    from gpuc.client.setup.rehearse import outbid_pod

    for line in outbid_pod(ctx, pod):
        click.echo(line, err=True)


def _serve(home: Path | None, provider: str) -> None:
    from gpuc.core.errors import ConfigError

    if provider == "local":
        raise ConfigError(
            "--serve rehearses a rented pod: it needs an emulated provider",
            hint="use gpuc demo --provider runpod --serve (or vast)",
        )
    from gpuc.client.setup.rehearse import serve_rehearsal

    raise SystemExit(serve_rehearsal(click.echo, provider, home))


@click.command()
@click.option(
    "--faults",
    is_flag=True,
    help="Inject seeded faults: provider errors, notifier/store/network outages, duplicate and concurrent reaper runs.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for the fault plan.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON.")
def drill(faults: bool, seed: int, as_json: bool) -> None:
    """Run the failure matrix (docs/failure-matrix.md) on a virtual clock and print what each failure costs."""
    require_testkit("drill")
    # Lazy: the drill's scenarios live in gpuc.testkit, which only a clone of the repository has.
    from gpuc.client.setup.drill_text import footer, header, row_lines
    from gpuc.testkit.drill import run_drill

    if as_json:
        report = run_drill(faults=faults, seed=seed)
        click.echo(json.dumps(report.as_json(), indent=2))
    else:
        # Each row the moment it is done: the whole drill takes minutes.
        click.echo("\n".join(header()))
        report = run_drill(faults=faults, seed=seed, on_row=lambda row: click.echo("\n".join(row_lines(row))))
        click.echo("\n".join(footer(report)))
    if not report.ok:
        raise SystemExit(1)
