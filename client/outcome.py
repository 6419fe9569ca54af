"""Waiting for a job and telling its outcome: `gpuc up ... --wait`, `gpuc run ... --wait`, `gpuc logs -f`.

While the pod lives, its job log is streamed from the pod. When the pod is gone (the wrapper destroyed it
after the sync), the rest of the log and the outcome are read where the sync put them: the results
destination. That copy is the one to trust: it exists only if the sync was verified, and it names the job
it belongs to. When it cannot be read, the outcome seen on the pod before its end, then the watchdog's
job_exit notification, stand in; when none of them knows, gpuc says so and exits non-zero.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from gpuc.client.deps import Deps
from gpuc.client.joblogs import (
    CHUNK_BYTES,
    JOB_LOG_NAME,
    OUTCOME_NAME,
    Destination,
    LogPrinter,
    PodLogRead,
    gpuc_secrets,
    parse_outcome,
    read_pod_log,
    result_places,
)
from gpuc.client.podlife import ledger_intake
from gpuc.client.provision import pod_access
from gpuc.client.state import Run
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.errors import GpucError
from gpuc.core.ledger import row_cost, row_hours
from gpuc.core.models import Pod

WAIT_TIMEOUT_EXIT = 124  # as timeout(1): still running when the wait gave up
OUTCOME_UNKNOWN_EXIT = 125  # the job's exit code could not be learnt
STOPPED_WAITING_EXIT = 130  # Ctrl-C: the job goes on
POLL_S = 1.0
# Between two looks at the provider while the pod answers: a pod that answers is there.
GONE_CHECK_S = 30.0
# A job that never shows up under its id: the wrapper could not start (its error is in .gpuc/job.out).
START_GRACE_S = 90.0
_EXIT_IN_NOTE = re.compile(r"exit code (-?\d+)")
_MINUTES_IN_NOTE = re.compile(r"ran (\d+(?:\.\d+)?) min")

Say = Callable[[str], None]


@dataclass
class JobReport:
    exit_code: int
    line: str


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = round(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# -- following the log -----------------------------------------------------------------------------------
@dataclass
class Follow:
    """What one follow saw: the outcome on the pod (ours), whether the pod is gone, and why it stopped."""

    printer: LogPrinter
    outcome: dict[str, Any] | None = None
    gone: bool = False
    stopped: str | None = None  # "kept" | "timeout" | "not_started"
    job_out: str = ""


def follow(
    deps: Deps,
    pod: Pod,
    *,
    job_id: str | None,
    out: BinaryIO,
    timeout_s: float | None = None,
    poll_s: float = POLL_S,
    start_grace_s: float = START_GRACE_S,
) -> Follow:
    """Stream the job log until the pod is gone, the job's ending keeps it (sync failed, KEEP_ALIVE), or
    the timeout. `job_id`: read only the log of that job (a kept pod may still hold a previous job's)."""
    state = Follow(LogPrinter(out, gpuc_secrets(deps.settings)))
    start = deps.clock.now()
    next_check = start + GONE_CHECK_S
    offset = 0
    while True:
        read = _read(deps, pod, offset)
        if read is None:
            if _gone(deps, pod):
                state.gone = True
                return state
        else:
            mine = job_id is None or (read.outcome or {}).get("job_id") == job_id
            if mine and read.outcome is not None:
                state.outcome = read.outcome
            if mine and read.size is not None:
                if read.size < offset:  # a new job started over the log (gpuc logs -f on a kept pod)
                    state.printer.flush()
                    offset = 0
                    continue
                state.printer.feed(read.data)
                offset += len(read.data)
                if len(read.data) >= CHUNK_BYTES:
                    continue  # more is there already
            if state.outcome and state.outcome.get("exit_code") is not None and state.outcome.get("ending"):
                state.printer.flush()
                state.stopped = "kept"
                return state
            if job_id is not None and state.outcome is None and deps.clock.now() - start > start_grace_s:
                state.stopped = "not_started"
                return state
        now = deps.clock.now()
        if timeout_s is not None and now - start >= timeout_s:
            state.printer.flush()
            state.stopped = "timeout"
            return state
        if now >= next_check:
            next_check = now + GONE_CHECK_S
            if _gone(deps, pod):
                state.gone = True
                return state
        deps.clock.sleep(poll_s)


def _read(deps: Deps, pod: Pod, offset: int) -> PodLogRead | None:
    try:
        return read_pod_log(pod_access(deps.provider(pod.provider), pod, deps.settings), offset)
    except (GpucError, OSError, subprocess.SubprocessError):
        return None  # the pod may be going away, or the network blinked: the provider says which


def _gone(deps: Deps, pod: Pod) -> bool:
    """Only the provider's positive answer counts: an API error is no evidence either way."""
    try:
        return deps.provider(pod.provider).get(pod.id) is None
    except GpucError:
        return False


# -- the outcome -----------------------------------------------------------------------------------------
@dataclass
class Learnt:
    outcome: dict[str, Any] | None
    source: str
    destination: Destination
    log_found: bool


def learn_after_gone(deps: Deps, run: Run, state: Follow, job_id: str | None) -> Learnt:
    """The pod is gone: the rest of the log and the outcome from the results destination."""
    dest = Destination(result_places(deps.settings, run.provider, run.experiment, run.run_id))
    try:
        log = dest.read(JOB_LOG_NAME)
        if log is not None and len(log.data) > state.printer.printed:
            state.printer.feed(log.data[state.printer.printed :])
        state.printer.flush()
        found = dest.read(OUTCOME_NAME)
    finally:
        dest.close()
    outcome = parse_outcome(found.data if found else None)
    if outcome is not None and job_id is not None and outcome.get("job_id") != job_id:
        outcome = None  # a previous job's, on this run's destination
    if outcome is not None and outcome.get("exit_code") is not None:
        return Learnt(outcome, "results destination", dest, log is not None)
    if state.outcome is not None and state.outcome.get("exit_code") is not None:
        return Learnt(state.outcome, "the pod, before it ended", dest, log is not None)
    return Learnt(outcome or state.outcome, "", dest, log is not None)


def watchdog_outcome(status: StatusResponse | None, pod_id: str, since: float) -> dict[str, Any] | None:
    """The job_exit notification the wrapper sent (its text carries the exit code): the last resort."""
    if status is None:
        return None
    for note in reversed(status.notifications):
        if note.pod_id != pod_id or note.kind != "job_exit" or note.ts < since:
            continue
        code = _EXIT_IN_NOTE.search(note.message)
        if code is None:
            continue
        minutes = _MINUTES_IN_NOTE.search(note.message)
        return {"exit_code": int(code.group(1)), "duration_s": float(minutes.group(1)) * 60 if minutes else None}
    return None


def pod_cost(deps: Deps, pod_id: str, records: list[PodRecord]) -> tuple[float | None, float | None]:
    """(hours, USD) of the pod as the ledger has it once the watchdog's end is taken in; else from the
    watchdog's record."""
    ledger_intake(deps, records)
    try:
        for entry in deps.ledger().entries():
            if entry.pod_id == pod_id and entry.row.end:
                return row_hours(entry.row), row_cost(entry.row)
    except (GpucError, OSError):
        pass
    for record in records:
        if record.pod_id == pod_id and record.end_at and record.started_at:
            hours = max(0.0, record.end_at - record.started_at) / 3600
            return hours, (record.price_per_hour * hours if record.price_per_hour is not None else None)
    return None, None


def report(deps: Deps, pod: Pod, run: Run, state: Follow, *, job_id: str | None, since: float) -> JobReport:
    """The one-line outcome and the exit code `--wait` ends with."""
    if state.stopped == "timeout":
        return JobReport(
            WAIT_TIMEOUT_EXIT,
            f"still running on {pod.id}; stopped waiting (--timeout). The pod syncs, notifies and destroys itself"
            f" when the job exits: gpuc logs {pod.id} -f",
        )
    if state.stopped == "not_started":
        return JobReport(
            OUTCOME_UNKNOWN_EXIT,
            f"the job never started on {pod.id} (no sign of it after {START_GRACE_S:.0f}s); the pod's"
            f" .gpuc/job.out says why. The idle watch destroys the pod, or: gpuc down {pod.id}",
        )
    if state.stopped == "kept":
        assert state.outcome is not None
        return _kept(pod, state.outcome)
    status = _status(deps)
    records = status.pods if status else []
    learnt = learn_after_gone(deps, run, state, job_id)
    outcome, source = learnt.outcome, learnt.source
    if outcome is None or outcome.get("exit_code") is None:
        noted = watchdog_outcome(status, pod.id, since - 120)
        if noted is not None:
            outcome, source = {**(outcome or {}), **noted}, "the watchdog's notification"
    hours, cost = pod_cost(deps, pod.id, records)
    deps.runs.set_phase(run.run_id, "ended", now=deps.clock.now())
    money = f"pod {pod.id} ran {fmt_duration(hours * 3600 if hours is not None else None)}" + (
        f", ${cost:.4f}" if cost is not None else ", cost not known yet (gpuc ledger)"
    )
    where = f"results and log: {learnt.destination.describe()}" if learnt.log_found else (
        f"results: {learnt.destination.describe()} (no job log there)"
    )
    problems = "".join(f"; could not read {e}" for e in learnt.destination.errors[:1])
    if outcome is None or outcome.get("exit_code") is None:
        began = "the job started but did not finish (the pod was destroyed under it)" if outcome else (
            "the job's outcome is unknown"
        )
        return JobReport(
            OUTCOME_UNKNOWN_EXIT,
            f"{began}: no exit code at {learnt.destination.describe()} nor with the watchdog; {money}{problems}",
        )
    code = int(outcome["exit_code"])
    via = "" if source == "results destination" else f" (from {source})"
    return JobReport(
        code,
        f"job exited with code {code} after {fmt_duration(outcome.get('duration_s'))}{via}; {money}; {where}{problems}",
    )


def _kept(pod: Pod, outcome: dict[str, Any]) -> JobReport:
    code = int(outcome["exit_code"])
    ending = str(outcome.get("ending"))
    head = f"job exited with code {code} after {fmt_duration(outcome.get('duration_s'))}"
    if ending == "kept_sync_failed":
        return JobReport(
            code or 1,
            f"{head}; results sync FAILED: pod {pod.id} is KEPT and billing. See gpuc logs {pod.id} and the"
            f" pod's .gpuc/agent.log; then gpuc down {pod.id} (or --force to give the results up)",
        )
    if ending == "kept_alive":
        return JobReport(code, f"{head}; results synced; pod {pod.id} kept (KEEP_ALIVE=1): gpuc down {pod.id}")
    if ending == "destroy_failed":
        return JobReport(
            code, f"{head}; results synced; the pod's self-destroy was refused: the watchdog destroys {pod.id}"
        )
    return JobReport(code, f"{head}; pod {pod.id}: {ending.replace('_', ' ')}")


def _status(deps: Deps) -> StatusResponse | None:
    try:
        return deps.functions.status()
    except GpucError:
        return None
