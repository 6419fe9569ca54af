"""The job's log and outcome as the laptop sees them: on the live pod (over its access), then, once the pod
is gone, at the results destination where the pod's sync put them (`<dest>/logs/job.log`,
`<dest>/logs/outcome.json`: file://, s3:// buckets, and the git remote's `results/<run_id>/`).

What is printed is the job's own output: a secret the job prints is the user's business, but the values
gpuc holds (provider keys, the admin token) are masked wherever they appear. Everything read here is the
pod's word (a stranger's machine, on Vast): the log is cleaned of terminal controls and bounded in size,
the outcome goes through the one strict reader (client/outcome_file.py), and a place's file is read by
ranges, never whole.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from gpuc.client.outcome_file import OUTCOME_MAX_BYTES, BadOutcome, JobOutcome, OutcomeRead, parse_outcome
from gpuc.client.provision import results_bucket_for
from gpuc.core.errors import GpucError
from gpuc.core.podjson import Unreadable, last_json_line
from gpuc.core.providers.base import PodAccess
from gpuc.core.redact import MASK, redact
from gpuc.core.settings import Settings
from gpuc.core.termsafe import clean_bytes
from gpuc.instance_side.joblog import LOG_CAP_BYTES, TAIL_BYTES
from gpuc.instance_side.sync import (
    GIT_TOKEN_ENV,
    JOB_LOG_NAME,
    OUTCOME_NAME,
    S3_KEY_ENV,
    S3_SECRET_ENV,
    FileBucketSync,
    GitSync,
    S3Sync,
    git_auth_args,
    git_environ,
)

CHUNK_BYTES = 256 * 1024
GIT_READ_TIMEOUT_S = 180.0
# What a gpuc pod's log can hold: the tee's head and tail, and its notes. A log past it is not one gpuc
# wrote (a job, or a stranger, can put anything at the destination): the rest is not printed.
LOG_PRINT_MAX = LOG_CAP_BYTES + TAIL_BYTES + 64 * 1024
READ_BYTES = 1024 * 1024  # one read of a file at the destination
JOB_LINE_MARK = b"[log] "
# A line that starts (blanks and zero-width characters aside) with "gpuc", in any case. A lookalike in
# other letters is not caught here: on a terminal gpuc's own prefix is styled, which no job output can be.
_LOOKS_LIKE_GPUC = re.compile(rb"(?im)^(?=(?:[ \t]|\xe2\x80[\x8b-\x8d]|\xe2\x81\xa0|\xef\xbb\xbf)*gpuc)")

# Run on the pod (its own python; stdlib and gpuc.core.podpaths only): the job log from an offset, the
# outcome file's bytes, whether the pod ended. Bytes travel base64-encoded (the job's output need not be
# UTF-8), and the outcome as the file holds it: the laptop's one strict reader parses it, not the pod.
POD_LOG_PROBE = """
import base64, json, os, sys
from gpuc.core.podpaths import PodPaths
paths = PodPaths.from_env()
offset, most, most_outcome = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
try:
    with open(paths.job_log, 'rb') as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(min(offset, size))
        data = fh.read(most)
except FileNotFoundError:
    size, data = None, b''
try:
    with open(paths.outcome, 'rb') as fh:
        outcome = base64.b64encode(fh.read(most_outcome)).decode()
except OSError:
    outcome = None
try:
    with open(paths.ended) as fh:
        ended = fh.read(256).strip()
except (OSError, ValueError):
    ended = None
