"""The `gpuc` command. Subcommands load lazily so `gpuc --help` imports nothing heavy."""

from __future__ import annotations

import importlib
import os
import sys
import threading

import click
from click.shell_completion import CompletionItem, get_completion_class

from gpuc.client.command_table import COMMANDS, require_testkit
from gpuc.client.pods.interrupts import Interrupted, say, silence_broken_output
from gpuc.client.pods.jobline import JobToFollow
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.redact import redact
from gpuc.core.termsafe import clean_line

SHELLS = ("bash", "zsh", "fish")


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name, attr = COMMANDS[cmd_name][0].split(":")
        if module_name.startswith("gpuc.testkit."):  # `demo`, `drill`: an install without it is told how to get it
            require_testkit(cmd_name)
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Command names (and their short help, for zsh and fish) from the table: click's own version
        imports every command module to read its help, on every TAB."""
        names = [CompletionItem(n, help=COMMANDS[n][1]) for n in sorted(COMMANDS) if n.startswith(incomplete)]
        return names + click.Command.shell_complete(self, ctx, incomplete)

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


@cli.result_callback()
def follow_started_job(result: object) -> object:
    """`up --wait` and `run --wait` hand back the job they started: followed here, above the pods package
    that starts it and the jobs package that follows it, so neither imports the other back."""
    if isinstance(result, JobToFollow):
        from gpuc.client.jobs.wait import wait_and_exit  # startup: only after a job was started

        wait_and_exit(result.ctx, result.pod, job_id=result.job_id, timeout_s=result.timeout_s)
    return result


def _current_shell() -> str | None:
    name = os.path.basename(os.environ.get("SHELL", ""))
    return name if name in SHELLS else None


@click.command("completion")
@click.argument("shell", required=False, type=click.Choice(SHELLS))
def completion(shell: str | None) -> None:
    """Print the completion script for SHELL (default: your $SHELL). Add it to your shell once:

    \b
      bash  echo 'eval "$(gpuc completion bash)"' >> ~/.bashrc
      zsh   echo 'eval "$(gpuc completion zsh)"' >> ~/.zshrc
      fish  gpuc completion fish > ~/.config/fish/completions/gpuc.fish

    Commands, options, and choices complete; the script calls gpuc itself at each TAB.
    """
    chosen = shell or _current_shell()
    if chosen is None:
        raise ConfigError("cannot tell which shell this is", hint="name it: gpuc completion bash|zsh|fish")
    complete_class = get_completion_class(chosen)
    assert complete_class is not None  # the Choice above admits only shells click knows
    click.echo(complete_class(cli, {}, "gpuc", "_GPUC_COMPLETE").source(), nl=False)


def known_secrets() -> list[str]:
    """Every secret value this process may hold (environment, .env, config.json), read without Settings:
    a bad setting may be the error being reported."""
    from gpuc.core.settings import secrets_in_environment

    return list(secrets_in_environment())


def report_error(exc: BaseException) -> int:
    """One line (plus a fix) instead of a traceback; secrets scrubbed."""
    secrets = known_secrets()
    if isinstance(exc, GpucError):
        # A message may quote a pod or a provider (a stranger's machine): cleaned of terminal controls, one line.
        click.echo(f"error: {clean_line(redact(exc.message, secrets))}", err=True)
        if exc.hint:
            click.echo(f"  fix: {clean_line(redact(exc.hint, secrets))}", err=True)
        return exc.exit_code
    click.echo(f"internal error: {type(exc).__name__}: {clean_line(redact(str(exc), secrets))}", err=True)
    click.echo("  fix: rerun with GPUC_DEBUG=1 for details, and report it", err=True)
    return 70


def report_debug(exc: BaseException) -> int:
    """GPUC_DEBUG=1: the whole traceback, for a bug report, with every secret value masked."""
    from gpuc.core.redact import redacted_traceback

    sys.stderr.write(redacted_traceback(exc, known_secrets()))
    return report_error(exc)  # then the usual lines: what was wrong, the fix, the exit code it has


def _redacting_thread_hook(args: threading.ExceptHookArgs) -> None:
    """A worker thread's crash prints its traceback too: masked the same way."""
    if args.exc_value is not None:
        from gpuc.core.redact import redacted_traceback

        sys.stderr.write(redacted_traceback(args.exc_value, known_secrets()))


def main(argv: list[str] | None = None) -> int:
    """The exit code. Not standalone, click returns a command's `ctx.exit(N)` as N (and a command's own
    return value otherwise): both `gpuc` and `python -m gpuc.client.cli` must exit with it (`ls` names an
    unread provider with 1, `doctor` a failed check)."""
    threading.excepthook = _redacting_thread_hook
    try:
        code = cli.main(args=argv, prog_name="gpuc", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except Interrupted as exc:
        # `up` was stopped by a signal: it destroyed what it created and said so on stderr if it could.
        silence_broken_output()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        say("aborted")  # stderr may be the closed terminal that sent the signal
        silence_broken_output()
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:
        try:
            code = report_debug(exc) if os.environ.get("GPUC_DEBUG") else report_error(exc)
        except OSError:  # stderr is broken too (`up 2>&1 | tee` after Ctrl-C, a closed terminal)
            code = exc.exit_code if isinstance(exc, GpucError) else 1
        silence_broken_output()
        sys.exit(code)
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


if __name__ == "__main__":
    sys.exit(main())
