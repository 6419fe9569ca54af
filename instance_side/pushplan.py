"""What one push sends, and in what order (instance_side/push.py says why): every changed file's current
version and every kept copy, oldest modification first, up to the first that cannot go yet.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from gpuc.instance_side.pushmanifest import FILE, HELD, SNAPSHOT, PushManifest, Send, Stamp
from gpuc.instance_side.scan import Listing

# GPUC_SYNC_SETTLE_S's default (core/settings.py; the pod reads its own from core/podconfig.py's PodConfig, and a
# test holds the three equal): a file modified this recently may still be being written.
SETTLE_S = 5.0


# A file still being written at two pushes in a row is sent as a copy of what it holds, if it is this small; a
# larger one (a checkpoint being saved) waits until it settles.
SNAPSHOT_MAX = 64 * 1024 * 1024


@dataclass(frozen=True)
class Plan:
    send: tuple[Send, ...]  # in the order they go: oldest modification first
    waiting: tuple[str, ...]  # changed, and their current version not sent this time


def plan(
    listing: Listing,
    last: PushManifest,
    now: float,
    settle_s: float,
    *,
    held: Mapping[str, Stamp] | None = None,
    known: Collection[str] = (),
) -> Plan:
    """What to send, in what order: every changed file's current version and every kept copy, oldest
    modification first, up to (not including) the first one that cannot go yet -- modified within `settle_s` of
    `now` (read AFTER the listing: a file written while the push listed is new, never settled), and not a small
    file already waiting at the last push. Files of one modification time go together or not at all; among them,
    those the destination holds no version of (not in `known`) go first. A modification time further ahead of
    `now` than the window was not made by a write now (a time copied with the file, a clock set back): such a file
    is whole, and takes its place at the window's edge rather than wait for the clock."""
    horizon = int((now - settle_s) * 1e9)
    ahead = int((now + settle_s) * 1e9)
    held = held or {}
    candidates: list[tuple[int, bool, str, str | None, int]] = []  # (when, known, name, how, size)

    def when(mtime: int) -> int:
        return horizon if mtime > ahead else mtime

    changed = []
    for name, size in listing.files.items():
        mtime = listing.mtimes.get(name, 0)
        there = last.files.get(name)
        if there == (size, mtime):
            continue
        changed.append(name)
        how: str | None = FILE
        if horizon < mtime <= ahead:
            how = SNAPSHOT if name in last.waiting and size <= SNAPSHOT_MAX else None
        candidates.append((when(mtime), name in known, name, how, size))
        kept = held.get(name)
        if kept is not None and kept[1] < mtime and kept[1] > (there or (0, -1))[1]:
            candidates.append((when(kept[1]), name in known, name, HELD, kept[0]))
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))
    stop = min((c[0] for c in candidates if c[3] is None), default=None)
    chosen = [c for c in candidates if stop is None or c[0] < stop]
    current = {c[2] for c in chosen if c[3] != HELD}
    sends = tuple(
        Send(c[2], c[4], held[c[2]][1] if c[3] == HELD else listing.mtimes.get(c[2], 0), str(c[3]))
        for c in chosen
        if c[3] != HELD or c[2] not in current
    )
    return Plan(sends, tuple(sorted(n for n in changed if n not in current)))
