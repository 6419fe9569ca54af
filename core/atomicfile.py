"""One way to replace a file whole, for the laptop (the ledger, the git hook) and the pod (its markers,
the job's pid and outcome, the kept state).

Standard library only: the pod agent imports it for its whole life (<= 30 MB resident).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path


def atomic_write(path: Path, text: str, mode: int = 0o600, *, keep_mode: bool = False) -> None:
    """Replace `path` whole: readers see the old content or the new, never half of either, and so does
    whoever reads it after a crash (the data is fsynced before the rename, the folder after it).

    The new file gets `mode` (less the umask); `keep_mode` keeps an existing file's mode instead (the
    ledger, which its owner may have made readable to others on purpose)."""
    if keep_mode and path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    # Unique per process and thread: two writers never share (and never truncate) one temporary file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # Best effort: the rename is done. Some volumes (FUSE, network filesystems such as a pod's) refuse to
    # fsync a folder, and that must not turn a write that happened into an error its caller acts on.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
