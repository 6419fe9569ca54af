"""What one push sent (Manifest), the shape of a destination (ResultsSync: a whole push and its verification;
BucketSync: files a few at a time), and the rules every destination shares: a path built only from plain names,
and a verification that every file sent is listed back at its size.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpuc.core.errors import SyncError
from gpuc.instance_side.scan import in_written_order, scan_results

# Same shapes the laptop enforces (core.models); re-checked here because they become path parts.
_EXPERIMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


_RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]{3,40}$")


@dataclass(frozen=True)
class Manifest:
    """What one push sent: relative posix path -> size in bytes."""

    destination: str
    files: dict[str, int] = field(default_factory=dict)
    note: str | None = None
    parts: tuple[Manifest, ...] = ()  # a split push: what each destination received
    links: dict[str, str] = field(default_factory=dict)  # a link that holds no data -> its target
    keys: dict[str, str] = field(default_factory=dict)  # a name the destination cannot store -> its key
    beside: str | None = None  # a split push: what went beside the results ("job log and outcome")

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    def stored(self) -> dict[str, int]:
        """What the destination holds, by the key each file is stored under."""
        return {self.keys.get(name, name): size for name, size in self.files.items()}

    def summary(self) -> str:
        if self.note:
            return self.note
        return f"{self._sent()} to {self.destination}{self.entries_note()}"

    def short(self) -> str:
        """Without the destination: the notification's words (the laptop knows where results go, and a
        path in a pod's words reaches the phone defanged, `file[:]///...`)."""
        if self.beside is not None and self.parts:
            return f"{self.parts[0].short()}; {self.beside} beside them"
        if self.note:
            return self.note
        return f"{self._sent()}{self.entries_note()}"

    def _sent(self) -> str:
        count = len(self.files)
        return f"{count} file{'' if count == 1 else 's'}, {self.total_bytes} bytes"

    def entries_note(self) -> str:
        """What was not sent as a file, and why nothing was lost: "; 2 links recorded, 1 name escaped"."""
        said = []
        if self.links:
            said.append(f"{len(self.links)} link{'s' if len(self.links) > 1 else ''} recorded")
        if self.keys:
            said.append(f"{len(self.keys)} name{'s' if len(self.keys) > 1 else ''} escaped")
        return f"; {', '.join(said)}" if said else ""


class ResultsSync(Protocol):
    def describe(self) -> str: ...

    def push(self, results_dir: Path) -> Manifest: ...

    def verify(self, manifest: Manifest) -> bool: ...


def check_run_names(experiment: str, run_id: str) -> None:
    if not _EXPERIMENT.match(experiment) or not _RUN_ID.match(run_id):
        raise SyncError(
            f"refusing to sync to a path built from {experiment!r}/{run_id!r}",
            hint="experiment and run id must be plain names (gpuc up sets them)",
        )


def nothing_to_sync(destination: str, results_dir: Path) -> Manifest:
    return Manifest(destination, note=f"no {results_dir.name}/ directory: nothing to sync")


def push_all(sync: BucketSync, results_dir: Path) -> Manifest:
    """Every file of results/ through `sync`, and the links that hold no data recorded beside them."""
    if not results_dir.is_dir():
        return nothing_to_sync(sync.describe(), results_dir)
    listing = scan_results(results_dir)
    return dataclasses.replace(sync.push_files(results_dir, in_written_order(listing)), links=listing.links)


def listing_matches(sent: Mapping[str, int], remote: Mapping[str, int]) -> bool:
    """Every file sent is at the remote with the same size (extra remote files are someone else's)."""
    return all(remote.get(name) == size for name, size in sent.items())


class BucketSync(Protocol):
    def describe(self) -> str: ...

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest: ...

    def verify(self, manifest: Manifest) -> bool: ...
