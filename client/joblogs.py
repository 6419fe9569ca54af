"""The job's log and outcome as the laptop sees them: on the live pod (over its access), then, once the pod
is gone, at the results destination where the pod's sync put them (`<dest>/logs/job.log`,
`<dest>/logs/outcome.json`: file://, s3:// buckets, and the git remote's `results/<run_id>/`).

What is printed is the job's own output: a secret the job prints is the user's business, but the values
gpuc holds (provider keys, the admin token) are masked wherever they appear.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from gpuc.client.provision import results_bucket_for
from gpuc.core.errors import GpucError
from gpuc.core.providers.base import PodAccess
from gpuc.core.redact import MASK, redact
from gpuc.core.settings import Settings
from gpuc.instance_side.joblog import OUTCOME_FORMAT
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

# Run on the pod (its own python; stdlib and gpuc.core.podpaths only): the job log from an offset, the
# outcome, whether the pod ended. The bytes travel base64-encoded: the job's output need not be UTF-8.
POD_LOG_PROBE = """
import base64, json, os, sys
from gpuc.core.podpaths import PodPaths
paths = PodPaths.from_env()
offset, most = int(sys.argv[1]), int(sys.argv[2])
try:
    with open(paths.job_log, 'rb') as fh:
        size = os.fstat(fh.fileno()).st_size
        fh.seek(min(offset, size))
        data = fh.read(most)
except FileNotFoundError:
    size, data = None, b''
try:
    with open(paths.outcome) as fh:
        outcome = json.load(fh)
except (OSError, ValueError):
    outcome = None
try:
    with open(paths.ended) as fh:
        ended = fh.read().strip()
except OSError:
    ended = None
