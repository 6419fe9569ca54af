"""A pod kept for its results (docs/failure-matrix.md F16): its end's sync failed, so results/ exists only on its disk.

Kept is not forever. While kept, the end is retried at the nag interval (each failed try is the nag; a
try that syncs ends the pod as usual: notify -> destroy). Fifteen minutes before the kept window is over
the user hears "stopping in 15 min"; at its end, after one last try, the pod STOPS itself (never a
destroy): GPU billing ends, the disk with results/ stays for `gpuc results POD`.

One piece of code for whoever holds the kept pod: the wrapper's reminder loop after a job's end, or the
agent after an idle or deadline end (and after a wrapper whose reminders were stopped with Ctrl-C). The
state is a file on the pod (`kept.json`), so the window does not restart when the holder changes or the
agent restarts; a lock (`kept.lock`) makes one holder at a time. The watchdog, told by each nag how long
is left, stops the pod itself if it is still running a period after that (the agent died or froze).

Standard library only: the agent holds this module for the pod's life.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Final

from gpuc.instance_side.podfiles import PodPaths, atomic_write

STOP_WARN_S = 15 * 60.0  # "stopping in 15 min": time to answer before the GPU is released
# What `tick` answers while the pod stays kept (retried or not), and once its watch has nothing left to do.
STILL_KEPT: Final = "kept_sync_failed"
ENDS_THE_WATCH = ("destroyed", "destroy_failed", "ended", "kept_stopped", "kept_alive")


@dataclass(frozen=True)
class KeptState:
    since: float  # the pod's clock: the first end whose sync failed
    kind: str  # that end, to retry as it was (its exit code goes into the notification)
    message: str
    exit_code: int | None = None
    duration_s: float | None = None
    warned: bool = False  # "stopping in 15 min" went out
    stopped_at: float | None = None

    def stop_at(self, window_s: float) -> float:
        return self.since + window_s


def kept_file(paths: PodPaths) -> Path:
    return paths.state / "kept.json"


def read_kept(paths: PodPaths) -> KeptState | None:
    """The pod's kept state, or None when it is not kept. A file that cannot be read as one keeps the pod
    kept from now (a damaged file must not lift the keep; it can only restart the window)."""
    path = kept_file(paths)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return KeptState(**raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError):
        with contextlib.suppress(OSError):
            since = path.stat().st_mtime
            return KeptState(since=since, kind="job_exit", message="kept (its state file was damaged)")
        return None


def write_kept(paths: PodPaths, state: KeptState) -> None:
    with contextlib.suppress(OSError):  # the disk may be full: that is often why the sync failed
        atomic_write(kept_file(paths), json.dumps(asdict(state)) + "\n", 0o644)


def record_kept(paths: PodPaths, state: KeptState) -> KeptState:
    """Kept from now, unless it already was: the first failed end starts the window and stays the one
    retried (a later idle or deadline end of the same kept pod does not restart it)."""
    existing = read_kept(paths)
    if existing is not None and existing.stopped_at is None:
        return existing
    write_kept(paths, state)
    return state


def clear_kept(paths: PodPaths) -> None:
    with contextlib.suppress(OSError):
        kept_file(paths).unlink()


def stopped(state: KeptState, now: float) -> KeptState:
    return replace(state, stopped_at=now)


def warned(state: KeptState) -> KeptState:
    return replace(state, warned=True)
