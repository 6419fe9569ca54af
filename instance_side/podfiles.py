"""The files `up` leaves on a pod, and the few the pod writes itself, read without pydantic.

`PodPaths` is the laptop's own (core.podpaths is standard-library only). `AgentConfig` is core.podconfig.PodConfig
read against its JSON Schema (core/wire.py): one declaration, the pydantic model, for both sides.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuc.core import wire
from gpuc.core.atomicfile import atomic_write as atomic_write
from gpuc.core.errors import ConfigError
from gpuc.core.podpaths import POD_ROOT_ENV as POD_ROOT_ENV
from gpuc.core.podpaths import TOKEN_ENV as TOKEN_ENV
from gpuc.core.podpaths import PodPaths as PodPaths
from gpuc.core.podsecrets import parse_env_file
from gpuc.core.renamed import current_names
from gpuc.core.signing import weak_token
from gpuc.core.wire import WireError

POD_ID_ENV = "GPUC_POD_ID"
END_MARKER_MAX = 256
_TRUE = ("1", "true", "yes", "on")


def flag(environ: Mapping[str, str], name: str) -> bool:
    """An on/off variable of the pod's environment (KEEP_ALIVE, DRY_RUN)."""
    return environ.get(name, "").strip().lower() in _TRUE


class AgentConfig:
    """core.podconfig.PodConfig as the pod reads it: against its one declaration (core/wire.py reads the bundle's
    JSON Schema of the pydantic model), every field's type and bound checked and the defaults filled in from
    it. Its fields are its attributes; it cannot be changed."""

    DOC = "PodConfig"
    __slots__ = ("_values",)

    def __init__(self, **fields: Any) -> None:
        try:
            values = wire.read(self.DOC, fields)
        except WireError as exc:
            raise ConfigError(f"pod config: {exc}", hint="re-run `gpuc up`: it writes the config") from None
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name: str) -> Any:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        try:
            return values[name]
        except KeyError:
            raise AttributeError(f"the pod config has no field {name!r}") from None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("the pod config cannot be changed")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AgentConfig) and self.as_dict() == other.as_dict()

    def __hash__(self) -> int:
        return hash(self.pod_id)

    def __repr__(self) -> str:
        return f"AgentConfig(pod_id={self.pod_id!r}, provider={self.provider!r})"

    def as_dict(self) -> dict[str, Any]:
        return dict(object.__getattribute__(self, "_values"))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> AgentConfig:
        # Unknown keys are left out, not fatal: an agent that refuses to start never heartbeats, and a silent
        # pod bills until the reaper's limit.
        return cls(**{str(k): v for k, v in current_names(data).items()})

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


def load_secrets(path: Path) -> dict[str, str]:
    """The pod's secrets file (core.podsecrets.render_env_file wrote it). Its values are never printed; callers use
    them for redaction."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        raise ConfigError(f"no secrets file at {path}", hint="re-run `gpuc up`: it uploads the pod token") from None
    if mode & 0o077:
        # Tightening is always safe; refusing to start would stop the heartbeats instead.
        os.chmod(path, 0o600)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {type(exc).__name__}", hint="re-run `gpuc up`") from None
    return parse_env_file(text)


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