print(json.dumps({'size': size, 'data': base64.b64encode(data).decode(), 'outcome': outcome, 'ended': ended}))
"""


@dataclass(frozen=True)
class PodLogRead:
    data: bytes
    size: int | None  # None: no job log on the pod (yet)
    outcome: dict[str, Any] | None
    ended: str | None


def read_pod_log(access: PodAccess, offset: int, most: int = CHUNK_BYTES) -> PodLogRead:
    """One read of the pod's job log from `offset`. Raises GpucError when the pod does not answer."""
    code, out = access.run(["python", "-c", POD_LOG_PROBE, str(offset), str(most)], timeout_s=60.0)
    lines = [line for line in out.strip().splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise GpucError(f"could not read the job log on the pod (exit {code})", hint="is the pod still running?")
    try:
        found = json.loads(lines[-1])
        data = base64.b64decode(found["data"])
    except (ValueError, KeyError, TypeError):
        raise GpucError(
            "the pod answered the log read with something unexpected", hint="is gpuc the same version there?"
        ) from None
    outcome = found.get("outcome")
    return PodLogRead(
        data=data,
        size=found.get("size") if isinstance(found.get("size"), int) else None,
        outcome=outcome if isinstance(outcome, dict) and outcome.get("format") == OUTCOME_FORMAT else None,
        ended=found.get("ended") if isinstance(found.get("ended"), str) else None,
    )


# -- printing ---------------------------------------------------------------------------------------
def gpuc_secrets(settings: Settings) -> list[str]:
    return [v for v in settings.secret_values() if len(v) >= 4]


class LogPrinter:
    """Writes the job's output as it comes, masking gpuc's secret values. A value split between two reads
    must still be caught: bytes after the last line break (or carriage return: a progress bar) wait for
    the next read, up to a bound."""

    def __init__(self, out: BinaryIO, secrets: list[str], hold_max: int = 64 * 1024) -> None:
        self.out = out
        self.secrets = sorted({s.encode() for s in secrets if s}, key=len, reverse=True)
        self.hold_max = hold_max
        self.pending = b""
        self.printed = 0  # bytes of the log consumed (held bytes included)

    def feed(self, data: bytes) -> None:
        self.printed += len(data)
        buffer = self.pending + data
        cut = max(buffer.rfind(b"\n"), buffer.rfind(b"\r")) + 1
        if cut == 0 and len(buffer) > self.hold_max:
            cut = len(buffer)
        self.pending = buffer[cut:]
        self._write(buffer[:cut])

    def flush(self) -> None:
        self._write(self.pending)
        self.pending = b""

    def _write(self, data: bytes) -> None:
        if not data:
            return
        for secret in self.secrets:
            data = data.replace(secret, MASK.encode())
        with contextlib.suppress(OSError, ValueError):
            self.out.write(data)
            self.out.flush()


# -- the results destination --------------------------------------------------------------------------
class Place(Protocol):
    def describe(self) -> str: ...

    def read(self, name: str) -> bytes | None:
        """The file at `<dest>/<name>`, None when it is not there; GpucError when the place cannot be read."""
        ...


class FilePlace:
    def __init__(self, bucket_dir: Path, experiment: str, run_id: str) -> None:
        self.dest = FileBucketSync(bucket_dir, experiment, run_id).dest

    def describe(self) -> str:
        return f"file://{self.dest}/"

    def read(self, name: str) -> bytes | None:
        try:
            return (self.dest / name).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise GpucError(f"cannot read {self.dest / name}: {exc.strerror or exc}") from None


class S3Place:
    def __init__(self, url: str, experiment: str, run_id: str, settings: Settings) -> None:
        creds = {
            S3_KEY_ENV: settings.s3_access_key_id.get_secret_value() if settings.s3_access_key_id else "",
            S3_SECRET_ENV: settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else "",
        }
        self.sync = S3Sync(url, experiment, run_id, endpoint_url=settings.s3_endpoint_url, credentials=creds)

    def describe(self) -> str:
        return self.sync.describe()

    def read(self, name: str) -> bytes | None:
        # Lazy: botocore (with boto3) loads only for an s3:// destination, never for `gpuc logs` of a live pod.
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.sync.client().get_object(Bucket=self.sync.bucket, Key=f"{self.sync.base}/{name}")
            return bytes(answer["Body"].read())
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise GpucError(
                f"reading {self.describe()}{name} failed: {exc.response.get('Error', {}).get('Code')}",
                hint="check GPUC_RESULTS_BUCKET, GPUC_S3_ENDPOINT_URL and the S3 keys in your .env",
            ) from None
        except BotoCoreError as exc:
            raise GpucError(
                f"reading {self.describe()}{name} failed: {type(exc).__name__}",
                hint="check GPUC_S3_ENDPOINT_URL and your network",
            ) from None


class GitPlace:
    """The experiment's repo, where small results (and the log) are committed under results/<run_id>/.
    Read from a blob-less shallow clone in a temporary folder: only the files asked for are fetched."""

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

    def describe(self) -> str:
        return self.git.describe()

    def read(self, name: str) -> bytes | None:
        clone = self._checkout()
        proc = self._git(["show", f"HEAD:{self.git.subdir}/{name}"], cwd=clone)
        return proc.stdout if proc.returncode == 0 else None

    def close(self) -> None:
        if self._clone is not None:
            shutil.rmtree(self._clone.parent, ignore_errors=True)
            self._clone = None

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

    def _git(self, args: list[str], cwd: Path | None) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["git", *git_auth_args(self.git.remote, self.git.env), *args],
                cwd=cwd,
                env=self.git.env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
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

    def read(self, name: str) -> Found | None:
        for place in self.places:
            try:
                data = place.read(name)
            except GpucError as exc:
                self.errors.append(exc.message)
                continue
            if data is not None:
                return Found(data, place)
        return None

    def describe(self) -> str:
        return " and ".join(p.describe() for p in self.places) or "nowhere (no results bucket or git remote set)"

    def close(self) -> None:
        for place in self.places:
            close: Callable[[], None] | None = getattr(place, "close", None)
            if close is not None:
                close()


def parse_outcome(data: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    try:
        found = json.loads(data)
    except ValueError:
        return None
    return found if isinstance(found, dict) and found.get("format") == OUTCOME_FORMAT else None


__all__ = [
    "JOB_LOG_NAME",
    "OUTCOME_NAME",
    "Destination",
    "LogPrinter",
    "PodLogRead",
    "gpuc_secrets",
    "parse_outcome",
    "read_pod_log",
    "result_places",
]
