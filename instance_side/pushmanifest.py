"""What the periodic push keeps and publishes (instance_side/push.py): the push manifest (what the destination
holds, and what a push under way sends), the report of the last push (`<state>/push.json`, what the heartbeat
says), what an unfinished push may have left (Pending), and where each lives on the pod.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuc.instance_side.podfiles import PodPaths, atomic_write

MANIFEST_NAME = "logs/push-manifest.json"  # at the destination, beside results/ and the job's log


_VERSION = 2


Stamp = tuple[int, int]  # (size, st_mtime_ns): which version of a file


Versions = dict[str, tuple[Stamp, ...]]


def manifest_path(paths: PodPaths) -> Path:
    return paths.state / "push-manifest.json"


def state_path(paths: PodPaths) -> Path:
    return paths.state / "push.json"


def pending_path(paths: PodPaths) -> Path:
    """Versions a push that did not finish (killed, failed) may have left at the destination."""
    return paths.state / "push-pending.json"


def lock_path(paths: PodPaths) -> Path:
    return paths.state / "push.lock"


def stage_path(paths: PodPaths) -> Path:
    # Not the final sync's log stage: the two may run at once (a push under way when the job ends).
    return paths.state / "push-stage"


def held_path(paths: PodPaths) -> Path:
    return paths.state / "push-held"


@dataclass(frozen=True)
class PushManifest:
    """What the destination holds: name -> (size, mtime_ns) as of the last verified push (`files`), and while a
    push is under way what it sends, in order (`sending`), and what an unfinished push may have left (`maybe`).
    `beside`: gpuc's own files next to the results (the job's log and outcome), never restored into results/."""

    destination: str = ""
    at: float | None = None
    files: dict[str, Stamp] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)  # a name stored under an escaped key (storekeys.py)
    waiting: tuple[str, ...] = ()  # changed, and its current version not sent by this push
    sending: tuple[tuple[str, int, int], ...] = ()  # (name, size, mtime_ns): a push under way sends these, in order
    maybe: Versions = field(default_factory=dict)
    beside: tuple[str, ...] = ()
    suspect: tuple[str, ...] = ()  # may have reached the destination torn (rewritten in place while sent)
    version: int = _VERSION

    def to_json(self) -> str:
        data = {
            "version": self.version,
            "destination": self.destination,
            "at": self.at,
            "files": {name: list(stamp) for name, stamp in sorted(self.files.items())},
            "keys": dict(sorted(self.keys.items())),
            "waiting": sorted(self.waiting),
            "sending": [list(entry) for entry in self.sending],
            "maybe": {name: [list(s) for s in stamps] for name, stamps in sorted(self.maybe.items())},
            "beside": sorted(self.beside),
            "suspect": sorted(self.suspect),
        }
        return json.dumps(data, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str) -> PushManifest:
        """A manifest that cannot be read is an empty one: everything is sent again (never a file skipped)."""
        try:
            data = json.loads(text)
            files = {str(name): _stamp(stamp) for name, stamp in data["files"].items()}
            keys = {str(k): str(v) for k, v in data.get("keys", {}).items()}
            waiting = tuple(str(n) for n in data.get("waiting", []))
            sending = tuple((str(e[0]), int(e[1]), int(e[2])) for e in data.get("sending", []) if len(e) == 3)
            maybe = {str(n): tuple(_stamp(s) for s in stamps) for n, stamps in data.get("maybe", {}).items()}
            beside = tuple(str(n) for n in data.get("beside", []))
            suspect = tuple(str(n) for n in data.get("suspect", []))
            at = data.get("at")
            return cls(
                str(data.get("destination", "")),
                float(at) if at is not None else None,
                files,
                keys,
                waiting,
                sending,
                maybe,
                beside,
                suspect,
                int(data.get("version", 1)),
            )
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return cls()

    @classmethod
    def load(cls, path: Path) -> PushManifest:
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except OSError:
            return cls()


def _stamp(value: Any) -> Stamp:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a stamp is [size, mtime_ns]")
    return int(value[0]), int(value[1])


@dataclass(frozen=True)
class PushReport:
    """The outcome of one push (`<state>/push.json`). `at`/`files`/`destination`: the last VERIFIED push
    (kept when a later one fails); `error`: the latest push's failure, None once one succeeds."""

    at: float | None = None
    files: int = 0
    sent: int = 0
    sent_bytes: int = 0
    waiting: int = 0
    destination: str = ""
    error: str | None = None
    failed_at: float | None = None

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True) + "\n"

    @classmethod
    def load(cls, paths: PodPaths) -> PushReport | None:
        try:
            data = json.loads(state_path(paths).read_text(encoding="utf-8"))
            return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})
        except (OSError, ValueError, TypeError):
            return None

    def summary(self) -> str:
        if self.error:
            return f"FAILED: {self.error}"
        wait = f", {self.waiting} still being written (next push)" if self.waiting else ""
        sent = f"{self.sent} changed files ({self.sent_bytes} bytes) sent"
        return f"{sent}, {self.files} in all at {self.destination}{wait}"


