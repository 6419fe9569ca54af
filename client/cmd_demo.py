"""`gpuc demo`."""

from __future__ import annotations

from pathlib import Path

import click

from gpuc.client.commands import require_testkit


@click.command()
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the demo's state here (default: a temporary folder, removed after).",
)
@click.option(
    "--provider",
    type=click.Choice(["local", "runpod", "vast"]),
    default="local",
    show_default=True,
    help="runpod / vast: against that provider's emulator, pods reached over a loopback sshd.",
)
def demo(home: Path | None, provider: str) -> None:
    """Run the whole pod life end to end (no accounts, no network): on the embedded default, or
    against a RunPod or Vast emulator through the rented-pod path (create, ssh, install, self-destroy)."""
    require_testkit("demo")
    # Lazy: `gpuc demo --help` and every TAB load this module; the demo's stack (~180 ms) loads only to run.
    from gpuc.client.demo import run_demo

    code = run_demo(click.echo, home=home, keep_home=home is not None, provider=provider)
    raise SystemExit(code)
