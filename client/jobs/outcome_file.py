"""The one strict reader of a job's outcome (`.gpuc/outcome.json` on the pod, `<dest>/logs/outcome.json`
once synced), wherever the laptop reads it: the pod, the results destination, the watchdog's job_exit note.

The file is the pod's word, and a pod on Vast is a stranger's machine (or the job itself overwrote it).
So every field is checked for its type and range: an exit code is an int the shell can exit with (0-255;
a negative signal number is taken as 128+N, the shell's convention), a duration is a finite number of
seconds under a year, a time falls between 2000 and 2100. Anything else, or bytes that are not such a
JSON object, is `Unreadable`, with why: `--wait` says the outcome is unknown (exit 125) and where to
look, never "internal error".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpuc.core.podjson import Unreadable, loads
from gpuc.instance_side.joblog import ENDED_BY, KEPT_ENDINGS, OUTCOME_FORMAT

OUTCOME_MAX_BYTES = 64 * 1024  # gpuc writes ~300 bytes
MAX_DURATION_S = 366 * 86400.0
EPOCH_RANGE = (946_684_800.0, 4_102_444_800.0)  # 2000-01-01 .. 2100-01-01 UTC
MAX_SIGNAL = 64
_TEXT_FIELDS = ("job_id", "pod_id", "run_id", "experiment", "ended_why")
_MAX_TEXT = 256


@dataclass(frozen=True)
class JobOutcome:
    """A job's outcome as the wrapper wrote it, checked. `exit_code` None: the job has not exited (yet)."""

    job_id: str | None
    exit_code: int | None
    duration_s: float | None = None
    ending: str | None = None  # set when the pod is KEPT after the job: why (kept_sync_failed, ...)
    ended_by: str | None = None  # a job that never exited: who ended the pod (ENDED_BY), and why
    ended_why: str | None = None
    ended_at: float | None = None  # the pod's clock: when the job exited (or the pod ended under it)

    def not_finished(self) -> str:
        """ "the job did not finish", with who ended the pod under it when the pod said so."""
        if self.ended_by is None:
            return "the job did not finish"
        why = f" ({self.ended_why})" if self.ended_why else ""
        return f"the job did not finish: {ENDED_BY[self.ended_by]}{why}"


@dataclass(frozen=True)
class BadOutcome:
    """An outcome that was there but could not be read: `where` it was, and `why`."""

    where: str
    why: str

    def describe(self) -> str:
        return f"{self.where} is unreadable ({self.why})"


OutcomeRead = JobOutcome | BadOutcome


def parse_outcome(data: bytes, where: str) -> OutcomeRead:
    """The outcome in the bytes of an outcome.json; never raises."""
    try:
        return outcome_from(loads(data, most=OUTCOME_MAX_BYTES))
    except Unreadable as exc:
        return BadOutcome(where, str(exc))


def outcome_from(value: object) -> JobOutcome:
    """A JSON value taken as an outcome; raises Unreadable saying which field is wrong."""
    if not isinstance(value, dict):
        raise Unreadable("not a JSON object")
    if value.get("format") != OUTCOME_FORMAT:
        raise Unreadable(f"its format is {_show(value.get('format'))}, not {OUTCOME_FORMAT}")
    for name in _TEXT_FIELDS:
        _text(value, name)
    _time(value, "started_at")
    _time(value, "ended_at")
    if not isinstance(value.get("log_truncated", False), bool):
        raise Unreadable(f"log_truncated is {_show(value['log_truncated'])}, not true or false")
    ending = value.get("ending")
    if ending is not None and ending not in KEPT_ENDINGS:
        raise Unreadable(f"ending is {_show(ending)}, not one gpuc writes")
    ended_by = value.get("ended_by")
    if ended_by is not None and ended_by not in ENDED_BY:
        raise Unreadable(f"ended_by is {_show(ended_by)}, not one gpuc writes")
    return JobOutcome(
        job_id=value.get("job_id"),
        exit_code=exit_code_from(value.get("exit_code")),
        duration_s=duration_from(value.get("duration_s")),
        ending=ending,
        ended_by=ended_by,
        ended_why=value.get("ended_why"),
        ended_at=float(value["ended_at"]) if value.get("ended_at") is not None else None,
    )


def exit_code_from(value: object) -> int | None:
    if value is None:
        return None
    if not _is_int(value):
        raise Unreadable(f"exit_code is {_show(value)}, not an exit code")
    assert isinstance(value, int)
    if -MAX_SIGNAL <= value < 0:
        return 128 - value  # killed by signal N, as the shell says it
    if not 0 <= value <= 255:
        raise Unreadable(f"exit_code {_show(value)} is out of range (0-255)")
    return value


def duration_from(value: object) -> float | None:
    if value is None:
        return None
    if not _is_number(value):
        raise Unreadable(f"duration_s is {_show(value)}, not a number of seconds")
    assert isinstance(value, int | float)
    if not 0 <= value <= MAX_DURATION_S:
        raise Unreadable(f"duration_s {_show(value)} is out of range (0 to a year)")
    return float(value)


def _time(value: dict[str, Any], name: str) -> None:
    found = value.get(name)
    if found is None:
        return
    if not _is_number(found) or not EPOCH_RANGE[0] <= found <= EPOCH_RANGE[1]:
        raise Unreadable(f"{name} is {_show(found)}, not a time")


def _text(value: dict[str, Any], name: str) -> None:
    found = value.get(name)
    if found is not None and not (isinstance(found, str) and len(found) <= _MAX_TEXT):
        raise Unreadable(f"{name} is {_show(found)}, not a short text")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _show(value: object) -> str:
    """A value quoted in a message: short and printable (it is the pod's; the printer cleans it too)."""
    text = (
        repr(value)
        if isinstance(value, str)
        else type(value).__name__
        if isinstance(value, dict | list)
        else (str(value))
    )
    return text if len(text) <= 40 else text[:37] + "..."