# -- what one push sends ----------------------------------------------------------------------------------
FILE, SNAPSHOT, HELD = "file", "snapshot", "held"


@dataclass(frozen=True)
class Send:
    """One version of one file, as a push sends it: the file as it is (FILE, settled), a copy of it made now
    (SNAPSHOT, still being written at two pushes in a row), or the copy an earlier push kept (HELD)."""

    name: str
    size: int
    mtime: int
    how: str

    @property
    def stamp(self) -> Stamp:
        return self.size, self.mtime


# -- what may be at the destination besides the last verified push ----------------------------------------
def merged_versions(a: Mapping[str, tuple[Stamp, ...]], b: Mapping[str, tuple[Stamp, ...]]) -> Versions:
    out = {n: tuple(v) for n, v in a.items()}
    for name, stamps in b.items():
        out[name] = tuple(dict.fromkeys((*out.get(name, ()), *stamps)))
    return out


@dataclass(frozen=True)
class Pending:
    """What a push that did not finish (killed, failed) may have left at the destination beyond the last verified
    push: versions by name, and files that may have gone torn (`suspect`). Kept on the pod until a verified push
    sends those names again; told to a restore through the manifest (`maybe`, `suspect`)."""

    versions: Versions = field(default_factory=dict)
    suspect: tuple[str, ...] = ()

    def adding(self, sends: Iterable[Send]) -> Pending:
        added: dict[str, tuple[Stamp, ...]] = {}
        for send in sends:
            added[send.name] = (*added.get(send.name, ()), send.stamp)
        return Pending(merged_versions(self.versions, added), self.suspect)

    def after(self, sent: Collection[str], present: Collection[str]) -> Pending:
        """Once a push verified: what it sent is whole at the destination; a file gone from results/ is no longer
        listed (never restored), so what was left of it no longer matters."""
        versions = {n: v for n, v in self.versions.items() if n in present and n not in sent}
        return Pending(versions, tuple(n for n in self.suspect if n in present and n not in sent))

    @classmethod
    def load(cls, paths: PodPaths, where: str) -> Pending:
        try:
            data = json.loads(pending_path(paths).read_text(encoding="utf-8"))
            if data.get("destination") != where:
                return cls()
            versions = {str(n): tuple(_stamp(s) for s in stamps) for n, stamps in data["names"].items()}
            return cls(versions, tuple(str(n) for n in data.get("suspect", [])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls()

    def save(self, paths: PodPaths, where: str) -> None:
        if not self.versions and not self.suspect:
            with contextlib.suppress(OSError):
                pending_path(paths).unlink()
            return
        names = {n: [list(s) for s in stamps] for n, stamps in sorted(self.versions.items())}
        data = {"destination": where, "names": names, "suspect": list(self.suspect)}
        atomic_write(pending_path(paths), json.dumps(data) + "\n", 0o600)
