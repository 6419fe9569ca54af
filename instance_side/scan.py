"""What results/ holds, as a copy would see it: regular files by relative path (links to files and folders
followed), the links that hold no data (dangling, a loop, a device) recorded with their target, and each file's
modification time (the order every push sends in). A folder or a file that cannot be read is a SyncError naming
it: its data would be lost.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from gpuc.core.errors import SyncError


@dataclass(frozen=True)
class Listing:
    """What results/ holds: regular files by relative path (links to files and folders followed, as a
    copy would see them), and the links that hold no data (dangling, a loop, a device) -> their targets."""

    files: dict[str, int] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    # name -> st_mtime_ns, as the same stat saw it: the incremental push (push.py) compares (size, mtime)
    mtimes: dict[str, int] = field(default_factory=dict)


def scan_results(root: Path) -> Listing:
    """Raises SyncError naming a folder that cannot be read (its files would be lost)."""
    listing = Listing()
    try:
        top = os.stat(root)
    except FileNotFoundError:
        return listing
    except OSError as exc:
        raise _unreadable(root.name, exc) from None
    _walk(root, root, ((top.st_dev, top.st_ino),), listing)
    return listing


def local_listing(root: Path) -> dict[str, int]:
    """The regular files under root (see scan_results)."""
    return scan_results(root).files


def _walk(root: Path, folder: Path, above: tuple[tuple[int, int], ...], out: Listing) -> None:
    """`above`: the folders on the way down, by (device, inode): a link back to one of them is a loop.
    Two links to the same folder side by side are not a loop: both paths are results, both are sent."""
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except FileNotFoundError:
        return  # removed while we walked (a job's scratch folder): it held no finished result
    except OSError as exc:
        raise _unreadable(_shown(root, folder), exc) from None
    for entry in entries:
        path = Path(entry.path)
        rel = path.relative_to(root).as_posix()
        link = entry.is_symlink()
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            if link:
                out.links[rel] = _target(path)  # dangling: whatever it named is gone, it holds no data
            continue  # else deleted between the listing and the stat: it was never a finished result
        except OSError as exc:
            if link and exc.errno == errno.ELOOP:
                out.links[rel] = _target(path)  # a loop of links: no data behind it
                continue
            raise _unreadable(_shown(root, path), exc) from None
        if stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in above:
                out.links[rel] = _target(path)  # back to a folder above: its files are sent once already
                continue
            _walk(root, path, (*above, key), out)
        elif stat.S_ISREG(st.st_mode):
            out.files[rel] = st.st_size
            out.mtimes[rel] = st.st_mtime_ns
        elif link:
            out.links[rel] = _target(path)  # to a device, a fifo or a socket: no data to keep
        # A socket or a fifo the job left in results/ holds no data to keep.


def _target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "(a folder above it)"  # a bind mount looping back, not a link


def shown(name: str) -> str:
    """A name as text that can be printed: undecodable bytes as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _shown(root: Path, path: Path) -> str:
    return shown((Path(root.name) / path.relative_to(root)).as_posix())


def _unreadable(what: str, exc: OSError) -> SyncError:
    return SyncError(
        f"cannot read {what}: {exc.strerror or exc}; it cannot be synced, so the pod is kept",
        hint="fix its permissions, then run: python -m gpuc.instance_side sync",
    )


def in_written_order(listing: Listing) -> dict[str, int]:
    """The files of `listing`, oldest modification first (ties by name): the order every push sends them in, so
    that a push cut anywhere leaves at the destination what the job had written up to some moment
    (instance_side/push.py)."""
    ordered = sorted(listing.files, key=lambda name: (listing.mtimes.get(name, 0), name))
    return {name: listing.files[name] for name in ordered}