print(json.dumps({'size': size, 'data': base64.b64encode(data).decode(), 'outcome': outcome, 'ended': ended}))
"""
POD_OUTCOME_PLACE = "the outcome file on the pod (.gpuc/outcome.json)"


@dataclass(frozen=True)
class PodLogRead:
    data: bytes
    size: int | None  # None: no job log on the pod (yet)
    outcome: OutcomeRead | None  # None: no outcome file on the pod (yet)
    ended: str | None


def read_pod_log(access: PodAccess, offset: int, most: int = CHUNK_BYTES) -> PodLogRead:
    """One read of the pod's job log from `offset`. Raises GpucError when the pod does not answer, or
    answers what cannot be read: the caller retries, or asks the provider whether the pod is gone."""
    argv = ["python", "-c", POD_LOG_PROBE, str(offset), str(most), str(OUTCOME_MAX_BYTES + 1)]
    code, out = access.read(argv, timeout_s=60.0)
    if code != 0:
        raise GpucError(f"could not read the job log on the pod (exit {code})", hint="is the pod still running?")
    try:
        found = last_json_line(out)
        size, ended = found.get("size"), found.get("ended")
        if size is not None and not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
            raise Unreadable("its log size is not a size")
        if ended is not None and not (isinstance(ended, str) and len(ended) <= 256):
            raise Unreadable("its end marker is not a short text")
        data = _base64(found.get("data"), "its log data")[:most]
        outcome = found.get("outcome")
        read = None if outcome is None else parse_outcome(_base64(outcome, "its outcome"), POD_OUTCOME_PLACE)
    except Unreadable as exc:
        raise GpucError(
            f"the pod answered the log read with something unreadable ({exc})", hint="is gpuc the same version there?"
        ) from None
    return PodLogRead(data=data, size=size, outcome=read, ended=ended)


def _base64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise Unreadable(f"{what} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise Unreadable(f"{what} is not base64 text") from None


# -- printing ---------------------------------------------------------------------------------------
def gpuc_secrets(settings: Settings) -> list[str]:
    return [v for v in settings.secret_values() if len(v) >= 4]


class LogPrinter:
    """Writes the job's output as it comes: cleaned of terminal controls (core/termsafe.py), a line that
    would pass for one of gpuc's own marked `[log] `, gpuc's secret values masked, at most `most` bytes.
    A value split between two reads must still be caught: bytes after the last line break (or carriage
    return: a progress bar) wait for the next read, up to a bound. `raw`: the bytes as the pod wrote them
    (`gpuc logs --raw`), secrets still masked."""

    def __init__(
        self,
        out: BinaryIO,
        secrets: list[str],
        hold_max: int = 64 * 1024,
        *,
        raw: bool = False,
        most: int = LOG_PRINT_MAX,
    ) -> None:
        self.out = out
        self.secrets = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
        self.hold_max = hold_max
        self.raw = raw
        self.most = most
        self.pending = b""
        self.printed = 0  # bytes of the log consumed (held bytes included)
        self.shown = 0  # bytes of the log written out (before cleaning), at most `most`
        self.cut_short = False  # more than `most` came: the rest is dropped (said once)
        self.at_line_start = True

    @property
    def full(self) -> bool:
        return self.cut_short

    def feed(self, data: bytes) -> None:
        self.printed += len(data)
        buffer = self.pending + data
        # A carriage return as the last byte waits: it may be the first half of a CR LF.
        cut = max(buffer.rfind(b"\n"), buffer.rfind(b"\r", 0, len(buffer) - 1)) + 1
        if cut == 0 and len(buffer) > self.hold_max:
            cut = _utf8_boundary(buffer)
        self.pending = buffer[cut:]
        self._write(buffer[:cut])

    def flush(self) -> None:
        self._write(self.pending)
        self.pending = b""

    def _write(self, data: bytes) -> None:
        if not data or self.cut_short:
            return
        room = self.most - self.shown
        data, self.cut_short = data[:room], len(data) > room
        self.shown += len(data)
        if not self.raw:
            data = self._mark(clean_bytes(data))
        for secret in self.secrets:
            data = data.replace(secret, MASK.encode())
        if self.cut_short:
            data += (
                f"\n[gpuc: the log goes on past {self.most // (1024 * 1024)} MB, more than a gpuc pod keeps;"
                " the rest is not shown]\n"
            ).encode()
        with contextlib.suppress(OSError, ValueError):
            self.out.write(data)
            self.out.flush()

    def _mark(self, data: bytes) -> bytes:
        """Job lines that start like gpuc's own (`gpuc: job exited with code 0 ...`) are marked as the log's."""
        if not data:
            return data
        if self.at_line_start:
            start = 0
        else:
            newline = data.find(b"\n")
            start = len(data) if newline < 0 else newline + 1
        self.at_line_start = data.endswith(b"\n")
        if start >= len(data) or data.lower().find(b"gpuc", start) < 0:  # C speed, unlike re.IGNORECASE
            return data
        return data[:start] + _LOOKS_LIKE_GPUC.sub(JOB_LINE_MARK, data[start:])


def _utf8_boundary(data: bytes) -> int:
    """len(data), less a UTF-8 character cut short at its end (it waits for the rest)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # the lead byte: how long its character is
            length = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if length > back else len(data)
    return len(data)


