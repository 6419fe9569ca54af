"""The watchdog's status (`GET /v1/status`) as `gpuc ls` and `gpuc ledger` read it: frozen dataclasses
checked by hand, with no pydantic and no httpx (each costs more than a bare interpreter's start, and these
two commands run many times a day).

The check is as strict as core/api.py's StatusResponse, which the server answers with: an unknown field or
a missing required one, a value of the wrong type, a word outside its Literal, a number outside its bounds
is refused (Unexpected, which the client turns into a FunctionsError), never read as a default. Where it
differs it is stricter: no number from a string, no int from a float, no bool from 0 or 1 (the server
never sends them). tests/client/test_status_reader.py holds the two in step: the same fields, the same
required ones, the same answer on the documents the server sends and on each way of breaking them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypeVar

from gpuc.core.gpubounds import reading_problem

Check = Callable[[Any, str], Any]
T = TypeVar("T")

# core/api.py's bounds (imported from there they would load pydantic): the test compares them.
EPOCH_MIN, EPOCH_MAX = 1_577_836_800.0, 4_102_444_800.0
MAX_LIMIT_S = 366 * 24 * 3600.0
SEQ_MAX = 2**63 - 1
POD_STATUSES = ("provisioning", "running", "stopped", "paused", "exited", "terminated", "unknown")
RECORD_STATES = ("ok", "late", "down", "destroying", "destroyed", "ended")
LEVELS = ("info", "warning", "error")


class Unexpected(ValueError):
    """The status is not what gpuc's watchdog answers; the message names the field."""


def text(max_length: int | None = None, min_length: int = 0) -> Check:
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise Unexpected(f"{where} is not text")
        if len(value) < min_length or (max_length is not None and len(value) > max_length):
            raise Unexpected(f"{where} has a length out of bounds")
        return value

    return check


def number(low: float | None = None, high: float | None = None) -> Check:
    """A float field: an int or a float (never a bool), within [low, high] when given (NaN is in none)."""

    def check(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Unexpected(f"{where} is not a number")
        if (low is not None and not value >= low) or (high is not None and not value <= high):
            raise Unexpected(f"{where} is out of bounds")
        return float(value)

    return check


def integer(low: int | None = None, high: int | None = None) -> Check:
    def check(value: Any, where: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Unexpected(f"{where} is not an integer")
        if (low is not None and value < low) or (high is not None and value > high):
            raise Unexpected(f"{where} is out of bounds")
        return value

    return check


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise Unexpected(f"{where} is not true or false")
    return value


def one_of(*words: str) -> Check:
    def check(value: Any, where: str) -> str:
        if not isinstance(value, str) or value not in words:
            raise Unexpected(f"{where} is not one of {', '.join(words)}")
        return value

    return check


def maybe(inner: Check) -> Check:
    def check(value: Any, where: str) -> Any:
        return None if value is None else inner(value, where)

    return check


def many(inner: Check, max_length: int | None = None) -> Check:
    def check(value: Any, where: str) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Unexpected(f"{where} is not a list")
        if max_length is not None and len(value) > max_length:
            raise Unexpected(f"{where} has too many items")
        return tuple(inner(item, f"{where}[{i}]") for i, item in enumerate(value))

    return check


def record(cls: type[T]) -> Check:
    def check(value: Any, where: str) -> T:
        return build(cls, value, where)

    return check


def checked(check: Check, default: Any = MISSING) -> Any:
    """A field of a record below: how its value is checked, and its default (none: it is required)."""
    return field(default=default, metadata={"check": check})


def build(cls: type[T], raw: Any, where: str) -> T:
    """`cls` from a JSON object: every key known, every required one present, every value checked."""
    if not isinstance(raw, dict):
        raise Unexpected(f"{where or 'the answer'} is not an object")
    known = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise Unexpected(f"{where or 'the answer'} has an unknown field {unknown[0]!r}")
    values: dict[str, Any] = {}
    for name, spec in known.items():
        here = f"{where}.{name}" if where else name
        if name not in raw:
            if spec.default is MISSING:
                raise Unexpected(f"{here} is missing")
            continue
        values[name] = spec.metadata["check"](raw[name], here)
    return cls(**values)


def _gpu_reading_in_range(value: Any, where: str) -> GpuReading:
    """HeartbeatBody's own validator on each of its GPUs (core/gpubounds.py, which the API model calls)."""
    gpu = build(GpuReading, value, where)
    problem = reading_problem(gpu)
    if problem:
        raise Unexpected(f"{where}: {problem}")
    return gpu


OPT_TEXT, OPT_NUMBER = maybe(text()), maybe(number())


@dataclass(frozen=True, kw_only=True)
class GpuReading:
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


@dataclass(frozen=True, kw_only=True)
class Heartbeat:
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


@dataclass(frozen=True, kw_only=True)
class WatchedPod:
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
    last_heartbeat: Heartbeat | None = checked(maybe(record(Heartbeat)), None)  # noqa: RUF009 (a field())
    reason: str | None = checked(OPT_TEXT, None)
    deadline_at: float | None = checked(OPT_NUMBER, None)
    kept_at: float | None = checked(OPT_NUMBER, None)


@dataclass(frozen=True, kw_only=True)
class Blind:
    """api.BlindProvider: a provider the reaper cannot read, since when, and why."""

    provider: str = checked(text())
    since: float = checked(number())
    why: str = checked(text(), "")


@dataclass(frozen=True, kw_only=True)
class Notification:
    ts: float = checked(number())
    title: str = checked(text())
    message: str = checked(text())
    pod_id: str | None = checked(OPT_TEXT, None)
    kind: str = checked(text(), "info")
    level: str = checked(one_of(*LEVELS), "info")


@dataclass(frozen=True, kw_only=True)
class Channel:
    """api.ChannelInfo: a notification channel the watchdog holds (never its URL)."""

    index: int = checked(integer(1, 1000))
    kind: str = checked(text(32, 1))


@dataclass(frozen=True, kw_only=True)
class WatchdogStatus:
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


def read_status(document: Any) -> WatchdogStatus:
    """The parsed JSON of `GET /v1/status`, checked; Unexpected names what is wrong."""
    return build(WatchdogStatus, document, "")
