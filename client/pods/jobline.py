"""The commands that start a job (`up`, `run`): reading their line, and the job they hand back to be followed.

Click only. `up` lives with the pod commands (client/pods/commands.py), `run` with the job commands
(client/jobs/commands.py); both parse the job's words here. With `--wait` each returns a `JobToFollow`,
which the `gpuc` group follows (client/cli.py, over client/jobs/wait.py): the group sits above both packages,
so the pods package starts a job without importing the jobs package that follows it (jobs imports pods).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from gpuc.core.clock import parse_duration
from gpuc.core.errors import ConfigError
from gpuc.core.pod import Pod, new_run_id

if TYPE_CHECKING:
    from gpuc.client.context import Ctx

NO_NAME = "gpuc_up_no_name"
DASHES = "gpuc_up_dashes"


@dataclass(frozen=True)
class JobToFollow:
    """A job a command started with `--wait`: stream it, print its outcome, exit with its exit code."""

    ctx: Ctx
    pod: Pod
    job_id: str | None
    timeout_s: float | None


def new_job_id() -> str:
    return new_run_id()


def check_wait_options(wait: bool, timeout: str | None, command: tuple[str, ...] | list[str]) -> float | None:
    """--timeout only means something with --wait, and --wait only with a command to wait for."""
    if wait and not command:
        raise ConfigError("--wait needs a command to wait for", hint="gpuc up NAME --wait -- python train.py")
    if timeout is None:
        return None
    if not wait:
        raise ConfigError("--timeout limits --wait", hint="add --wait (gpuc up NAME --wait --timeout 2h -- CMD)")
    return parse_duration(timeout)


class JobCommand(click.Command):
    """A command that runs a job (`up`, `run`): an option of the job typed without `--` before it (`gpuc up
    exp python train.py --lr 3e-4`) is click's "No such option"; said with the line that was meant."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if "--" in given or exc.option_name not in given:
                raise
            meant = self._meant(ctx, given, given.index(exc.option_name))
            raise click.NoSuchOption(
                exc.option_name,
                message=f"No such option: {exc.option_name} (the job's options go after `--`: {meant})",
                ctx=ctx,
            ) from None

    def _meant(self, ctx: click.Context, args: list[str], cut: int) -> str:
        """The line with `--` where it belongs: gpuc's options and the name, then the job's words."""
        before, _rest, _order = self.make_parser(ctx).parse_args(args=list(args[:cut]))
        first = next(p.name for p in self.params if isinstance(p, click.Argument))
        name = before.get(first)
        words = [str(w) for w in before.get("command") or ()]
        from gpuc.client.onpod.script import is_runner  # only on this error

        options = list(args[:cut])
        for word in ([name] if isinstance(name, str) else []) + words:
            options.remove(word)
        if isinstance(name, str) and is_runner(name) and self.name == "up":  # `gpuc up python train.py --lr 3`
            words, name = [name, *words], "NAME"
        head = [*ctx.command_path.split(), *([name] if isinstance(name, str) else []), *options]
        return f"{shlex.join(head)} -- {shlex.join([*words, *args[cut:]])}"


class UpCommand(JobCommand):
    """`gpuc up -- python train.py`: click would take "python" for the experiment's name. Noted here, where
    the raw arguments are still seen: EXPERIMENT is None then, and the command keeps its first word. Whether
    `--` was typed at all is noted too: `gpuc up python train.py` is refused (script.check_dashes)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[DASHES] = "--" in args
        if "--" in args:
            # The parser alone (no callbacks, no conversion) on what comes before `--`: a name there, or none.
            before, _rest, _order = self.make_parser(ctx).parse_args(args=args[: args.index("--")])
            ctx.meta[NO_NAME] = not isinstance(before.get("experiment"), str)  # click 8.2+: UNSET, not None
        return super().parse_args(ctx, args)
