"""gpuc's own files beside the results at the destination (the job's log and outcome, each job's own, the
entries recorded): their names there, and the copy of a file as it is now that is sent of them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

# Where they land at the destination, beside the files of results/ (`gpuc logs` reads them there).
JOB_LOG_NAME = "logs/job.log"


OUTCOME_NAME = "logs/outcome.json"


ENTRIES_NAME = "logs/entries.json"  # the links recorded and the names escaped, when there are any


# Each job's own log and outcome (logs/jobs/<job id>.log, .json), never overwritten by another job's, and the
# list of every job the pod ran (what `gpuc logs POD --jobs` reads): a warm pod runs many.
JOBS_DIR = "logs/jobs/"


JOBS_INDEX = "logs/jobs.json"


def per_job(name: str) -> bool:
    """One of the per-job names beside the results (not the latest job's log and outcome)."""
    return name.startswith(JOBS_DIR) or name == JOBS_INDEX


_OMITTED = "\n[gpuc: {n} bytes of the log omitted here to fit the destination]\n"


def snapshot(src: Path, dst: Path, limit: int | None) -> None:
    """A copy of `src` as it is now; over `limit` bytes, its head and its tail (the traceback is at the end)."""
    size = src.stat().st_size
    if limit is None or size <= limit:
        with src.open("rb") as fin, dst.open("wb") as fout:
            # Only the bytes there now: a log that grows while it is copied must match the size we list.
            shutil.copyfileobj(_Limited(fin, size), fout)
        return
    marker = _OMITTED.format(n=size - limit).encode()
    half = max(0, (limit - len(marker)) // 2)
    with src.open("rb") as fin, dst.open("wb") as fout:
        fout.write(fin.read(half))
        fin.seek(size - half)
        fout.write(marker)
        fout.write(fin.read(half))


class _Limited:
    def __init__(self, fh: Any, size: int) -> None:
        self.fh = fh
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.fh.read(n) if n > 0 else b""
        self.left -= len(data)
        return bytes(data)
