"""The job's log and outcome once the pod is gone: at the results destination where the pod's sync put
them (`<dest>/logs/job.log`, `<dest>/logs/outcome.json`: file://, s3:// buckets, and the git remote's
`results/<run_id>/`).

Everything read here is the pod's word (a job, or a stranger, can put anything at the destination): the
outcome goes through the one strict reader (jobs/outcome_file.py), and a place's file is read by ranges,
never whole.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from gpuc.client.jobs.outcome_file import OUTCOME_MAX_BYTES, OutcomeRead, parse_outcome
from gpuc.client.jobs.podlog import LOG_PRINT_MAX, LogPrinter
from gpuc.client.onpod.access import results_bucket_for
from gpuc.core.errors import GpucError
from gpuc.core.redact import redact
from gpuc.core.settings import Settings
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

GIT_READ_TIMEOUT_S = 180.0
READ_BYTES = 1024 * 1024  # one read of a file at the destination


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

    def print_log(self, printer: LogPrinter, start: int = 0, part_bytes: int = READ_BYTES) -> Place | None:
        """The job log from `start` into `printer`, read by parts; the place it came from, None if none has it."""
        found = self.read(JOB_LOG_NAME, start, part_bytes)
        if found is None:
            return None
        data, offset = found.data, start
        while data and not printer.full:
            printer.feed(data)
            offset += len(data)
            try:
                data = found.place.read(JOB_LOG_NAME, offset, part_bytes) or b""
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

