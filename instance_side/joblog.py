"""The job's output and outcome, kept on the pod so they outlive the laptop and (synced) the pod.

- `JobLogTee` copies everything the job writes (stdout and stderr, merged, as a terminal shows them) into
  `PodPaths.job_log` from a thread, and echoes it to the wrapper's own stdout when someone reads that (a
  terminal or a pipe; not the detached `job.out` file, which would hold a second copy). The log keeps its
  first `cap` bytes; past them it keeps the last `tail` bytes in memory and appends them at the job's
  exit behind an omission marker: the traceback at the end is what a failed run is debugged from.
- `write_outcome` records what the laptop reports after `--wait` (exit code, duration, ...) in
  `PodPaths.outcome`, next to the exit-code file the wrapper writes first.
- Each job's own copy of both, under its job id in `PodPaths.jobs` (`<id>.log`: the same file as job.log while
  the job runs, a hard link; `<id>.json`): a pod that runs another job (a warm pod) starts a fresh job.log and
  keeps the last one's, and the sync sends each job's as logs/jobs/<id>.* (joblogsync.py).

Never raises on I/O: a full disk must not stop the job or its ending.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import IO, Any

from gpuc.instance_side.podfiles import PodPaths, atomic_write

LOG_CAP_BYTES = 100 * 1024 * 1024
TAIL_BYTES = 1024 * 1024
READ_CHUNK = 64 * 1024
OUTCOME_FORMAT = "gpuc-outcome/1"
# The endings the outcome records (the pod is still there after the job: why); the laptop reads no other.
KEPT_ENDINGS = ("kept_sync_failed", "kept_alive", "destroy_failed")
# Who ended the pod under a job that never exited (the outcome's `ended_by`): the laptop says so.
ENDED_BY = {
    "idle_destroy": "the pod's agent ended it, idle",
    "deadline_destroy": "the pod's agent ended it at its deadline",
    "phone_destroy": "ended from the phone (destroy now)",
}
# A job's daemon child may keep the output pipe open after the job exits: wait this long, then go on.
DRAIN_WAIT_S = 5.0
# A job id that names files (gpuc's are 10 hex digits): anything else keeps no copy of its own, never a path.
JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def job_files(paths: PodPaths, job_id: object) -> tuple[Path, Path] | None:
    """This job's own log and outcome under `PodPaths.jobs`; None for a job with no usable id."""
    if not isinstance(job_id, str) or not JOB_ID_RE.match(job_id):
        return None
    return paths.jobs / f"{job_id}.log", paths.jobs / f"{job_id}.json"


def echo_fd() -> int | None:
    """fd 1 when someone reads the wrapper's stdout (a terminal, a pipe, an ssh session); None when it is a
    regular file or /dev/null (the detached start: the log file already holds the output)."""
    try:
        mode = os.fstat(1).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISCHR(mode) and not os.isatty(1):
        return None  # /dev/null
    return 1