# -- the results destination --------------------------------------------------------------------------
class Place(Protocol):
    def describe(self) -> str: ...

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        """At most `most` bytes of `<dest>/<name>` from `offset` (b"" past its end), None when it is not
        there; GpucError when the place cannot be read."""
        ...


class FilePlace:
    def __init__(self, bucket_dir: Path, experiment: str, run_id: str) -> None:
        self.dest = FileBucketSync(bucket_dir, experiment, run_id).dest

    def describe(self) -> str:
        return f"file://{self.dest}/"

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        path = self.dest / name
        try:
            # Not through a symlink (a job's results could point one at the user's ~/.ssh), and not a FIFO
            # (opening one for reading would wait forever): a regular file, read where it is.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise GpucError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise GpucError(f"cannot read {path}: not a regular file")
            return os.pread(fd, most, offset)
        except OSError as exc:
            raise GpucError(f"cannot read {path}: {exc.strerror or exc}") from None
        finally:
            os.close(fd)


class S3Place:
    def __init__(self, url: str, experiment: str, run_id: str, settings: Settings) -> None:
        creds = {
            S3_KEY_ENV: settings.s3_access_key_id.get_secret_value() if settings.s3_access_key_id else "",
            S3_SECRET_ENV: settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else "",
        }
        self.sync = S3Sync(url, experiment, run_id, endpoint_url=settings.s3_endpoint_url, credentials=creds)

    def describe(self) -> str:
        return self.sync.describe()

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        # Lazy: botocore (with boto3) loads only for an s3:// destination, never for `gpuc logs` of a live pod.
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.sync.client().get_object(
                Bucket=self.sync.bucket, Key=f"{self.sync.base}/{name}", Range=f"bytes={offset}-{offset + most - 1}"
            )
            return bytes(answer["Body"].read(most))
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code"))
            if code in ("NoSuchKey", "404", "NotFound"):
                return None
            if code == "InvalidRange":  # from past its end (an empty object has no range at all)
                return b""
            raise GpucError(
                f"reading {self.describe()}{name} failed: {code}",
                hint="check GPUC_RESULTS_BUCKET, GPUC_S3_ENDPOINT_URL and the S3 keys in your .env",
            ) from None
        except BotoCoreError as exc:
            raise GpucError(
                f"reading {self.describe()}{name} failed: {type(exc).__name__}",
                hint="check GPUC_S3_ENDPOINT_URL and your network",
            ) from None


