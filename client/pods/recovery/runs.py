"""The recovering runs (`up --recover`) the laptop's commands read from the watchdog: `gpuc ls` shows a run's
attempt, `gpuc ledger` and `gpuc ls` keep its ONE row (core/ledger/), `gpuc down` stops its recovery.

Read only for the runs whose row is still open: none at all when no run recovers, and one request per such
run, all at once (core/together.py). A run that could not be read is left out: its row stays open, never
closed at one attempt's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.pods.recovery.prepare import KITS_DIR, remove_kit
from gpuc.core.errors import GpucError
from gpuc.core.ledger.intake import recovering_runs, run_of

if TYPE_CHECKING:
    from gpuc.core.api import RunRecovery
    from gpuc.core.ledger.intake import WatchdogRecord


def runs_to_read(ctx: Ctx, records: Sequence[WatchdogRecord]) -> list[str]:
    """The recovering runs named by the records whose first pod's row is not closed yet."""
    wanted = recovering_runs(records)
    if not wanted:
        return []  # the common case: no ledger read, no request
    try:
        closed = {e.pod_id for e in ctx.ledger().entries() if e.pod_id and e.row.end}
    except (GpucError, OSError):
        return wanted
    firsts = {run_id: r.pod_id for r in records for run_id, attempt in [run_of(r)] if attempt == 1}
    return [run_id for run_id in wanted if firsts.get(run_id) not in closed]


def read_runs(ctx: Ctx, run_ids: Sequence[str]) -> dict[str, RunRecovery | None]:
    """Each run as the watchdog keeps it (None: it holds no such run); a run it could not answer is left out."""
    if not run_ids:
        return {}
    from gpuc.core.together import read_together

    watchdog = ctx.watchdog
    reads = read_together({run_id: partial(watchdog.run, run_id) for run_id in run_ids})
    out: dict[str, RunRecovery | None] = {}
    for run_id, outcome in reads.items():
        try:
            out[run_id] = outcome.get()
        except GpucError:
            continue
    return out


def attempt_label(record: WatchdogRecord | None, runs: dict[str, RunRecovery | None]) -> str | None:
    """The label "attempt 2/3" for a pod of a recovering run (of 1 + its N recoveries); None for any other pod."""
    if record is None:
        return None
    run_id, attempt = run_of(record)
    if run_id is None or attempt is None:
        return None
    run = runs.get(run_id)
    return f"attempt {attempt}/{run.recover + 1}" if run is not None else f"attempt {attempt}"


def tidy_kits(ctx: Ctx, runs: dict[str, RunRecovery | None]) -> list[str]:
    """Remove the boot kit (gpuc's wheel and the user's code, at the results bucket) of each run that is done:
    nothing rents from it any more. What could not be removed is said, with where it is."""
    lines = []
    for run_id, run in runs.items():
        if run is not None and run.done and not remove_kit(ctx.settings, run_id):
            lines.append(
                f"the boot kit of run {run_id} (your code) could not be removed from "
                f"{ctx.settings.results_bucket}/{KITS_DIR}/{run_id}/: delete it there"
            )
    return lines
