"""The files `up` leaves on a pod, and the few the pod writes itself, read without pydantic.

`PodPaths` is the laptop's own (core.podpaths is standard-library only). `AgentConfig` mirrors
core.podconfig.PodConfig, which is pydantic (see the package docstring for why); the tests compare
them field by field, so a field added on the laptop side fails a test until it is added here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuc.core.atomicfile import atomic_write as atomic_write
from gpuc.core.errors import ConfigError
from gpuc.core.podpaths import POD_ROOT_ENV as POD_ROOT_ENV
from gpuc.core.podpaths import TOKEN_ENV as TOKEN_ENV
from gpuc.core.podpaths import PodPaths as PodPaths
from gpuc.core.signing import weak_token

POD_ID_ENV = "GPUC_POD_ID"
END_MARKER_MAX = 256
_TRUE = ("1", "true", "yes", "on")


def flag(environ: Mapping[str, str], name: str) -> bool:
    """An on/off variable of the pod's environment (KEEP_ALIVE, DRY_RUN)."""
    return environ.get(name, "").strip().lower() in _TRUE


@dataclass(frozen=True)
class AgentConfig:
    """core.podconfig.PodConfig, as the pod reads it."""

    pod_id: str
    provider: str
    experiment: str
    run_id: str
    functions_url: str
    gpu_expected: str | None = None
    price_per_hour: float | None = None
    heartbeat_interval_s: float = 60.0
    idle_check_interval_s: float = 60.0
    idle_gpu_pct: float = 5.0
    idle_warn_s: float = 15 * 60.0
    idle_destroy_s: float = 20 * 60.0
    ssh_input_window_s: float = 10 * 60.0
    sync_interval_s: float = 10 * 60.0  # the periodic results push; 0: none
    sync_settle_s: float = 5.0  # modified this recently: still being written (instance_side/push.py)
    nag_interval_s: float = 60 * 60.0
    idle_cpu_floor_s: float = 0.1
    idle_io_floor_bytes: float = 16 * 1024.0
    kept_window_s: float = 2 * 3600.0
    results_bucket: str | None = None
    s3_endpoint_url: str | None = None
    git_remote: str | None = None
    simulated_gpu: bool = False
    local_home: str | None = None
    deadline_at: float | None = None
    deadline_warn_s: float = 15 * 60.0
    deadline_lead_s: float = 2 * 60.0
    notify_start: bool = False
    warm_s: float = 0.0  # `up --warm`: a job's end syncs and keeps the pod; the idle watch ends it after this

    @classmethod
    def from_mapping(cls, data: Mapping[str, object]) -> AgentConfig:
        # Unknown keys (a newer laptop) are ignored, not fatal: an agent that refuses to start never
        # heartbeats, and a silent pod bills until the reaper's limit.
        values: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            if field.name in data:
                values[field.name] = _coerce(field.name, str(field.type), data[field.name])
            elif field.default is dataclasses.MISSING:
                raise ConfigError(f"pod config lacks {field.name!r}", hint="re-run `gpuc up`: it writes the config")
        config = cls(**values)  # type: ignore[arg-type]
        for name in ("heartbeat_interval_s", "idle_check_interval_s"):
            if getattr(config, name) <= 0:
                raise ConfigError(f"pod config {name} must be > 0", hint="fix the interval setting and re-run up")
        return config

    @classmethod
    def load(cls, path: Path) -> AgentConfig:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"no pod config at {path}", hint="this pod was not set up by `gpuc up`") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read pod config {path}: {type(exc).__name__}", hint="re-run `gpuc up`") from None
        if not isinstance(data, dict):
            raise ConfigError(f"pod config {path} is not a JSON object", hint="re-run `gpuc up`")
        return cls.from_mapping(data)


def _coerce(name: str, type_name: str, value: object) -> object:
    optional = type_name.endswith("| None")
    if value is None:
        if optional:
            return None
        raise ConfigError(f"pod config {name!r} must not be null", hint="re-run `gpuc up`")
    base = type_name.removesuffix(" | None")
    if base == "str" and isinstance(value, str):
        return value
    if base == "bool" and isinstance(value, bool):
        return value
    if base == "float" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ConfigError(f"pod config {name!r} should be {base}, got {type(value).__name__}", hint="re-run `gpuc up`")


