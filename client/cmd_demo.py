"""`gpuc demo`."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the demo's state here (default: a temporary folder, removed after).",
)
def demo(home: Path | None) -> None:
    """Run the whole pod life end to end on the embedded default (no accounts, no network)."""
    from gpuc.client.demo import run_demo

    code = run_demo(click.echo, home=home, keep_home=home is not None)
    raise SystemExit(code)