class JobLogTee:
    def __init__(
        self,
        path: Path,
        *,
        echo: int | None,
        cap_bytes: int = LOG_CAP_BYTES,
        tail_bytes: int = TAIL_BYTES,
        keep_as: Path | None = None,
    ) -> None:
        self.path = path
        self.keep_as = keep_as  # this job's own name for the same log (job_files), kept after the next job
        self.echo = echo
        self.cap = cap_bytes
        self.tail_bytes = tail_bytes
        self.written = 0
        self.omitted = 0
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """A fresh log for this job: a new file, never the last job's truncated (its own name keeps it)."""
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if self._fd is not None and self.keep_as is not None:
            keep_file(self.path, self.keep_as, link=True)

    def start(self, pipe: IO[bytes]) -> None:
        self._thread = threading.Thread(target=self._pump, args=(pipe,), name="job-log", daemon=True)
        self._thread.start()

    def _pump(self, pipe: IO[bytes]) -> None:
        fd = pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError:
                break
            if not chunk:
                break
            self._take(chunk)
        with contextlib.suppress(OSError):
            pipe.close()

    def note(self, text: str) -> None:
        """A line of gpuc's own in the job's log (why the job could not start)."""
        self._take(text.encode(errors="replace"))

    def _take(self, chunk: bytes) -> None:
        with self._lock:
            room = max(0, self.cap - self.written)
            head, rest = chunk[:room], chunk[room:]
            if head and self._fd is not None:
                try:
                    os.write(self._fd, head)
                except OSError:
                    self._fd_failed()
            self.written += len(head)
            if rest:
                self._tail += rest
                overflow = len(self._tail) - self.tail_bytes
                if overflow > 0:
                    del self._tail[:overflow]
                    self.omitted += overflow
        if self.echo is not None:
            try:
                os.write(self.echo, chunk)
            except OSError:
                self.echo = None  # a dropped ssh: the log file still gets everything

    def _fd_failed(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = None

    def finish(self, wait_s: float = DRAIN_WAIT_S) -> bool:
        """After the job's exit: drain what is left in the pipe (at most `wait_s`), then close the log
        with the kept tail. False when something (a daemon the job left) still holds the pipe open."""
        drained = True
        if self._thread is not None:
            self._thread.join(wait_s)
            drained = not self._thread.is_alive()
        with self._lock:
            if self._fd is None:
                return drained
            tail = bytes(self._tail)
            try:
                if tail or self.omitted:
                    marker = (
                        f"\n[gpuc: the log keeps its first {self.cap} bytes and its last {len(tail)} bytes;"
                        f" {self.omitted} bytes in between were not kept]\n"
                    )
                    os.write(self._fd, marker.encode() + tail)
                if not drained:
                    os.write(self._fd, b"\n[gpuc: the job exited; a process it started still holds its output]\n")
            except OSError:
                pass
            # The pump may still run (a daemon holds the pipe): it writes through the same fd under the lock,
            # so the fd stays open for it; the tail is handed over once.
            self._tail.clear()
            self.omitted = 0
            if drained:
                self._fd_failed()
        if self.keep_as is not None and not _same_file(self.path, self.keep_as):
            keep_file(self.path, self.keep_as)  # no hard link here: this job's own copy, as it ended
        return drained

    @property
    def truncated(self) -> bool:
        return self.written >= self.cap


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def keep_file(src: Path, dst: Path, *, link: bool = False) -> None:
    """`dst` as this job's own name for `src`: a hard link (the log, written on through job.log), or a copy
    where links cannot be made. Never raises: a job's own copy is a convenience, its ending is not."""
    with contextlib.suppress(OSError):
        dst.parent.mkdir(mode=0o700, exist_ok=True)
        dst.unlink(missing_ok=True)
        if link:
            try:
                os.link(src, dst)
                return
            except OSError:
                pass
        shutil.copyfile(src, dst)


def write_outcome(paths: PodPaths, data: dict[str, Any]) -> None:
    text = json.dumps({"format": OUTCOME_FORMAT, **data}, sort_keys=True) + "\n"
    with contextlib.suppress(OSError):
        atomic_write(paths.outcome, text, 0o644)
    own = job_files(paths, data.get("job_id"))
    if own is not None:
        with contextlib.suppress(OSError):
            own[1].parent.mkdir(mode=0o700, exist_ok=True)
            atomic_write(own[1], text, 0o644)


def note_pod_end(paths: PodPaths, kind: str, why: str) -> None:
    """Before the sync that precedes a destroy under a running job: the synced outcome says who ended it
    and why, not only that the job did not finish."""
    outcome = read_outcome(paths)
    if kind in ENDED_BY and outcome is not None and outcome.get("exit_code") is None:
        outcome.pop("format", None)
        write_outcome(paths, {**outcome, "ended_by": kind, "ended_why": why[:200]})


INDEX_FIELDS = ("job_id", "started_at", "ended_at", "exit_code", "duration_s", "ended_by")


def jobs_index(paths: PodPaths) -> str | None:
    """Every job this pod ran, oldest first, from each one's own outcome (PodPaths.jobs): its id, start, end,
    exit code. What `gpuc logs POD --jobs` lists from the destination. None when no job has an id."""
    rows = []
    with contextlib.suppress(OSError):
        for path in paths.jobs.glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(data, dict) and job_files(paths, data.get("job_id")) is not None:
                    rows.append({k: data.get(k) for k in INDEX_FIELDS})
    if not rows:
        return None
    rows.sort(key=lambda row: row["started_at"] if isinstance(row["started_at"], (int, float)) else 0.0)
    return json.dumps({"format": "gpuc-jobs/1", "jobs": rows}, indent=1, sort_keys=True) + "\n"


def read_outcome(paths: PodPaths) -> dict[str, Any] | None:
    try:
        data = json.loads(paths.outcome.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == OUTCOME_FORMAT else None


def outcome_bytes(paths: PodPaths, most: int) -> bytes | None:
    """At most `most` bytes of the outcome file as it is, for the laptop's one strict reader (a job on the pod
    may have written anything there); None when there is none, or it cannot be read."""
    try:
        with paths.outcome.open("rb") as fh:
            return fh.read(most)
    except OSError:
        return None


def read_job_log(paths: PodPaths, offset: int, most: int) -> tuple[int | None, bytes]:
    """(the job log's size, at most `most` of its bytes from `offset`); (None, b"") while there is no log.
    Raises OSError when the log is there but cannot be read."""
    try:
        with paths.job_log.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(min(offset, size))
            return size, fh.read(most)
    except FileNotFoundError:
        return None, b""


def clear_outcome(paths: PodPaths) -> None:
    """A new job starts: the previous job's outcome must never be taken for this one's."""
    for path in (paths.outcome, paths.exit_code):
        with contextlib.suppress(FileNotFoundError, OSError):
            path.unlink()


def last_line(path: Path, limit: int = 200) -> str | None:
    """The job log's last non-empty line (a FAILED job's error, as a notification quotes it), or None."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            tail = fh.read()
    except OSError:
        return None
    for raw in reversed(tail.decode("utf-8", "replace").replace("\r", "\n").splitlines()):
        if raw.strip():
            return raw.strip()[:limit]
    return None