def load_secrets(path: Path) -> dict[str, str]:
    """The pod's dotenv secrets file. Its values are never printed; callers use them for redaction."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        raise ConfigError(f"no secrets file at {path}", hint="re-run `gpuc up`: it uploads the pod token") from None
    if mode & 0o077:
        # Tightening is always safe; refusing to start would stop the heartbeats instead.
        os.chmod(path, 0o600)
    from dotenv import dotenv_values  # startup: `ask`, which reads no secret, must not load it

    try:
        with path.open(encoding="utf-8") as fh:
            values = dotenv_values(stream=fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {type(exc).__name__}", hint="re-run `gpuc up`") from None
    return {k: v for k, v in values.items() if v is not None}


def pod_token(secrets: Mapping[str, str], environ: Mapping[str, str]) -> str:
    token = secrets.get(TOKEN_ENV) or environ.get(TOKEN_ENV)
    if not token:
        raise ConfigError(f"{TOKEN_ENV} is missing from the pod's secrets", hint="re-run `gpuc up`")
    weak = weak_token(token)
    if weak is not None:
        # A guessable token lets anyone forge this pod's pings: refused before it signs anything.
        raise ConfigError(f"{TOKEN_ENV} in the pod's secrets is {weak}", hint="re-run `gpuc up` for a fresh token")
    return token


def hold_agent_lock(paths: PodPaths) -> int | None:
    """One agent per pod: `up` and a re-run bootstrap may both start one. Returns the held lock's fd
    (kept open for the agent's life), or None when another agent already holds it."""
    fd = os.open(paths.agent_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def mark_ended(paths: PodPaths, pod_id: str) -> None:
    """Best effort: a destroy may already have removed the disk under us, which is fine."""
    with contextlib.suppress(OSError):
        atomic_write(paths.ended, pod_id + "\n", 0o644)


def end_marker(paths: PodPaths) -> str | None:
    """The `ended` marker as whoever ended the pod wrote it: the pod id, "" from an older gpuc; None when the
    pod has not ended. Raises OSError or ValueError when a marker is there but cannot be read."""
    try:
        with paths.ended.open(encoding="utf-8") as fh:
            # A pod id is short: a longer marker is not one gpuc wrote, and its first bytes tell that.
            return fh.read(END_MARKER_MAX + 1).strip()
    except FileNotFoundError:
        return None


def is_ended(paths: PodPaths, pod_id: str) -> bool:
    """True when this pod was ended. A marker naming another pod is stale (a reused volume)."""
    try:
        owner = end_marker(paths)
    except (OSError, ValueError):
        return False
    return owner in ("", pod_id)


@contextmanager
def try_lock(path: Path) -> Iterator[bool]:
    """An exclusive flock on `path`, never waited for: yields whether this process holds it. The kernel
    drops it with the process, so a killed holder never leaves it taken. Raises OSError if it cannot open."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@contextmanager
def hold_end_lock(paths: PodPaths) -> Iterator[bool]:
    """One ending at a time: the wrapper and the idle watch may decide in the same minute. Yields whether
    this process holds end.lock (False: another ending is under way)."""
    try:
        held = try_lock(paths.end_lock)
        holds = held.__enter__()
    except OSError:
        yield True  # no state dir to lock in: nothing else can be ending it through us either
        return
    try:
        yield holds
    finally:
        held.__exit__(None, None, None)


def ending_under_way(paths: PodPaths) -> bool:
    """Whether an ending holds end.lock now: between a job's exit and the `ended` marker the wrapper syncs
    and notifies holding it, and a job started then would be destroyed by that ending. Raises OSError when
    the lock cannot be probed."""
    try:
        fd = os.open(paths.end_lock, os.O_RDWR)
    except FileNotFoundError:
        return False  # never created: no ending ever ran here
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the probe's own lock, if it got it
    return False