class GitPlace:
    """The experiment's repo, where small results (and the log) are committed under results/<run_id>/.
    Read from a blob-less shallow clone in a temporary folder: only the files asked for are fetched, each
    into a file there (never whole into memory), once its size is known to be one a gpuc pod writes."""

    def __init__(self, remote: str, experiment: str, run_id: str, settings: Settings) -> None:
        token = settings.git_token.get_secret_value() if settings.git_token else ""
        self._secrets = [token] if token else []
        self.git = GitSync(
            remote,
            experiment,
            run_id,
            Path(tempfile.gettempdir()),
            environ=git_environ(os.environ, {GIT_TOKEN_ENV: token} if token else {}),
            secrets=[token] if token else [],
        )
        self._clone: Path | None = None
        self._blobs: dict[str, Path | None] = {}

    def describe(self) -> str:
        return self.git.describe()

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        blob = self._blob(name)
        if blob is None:
            return None
        with blob.open("rb") as fh:
            fh.seek(offset)
            return fh.read(most)

    def close(self) -> None:
        if self._clone is not None:
            shutil.rmtree(self._clone.parent, ignore_errors=True)
            self._clone = None
            self._blobs.clear()

    def _blob(self, name: str) -> Path | None:
        if name not in self._blobs:
            clone = self._checkout()
            spec = f"HEAD:{self.git.subdir}/{name}"
            sized = self._git(["cat-file", "-s", spec], cwd=clone)
            size = sized.stdout.strip()
            if sized.returncode != 0 or not size.isdigit():
                self._blobs[name] = None
                return None
            if int(size) > LOG_PRINT_MAX:
                raise GpucError(f"{self.describe()}{name} is {int(size)} bytes, more than a gpuc pod writes: not read")
            path = clone.parent / f"blob-{len(self._blobs)}"
            with path.open("wb") as fh:
                shown = self._git(["cat-file", "blob", spec], cwd=clone, stdout=fh)
            self._blobs[name] = path if shown.returncode == 0 else None
        return self._blobs[name]

    def _checkout(self) -> Path:
        if self._clone is None:
            folder = Path(tempfile.mkdtemp(prefix="gpuc-logs-"))
            clone = folder / "repo"
            args = ["clone", "--quiet", "--depth", "1", "--filter=blob:none", "--no-checkout", self.git.remote]
            proc = self._git([*args, str(clone)], cwd=None)
            if proc.returncode != 0:
                shutil.rmtree(folder, ignore_errors=True)
                said = redact(proc.stderr.decode(errors="replace").strip(), self._secrets)
                detail = f"{self.git.describe()}: {said}"
                raise GpucError(f"cannot read the results repo ({detail[-300:]})", hint="check GPUC_GIT_REMOTE")
            self._clone = clone
        return self._clone

    def _git(
        self, args: list[str], cwd: Path | None, stdout: BinaryIO | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["git", *git_auth_args(self.git.remote, self.git.env), *args],
                cwd=cwd,
                env=self.git.env,
                stdin=subprocess.DEVNULL,
                stdout=stdout if stdout is not None else subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=GIT_READ_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise GpucError(f"git failed reading {self.describe()}: {type(exc).__name__}") from None


def result_places(settings: Settings, provider: str, experiment: str, run_id: str) -> list[Place]:
    """Where the pod's sync sent its results and log, in the order to look (git first: a log under its
    size limit went there; a larger one to the bucket)."""
    places: list[Place] = []
    if settings.git_remote:
        places.append(GitPlace(settings.git_remote, experiment, run_id, settings))
    bucket = results_bucket_for(settings, local=provider == "local")
    if bucket:
        url = urlparse(bucket)
        if url.scheme == "file" and url.path:
            places.append(FilePlace(Path(unquote(url.path)), experiment, run_id))
        elif url.scheme == "s3":
            places.append(S3Place(bucket, experiment, run_id, settings))
    return places


@dataclass
class Found:
    data: bytes
    place: Place


@dataclass
class Destination:
    """The places of one run's results; `errors` keeps why a place could not be read."""

    places: list[Place]
    errors: list[str] = field(default_factory=list)

    def read(self, name: str, offset: int = 0, most: int = READ_BYTES) -> Found | None:
        """From the first place that has `name`."""
        for place in self.places:
            try:
                data = place.read(name, offset, most)
            except GpucError as exc:
                self.errors.append(exc.message)
                continue
            if data is not None:
                return Found(data, place)
        return None

    def read_outcome(self) -> OutcomeRead | None:
        """The outcome synced beside the results, through the one strict reader; None when none is there."""
        found = self.read(OUTCOME_NAME, most=OUTCOME_MAX_BYTES + 1)
        return None if found is None else parse_outcome(found.data, f"{found.place.describe()}{OUTCOME_NAME}")

    def print_log(self, printer: LogPrinter, start: int = 0) -> Place | None:
        """The job log from `start` into `printer`, read by parts; the place it came from, None if none has it."""
        found = self.read(JOB_LOG_NAME, start)
        if found is None:
            return None
        data, offset = found.data, start
        while data and not printer.full:
            printer.feed(data)
            offset += len(data)
            try:
                data = found.place.read(JOB_LOG_NAME, offset, READ_BYTES) or b""
            except GpucError as exc:
                self.errors.append(exc.message)
                break
        printer.flush()
        return found.place

    def describe(self) -> str:
        return " and ".join(p.describe() for p in self.places) or "nowhere (no results bucket or git remote set)"

    def close(self) -> None:
        for place in self.places:
            close: Callable[[], None] | None = getattr(place, "close", None)
            if close is not None:
                close()


__all__ = [
    "JOB_LOG_NAME",
    "OUTCOME_NAME",
    "BadOutcome",
    "Destination",
    "JobOutcome",
    "LogPrinter",
    "PodLogRead",
    "gpuc_secrets",
    "parse_outcome",
    "read_pod_log",
    "result_places",
]
