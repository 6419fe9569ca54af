"""The `gpuc` command. Subcommands load lazily so `gpuc --help` imports nothing heavy."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from gpuc.client.commands import COMMANDS


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attr = COMMANDS[cmd_name][0].split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table: listing commands must not import them.
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][1]) for name in sorted(COMMANDS)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuc")
def cli() -> None:
    """gpuc: rented GPUs that destroy themselves, watched out of band, with every cent on record.

    Start with `gpuc demo` (no accounts needed), then `gpuc doctor`.
    """


def report_error(exc: BaseException) -> int:
    """One line (plus a fix) instead of a traceback; secrets scrubbed."""
    from gpuc.core.errors import GpucError
    from gpuc.core.redact import redact

    secrets: list[str] = [v for k, v in os.environ.items() if k.endswith(("_KEY", "_TOKEN", "_SECRET")) and v]
    if isinstance(exc, GpucError):
        click.echo(f"error: {redact(exc.message, secrets)}", err=True)
        if exc.hint:
            click.echo(f"  fix: {redact(exc.hint, secrets)}", err=True)
        return exc.exit_code
    click.echo(f"internal error: {type(exc).__name__}: {redact(str(exc), secrets)}", err=True)
    click.echo("  fix: rerun with GPUC_DEBUG=1 for details, and report it", err=True)
    return 70


def main(argv: list[str] | None = None) -> Any:
    try:
        return cli.main(args=argv, prog_name="gpuc", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get("GPUC_DEBUG"):
            raise
        sys.exit(report_error(exc))


if __name__ == "__main__":
    main()
