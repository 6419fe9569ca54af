"""The watchdog's status (`GET /v1/status`) as `gpuc ls` and `gpuc ledger` read it: read-only records
(core/checks.py's Shapes) checked by hand, with no pydantic and no httpx (each costs more than a bare
interpreter's start, and these two commands run many times a day).

The check is as strict as core/api.py's StatusResponse, which the server answers with: an unknown field or
a missing required one, a value of the wrong type, a word outside its Literal, a number outside its bounds
is refused (Unexpected, which the client turns into a FunctionsError), never read as a default. Where it
differs it is stricter: no number from a string, no int from a float, no bool from 0 or 1 (the server
never sends them). tests/client/test_status_reader.py holds the two in step: the same fields, the same
required ones, the same answer on the documents the server sends and on each way of breaking them.
"""

from __future__ import annotations

from typing import Any

from gpuc.core.checks import Shape, Unexpected, build, checked, flag, integer, many, maybe, number, one_of, record, text
from gpuc.core.gpubounds import reading_problem
from gpuc.core.pod import POD_STATUSES

__all__ = ["POD_STATUSES", "Unexpected", "WatchdogStatus", "read_status"]

# core/api.py's bounds (imported from there they would load pydantic): the test compares them.
EPOCH_MIN, EPOCH_MAX = 1_577_836_800.0, 4_102_444_800.0
MAX_LIMIT_S = 366 * 24 * 3600.0
SEQ_MAX = 2**63 - 1
RECORD_STATES = ("ok", "late", "down", "destroying", "destroyed", "ended")
LEVELS = ("info", "warning", "error")


def _gpu_reading_in_range(value: Any, where: str) -> GpuReading:
    """HeartbeatBody's own validator on each of its GPUs (core/gpubounds.py, which the API model calls)."""
    gpu = build(GpuReading, value, where)
    problem = reading_problem(gpu)
    if problem:
        raise Unexpected(f"{where}: {problem}")
    return gpu


OPT_TEXT, OPT_NUMBER = maybe(text()), maybe(number())


class GpuReading(Shape):
    index: int = checked(integer())
    name: str | None = checked(OPT_TEXT, None)
    uuid: str | None = checked(OPT_TEXT, None)
    utilization_pct: float | None = checked(OPT_NUMBER, None)
    memory_used_mb: float | None = checked(OPT_NUMBER, None)
    memory_total_mb: float | None = checked(OPT_NUMBER, None)
    power_w: float | None = checked(OPT_NUMBER, None)
    power_limit_w: float | None = checked(OPT_NUMBER, None)
    temperature_c: float | None = checked(OPT_NUMBER, None)
    driver_version: str | None = checked(OPT_TEXT, None)
    cuda_version: str | None = checked(OPT_TEXT, None)
    processes: tuple[int, ...] = checked(many(integer()), ())
    error: str | None = checked(OPT_TEXT, None)


EPOCH = number(EPOCH_MIN, EPOCH_MAX)
COUNT = integer(0, 1_000_000)


class Heartbeat(Shape):
    pod_id: str = checked(text(128, min_length=1))
    seq: int = checked(integer(0, SEQ_MAX))
    sent_at: float = checked(EPOCH)
    gpus: tuple[GpuReading, ...] = checked(many(_gpu_reading_in_range, 16), ())
    gpu_error: str | None = checked(maybe(text(500)), None)
    python_procs: int = checked(COUNT, 0)
    active_ssh: int = checked(COUNT, 0)
    idle_minutes: float = checked(number(0, MAX_LIMIT_S / 60), 0.0)
    busy_reason: str | None = checked(maybe(text(200)), None)
    job_running: bool = checked(flag, False)
    keep_file: bool = checked(flag, False)
    kept_left_s: float | None = checked(maybe(number(0, MAX_LIMIT_S)), None)
    pushed_ago_s: float | None = checked(maybe(number(0, MAX_LIMIT_S)), None)
    pushed_files: int | None = checked(maybe(COUNT), None)
    pushed_to: str | None = checked(maybe(text(300)), None)


class WatchedPod(Shape):
    """api.PodRecord: one pod as the watchdog keeps it."""

    pod_id: str = checked(text())
    provider: str = checked(text())
    name: str = checked(text())
    experiment: str = checked(text())
    gpu: str | None = checked(OPT_TEXT, None)
    price_per_hour: float | None = checked(OPT_NUMBER, None)
    started_at: float | None = checked(OPT_NUMBER, None)
    registered_at: float = checked(number())
    last_seen: float | None = checked(OPT_NUMBER, None)
    last_seq: int = checked(integer(), -1)
    state: str = checked(one_of(*RECORD_STATES), "ok")
    destroy_at: float | None = checked(OPT_NUMBER, None)
    lease_until: float | None = checked(OPT_NUMBER, None)
    end_at: float | None = checked(OPT_NUMBER, None)
    ended_by: str | None = checked(OPT_TEXT, None)
    note: str | None = checked(OPT_TEXT, None)
    provider_status: str | None = checked(maybe(one_of(*POD_STATUSES)), None)
    last_heartbeat: Heartbeat | None = checked(maybe(record(Heartbeat)), None)
    reason: str | None = checked(OPT_TEXT, None)
    deadline_at: float | None = checked(OPT_NUMBER, None)
    kept_at: float | None = checked(OPT_NUMBER, None)


class Blind(Shape):
    """api.BlindProvider: a provider the reaper cannot read, since when, and why."""

    provider: str = checked(text())
    since: float = checked(number())
    why: str = checked(text(), "")


class Notification(Shape):
    ts: float = checked(number())
    title: str = checked(text())
    message: str = checked(text())
    pod_id: str | None = checked(OPT_TEXT, None)
    kind: str = checked(text(), "info")
    level: str = checked(one_of(*LEVELS), "info")


class Channel(Shape):
    """api.ChannelInfo: a notification channel the watchdog holds (never its URL)."""

    index: int = checked(integer(1, 1000))
    kind: str = checked(text(32, 1))


class WatchdogStatus(Shape):
    """api.StatusResponse."""

    server_time: float = checked(number())
    reaper_last_run: float | None = checked(OPT_NUMBER, None)
    reaper_period_s: float = checked(number())
    pods: tuple[WatchedPod, ...] = checked(many(record(WatchedPod)), ())
    reaper_blind: tuple[str, ...] = checked(many(text()), ())
    reaper_blind_since: tuple[Blind, ...] = checked(many(record(Blind)), ())
    notifications: tuple[Notification, ...] = checked(many(record(Notification)), ())
    new_pods_paused: str | None = checked(OPT_TEXT, None)
    channels: tuple[Channel, ...] | None = checked(maybe(many(record(Channel))), None)
    watchdog_id: str | None = checked(OPT_TEXT, None)  # the mark `up` puts on each pod (core.pod.WATCHDOG_ENV)


def read_status(document: Any) -> WatchdogStatus:
    """The parsed JSON of `GET /v1/status`, checked; Unexpected names what is wrong."""
    return build(WatchdogStatus, document, "")
