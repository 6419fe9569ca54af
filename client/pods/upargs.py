"""`gpuc up`'s words turned into its one `UpOptions` (client/pods/plan.py), once, in the order they are checked.

The click parameters carry the options' own names, so what needs no conversion passes as typed; what does
(the name, the durations, the upload, the question, the note) is converted here, each refused before anything
is measured or rented, with the same words as always.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from gpuc.client.context import Ctx
from gpuc.client.onpod import upload
from gpuc.client.onpod.script import check_dashes
from gpuc.client.pods import plan
from gpuc.client.pods.jobline import DASHES, NO_NAME, check_wait_options, new_job_id
from gpuc.core.clock import parse_duration
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.rows import check_note


def up_options(ctx: Ctx, given: Mapping[str, Any], meta: Mapping[str, Any]) -> plan.UpOptions:
    """The options `up` was given (click's, by name) and what its parser noted (`meta`: jobline.UpCommand)."""
    settings = ctx.settings
    rest = dict(given)
    experiment: str | None = rest.pop("experiment")
    command: tuple[str, ...] = rest.pop("command")
    if experiment is not None:  # before the folder's name is taken: a slip is said as typed
        check_dashes(experiment, list(command), dashes=bool(meta.get(DASHES)))
    if meta.get(NO_NAME) and experiment is not None:
        command = (experiment, *command)  # `up -- python train.py`: "python" is the command's, not a name
        experiment = _folder_name(ctx)
    plan.check_experiment(experiment)
    assert experiment is not None
    wait: bool = rest.pop("wait")
    timeout_s = check_wait_options(wait, rest.pop("timeout"), command)
    if rest["interruptible"] and rest["bid"] is None and rest["provider"] not in (None, "local"):
        raise ConfigError("--interruptible needs --bid", hint="see `gpuc offers --interruptible` for min bids")
    warm: str | None = rest.pop("warm")
    max_hours: str | None = rest.pop("max_hours")
    warm_s = parse_duration(warm) if warm is not None else 0.0
    if warm_s and max_hours is None:  # a warm pod's deadline follows its jobs (client/pods/warm.py)
        from gpuc.client.pods.warm import deadline_hours

        hours, warm_job_s = deadline_hours(settings, warm_s), settings.warm_job_hours * 3600
    else:
        hours = plan.parse_max_hours(max_hours) if max_hours is not None else settings.max_hours
        warm_job_s = 0.0
    provider: str | None = rest.pop("provider")
    no_upload: bool = rest.pop("no_upload")
    yes: bool = rest.pop("yes")
    note: str | None = rest.pop("note")
    return plan.UpOptions(
        **rest,  # as typed: gpu, gpu_count, price_per_hour, interruptible, bid, recover, offer_id, image, ...
        experiment=experiment,
        provider=provider or settings.provider,
        max_hours=hours,
        command=list(command),
        # Measured before anything is rented: an oversized project is refused at no cost.
        upload=None
        if no_upload
        else upload.prepare(Path.cwd(), settings.upload_max_mb, settings.home, settings.named_secrets()),
        job_id=new_job_id() if command else None,
        warm_s=warm_s,
        warm_job_s=warm_job_s,
        confirm=None if yes or not ctx.on_terminal() else _ask,
        note=None if note is None else check_note(note),  # refused before anything is rented
        wait=wait,
        follow_timeout_s=timeout_s,
    )


def _folder_name(ctx: Ctx) -> str:
    """No name given: the project folder's, said, when it is a valid one; else the name is required."""
    from gpuc.core.models import EXPERIMENT_RE  # pydantic: `up` loads it anyway

    folder = Path.cwd().name
    if not EXPERIMENT_RE.match(folder):
        raise ConfigError(
            "an experiment name is required (this folder's name is not a valid one)",
            hint="name it before the `--`: gpuc up NAME -- python train.py",
        )
    ctx.echo(f"no experiment name given: using this folder's, {folder} (gpuc up NAME -- ... names it)")
    return folder


def _ask(question: str) -> bool:
    return click.confirm(question, default=True, err=True)
