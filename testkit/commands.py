"""`gpuc demo` (its `outbid` in a rehearsal's shell) and `gpuc drill`: click only, one call each. They run on
the test kit, so they live in it: the command table (client/command_table.py) names them by module, and the
client imports nothing of the test kit, which drives the client.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuc.client.context import Ctx, pass_ctx


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
    if serve:
        _serve(home, provider)
    # Lazy: `gpuc demo --help` and every TAB load this module; the demo's stack (~180 ms) loads only to run.
    from gpuc.testkit.demo import run_demo

    code = run_demo(click.echo, home=home, keep_home=home is not None, provider=provider)
    raise SystemExit(code)


@demo.command("outbid")
@click.argument("pod")
@pass_ctx
def outbid(ctx: Ctx, pod: str) -> None:
    """In a Vast rehearsal's shell: another renter outbids POD (its id, experiment or run id), through the
    emulator's own outbid: the instance pauses, its processes die, its disk is kept. With `up --recover N` the
    watchdog then re-rents it (`gpuc ls` shows attempt 2/3); without, the pod waits paused until its limit."""
    from gpuc.testkit.rehearse import outbid_pod

    for line in outbid_pod(ctx, pod):
        click.echo(line, err=True)


def _serve(home: Path | None, provider: str) -> None:
    from gpuc.core.errors import ConfigError

    if provider == "local":
        raise ConfigError(
            "--serve rehearses a rented pod: it needs an emulated provider",
            hint="use gpuc demo --provider runpod --serve (or vast)",
        )
    from gpuc.testkit.rehearse import serve_rehearsal

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
    # Lazy: `gpuc drill --help` and every TAB load this module; the drill's scenarios load only to run.
    from gpuc.testkit.drill import run_drill
    from gpuc.testkit.drill_text import footer, header, row_lines

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
