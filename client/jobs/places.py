"""The job's log and outcome once the pod is gone: at the results destination where the pod's sync put
them (`<dest>/logs/job.log`, `<dest>/logs/outcome.json`: file://, s3:// buckets, and the git remote's
`results/<run_id>/`).

Everything read here is the pod's word (a job, or a stranger, can put anything at the destination): the
outcome goes through the one strict reader (jobs/outcome_file.py), and a place's file is read by ranges,
never whole.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Protocol
from urllib.parse import unquote, urlparse

from gpuc.client.jobs.outcome_file import OUTCOME_MAX_BYTES, JobOutcome, OutcomeRead, parse_outcome
from gpuc.client.jobs.podlog import LOG_PRINT_MAX, LogPrinter
from gpuc.client.onpod.access import results_bucket_for
from gpuc.core.destinations import S3_KEY_ENV, S3_SECRET_ENV, S3Location, git_auth_args, git_environ
from gpuc.core.errors import GpucError
from gpuc.core.podsecrets import GIT_TOKEN_ENV
from gpuc.core.redact import redact
from gpuc.core.s3client import s3_client
from gpuc.core.settings import Settings
from gpuc.instance_side.sync import ENTRIES_NAME, JOB_LOG_NAME, OUTCOME_NAME, FileBucketSync, GitSync, shown

GIT_READ_TIMEOUT_S = 180.0
READ_BYTES = 1024 * 1024  # one read of a file at the destination


# -- the results destination --------------------------------------------------------------------------
class OutsideRun(GpucError):
    """A name the pod's word (a manifest) gave, which is no key of the run's own folder: refused, never read."""


def run_key(name: str) -> PurePosixPath:
    """`name` as a key inside the run's own folder at the destination, or OutsideRun naming it: relative, no
    empty, `.` or `..` part, no NUL (a hostile manifest's `../other-run/x` or `/home/me/.ssh/id_rsa` would
    otherwise be read into the copy: file:// joins an absolute path over the folder, S3 and git may resolve
    the dots). Every place checks it before it reads; `copy_pushed` before it copies anything."""
    if not name or "\0" in name or name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        raise OutsideRun(
            f"{name!r} is outside this run's folder at the destination: not read",
            hint="the pod's manifest names it; only the run's own keys are read",
        )
    return PurePosixPath(name)


class Place(Protocol):
    def describe(self) -> str: ...

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        """At most `most` bytes of `<dest>/<name>` from `offset` (b"" past its end), None when it is not
        there; GpucError when the place cannot be read."""
        ...


class FilePlace:
    def __init__(self, bucket_dir: Path, experiment: str, run_id: str) -> None:
        self.dest = FileBucketSync(bucket_dir, experiment, run_id).dest  # the names checked there
        self.bucket, self.run_parts = bucket_dir, (experiment, run_id)

    def describe(self) -> str:
        return f"file://{self.dest}/"

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        path = self.dest / run_key(name)
        try:
            fd = self._open(run_key(name).parts)
        except _Linked:  # a link may point anywhere on this laptop (~/.ssh)
            raise GpucError(f"cannot read {path}: it is or goes through a link, not followed out of the run") from None
        except (FileNotFoundError, NotADirectoryError):
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

    def _open(self, parts: tuple[str, ...]) -> int:
        """The file under the run's folder, one part at a time, no link followed past the bucket folder the
        user set (a job's results, or a pod's manifest, could point one at ~/.ssh), and not a FIFO (opening
        one for reading would wait forever): a regular file, read where it is."""
        folder = os.open(self.bucket, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for part in (*self.run_parts, *parts[:-1]):
                inner = _open_at(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, folder)
                os.close(folder)
                folder = inner
            return _open_at(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, folder)
        finally:
            os.close(folder)


class _Linked(Exception):
    """A part of the path is a symbolic link: never followed."""


def _open_at(part: str, flags: int, folder: int) -> int:
    try:
        return os.open(part, flags, dir_fd=folder)
    except OSError as exc:
        # O_NOFOLLOW refuses a link with ELOOP, or ENOTDIR along with O_DIRECTORY.
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
            os.stat(part, dir_fd=folder, follow_symlinks=False).st_mode
        ):
            raise _Linked(part) from None
        raise


class S3Place:
    """Read with the laptop's own key (the pod never held it: it had grants for its run's prefix)."""

    def __init__(self, url: str, experiment: str, run_id: str, settings: Settings) -> None:
        self.where = S3Location.parse(url)
        self.base = self.where.run_base(experiment, run_id)
        self.endpoint_url = settings.s3_endpoint_url
        self._creds = {
            S3_KEY_ENV: settings.s3_access_key_id.get_secret_value() if settings.s3_access_key_id else "",
            S3_SECRET_ENV: settings.s3_secret_access_key.get_secret_value() if settings.s3_secret_access_key else "",
        }
        self._client: Any = None

    def describe(self) -> str:
        via = f" via {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.where.bucket}/{self.base}/{via}"

    def read(self, name: str, offset: int, most: int) -> bytes | None:
        # Lazy: botocore (with boto3) loads only for an s3:// destination, never for `gpuc logs` of a live pod.
        from botocore.exceptions import BotoCoreError, ClientError

        run_key(name)  # under the run's prefix: `../` and a leading `/` never reach S3
        if self._client is None:
            self._client = s3_client(self.endpoint_url, self._creds)
        try:
            answer = self._client.get_object(
                Bucket=self.where.bucket, Key=f"{self.base}/{name}", Range=f"bytes={offset}-{offset + most - 1}"
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
    """The experiment's repo, where small results (and the log) are committed under results/<run_id>/ on the
    run's own branch (`gpuc-results/<run_id>`). Read from a blob-less shallow clone in a temporary folder:
    only the files asked for are fetched, each into a file there (never whole into memory), once its size is
    known to be one a gpuc pod writes."""

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
        self._branch_fetched = False
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
        run_key(name)  # under results/<run_id>/ of the repo: git resolves no `..` for us here
        if name not in self._blobs:
            clone = self._checkout()
            if not self._branch_fetched:
                self._blobs[name] = None  # the run pushed nothing to git (its branch is not there)
                return None
            spec = f"FETCH_HEAD:{self.git.subdir}/{name}"
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
            # The run's own branch (instance_side/sync.py run_branch), its blobs fetched only when read.
            branch = f"refs/heads/{self.git.branch}"
            fetch = ["fetch", "--quiet", "--depth", "1", "--filter=blob:none", "origin", branch]
            self._branch_fetched = self._git(fetch, cwd=clone).returncode == 0
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
            except OutsideRun:
                raise  # the pod's word pointed out of the run: said as such, never "not there"
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

    def print_log(
        self, printer: LogPrinter, start: int = 0, part_bytes: int = READ_BYTES, name: str = JOB_LOG_NAME
    ) -> Place | None:
        """The job log (`name`: one job's own, logs/jobs/<id>.log) from `start` into `printer`, read by parts;
        the place it came from, None if none has it."""
        found = self.read(name, start, part_bytes)
        if found is None:
            return None
        data, offset = found.data, start
        while data and not printer.full:
            printer.feed(data)
            offset += len(data)
            try:
                data = found.place.read(name, offset, part_bytes) or b""
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


# -- the last push, once the pod is gone -----------------------------------------------------
PUSH_MANIFEST_MAX = 64 * 1024 * 1024  # 10,000 files list in ~0.5 MB: far more is not a manifest gpuc wrote


@dataclass(frozen=True)
class LastPush:
    """What the pod's last verified push left at the destination (instance_side/push.py's manifest)."""

    at: float | None
    files: dict[str, int]  # name under results/ -> size
    keys: dict[str, str]  # a name stored under an escaped key
    where: str
    beside: dict[str, int] = field(default_factory=dict)  # gpuc's own files beside results/: the job's log...
    waiting: tuple[str, ...] = ()  # files still being written at that push: not in it as they ended

    def said(self, now: float) -> str:
        """ "the last push (2026-12-05 02:10 UTC, 12 min ago) at s3://..."."""
        return f"the last push{self._when(now)} at {self.where}"

    def _when(self, now: float) -> str:
        from gpuc.core.clock import iso

        return f" ({iso(self.at)}, {max(0.0, now - self.at) / 60:.0f} min ago)" if self.at is not None else ""

    def after_exit(self, outcome: OutcomeRead | None) -> int | None:
        """The job's exit code when this push holds all it wrote: made after the job exited (the pod's clock
        both times), nothing still being written. None when the job may have written more after it."""
        if not isinstance(outcome, JobOutcome) or outcome.exit_code is None or outcome.ended_at is None:
            return None
        if self.at is None or self.at < outcome.ended_at or self.waiting:
            return None
        return outcome.exit_code

    def said_final(self, now: float, code: int) -> str:
        """ "its final sync (...), made after its job exited with code 0, at s3://..."."""
        return f"its final sync{self._when(now)}, made after its job exited with code {code}, at {self.where}"

    def size(self, name: str) -> int:
        return self.files[name] if name in self.files else self.beside[name]


def last_push(dest: Destination) -> LastPush | None:
    """The manifest of the last push, None when the destination holds none (a pod from before periodic pushes, or one
    that never pushed). Its names and keys are the pod's word: copy_pushed checks each before it reads one."""
    from gpuc.instance_side.push import MANIFEST_NAME, PushManifest

    found = dest.read(MANIFEST_NAME, 0, READ_BYTES)
    if found is None:
        return None
    data = bytearray(found.data)
    while len(found.data) == READ_BYTES and len(data) <= PUSH_MANIFEST_MAX:
        part = found.place.read(MANIFEST_NAME, len(data), READ_BYTES) or b""
        if not part:
            break
        data += part
        found = Found(part, found.place)
    if len(data) > PUSH_MANIFEST_MAX:
        raise GpucError(f"{found.place.describe()}{MANIFEST_NAME} is larger than a gpuc pod writes: not read")
    manifest = PushManifest.from_json(bytes(data).decode("utf-8", "surrogateescape"))
    if not manifest.files:
        return None
    sizes = {name: size for name, (size, _mtime) in manifest.files.items()}
    beside = {name: sizes.pop(name) for name in BESIDE if name in sizes}
    return LastPush(manifest.at, sizes, manifest.keys, found.place.describe(), beside, manifest.waiting)


BESIDE = (JOB_LOG_NAME, OUTCOME_NAME, ENTRIES_NAME)  # gpuc's files beside results/, as a kept pod's copy has them


def safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or "\0" in name or path.is_absolute() or any(part in ("", ".", "..") for part in name.split("/")):
        raise OutsideRun(
            f"the push manifest names {name!r}, outside results/ of this run: nothing is copied",
            hint="the pod's manifest is not one gpuc writes; copy by hand from the destination what you trust",
        )
    return path


def check_keys(push: LastPush, names: list[str]) -> None:
    """Before anything is read: every name a path inside the copy, every key one of the run's own (its folder
    at file://, its prefix at s3://, results/<run_id>/ in git). The refused ones are named, all of them."""
    refused = []
    for name in names:
        safe_name(name)
        key = push.keys.get(name, name)
        try:
            run_key(key)
        except OutsideRun:
            refused.append(f"{shown(name)} -> {key!r}" if key != name else repr(key))
    if refused:
        raise OutsideRun(
            f"the push manifest at {push.where} names keys outside this run's folder: {', '.join(refused[:5])}"
            f"{f' and {len(refused) - 5} more' if len(refused) > 5 else ''}: nothing is copied",
            hint="the pod's manifest is not one gpuc writes; copy by hand from the destination what you trust",
        )


def copy_pushed(dest: Destination, push: LastPush, names: list[str], into: Path) -> int:
    """Each of `names` from the destination into `into/<name>`, read by parts (never whole into memory), its
    size checked against the manifest. Returns the bytes copied; GpucError naming a file that did not match,
    OutsideRun before anything is read when a name or key is not the run's own."""
    check_keys(push, names)
    total = 0
    for name in names:
        target = into / safe_name(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        key = push.keys.get(name, name)
        found = dest.read(key, 0, READ_BYTES)
        if found is None:
            why = f" ({dest.errors[-1]})" if dest.errors else ""
            raise GpucError(f"{_label(name, push)} is in the last push's manifest but not at {push.where}{why}")
        size, want = 0, push.size(name)
        with target.open("wb") as fh:
            data = found.data
            while data:
                fh.write(data)
                size += len(data)
                if size > want:
                    break
                data = found.place.read(key, size, READ_BYTES) or b""
        if size != want:
            raise GpucError(
                f"{_label(name, push)} at {push.where} is {size} bytes, the last push sent {want}",
                hint="the destination changed since the push: copy it by hand from there",
            )
        total += size
    return total


def _label(name: str, push: LastPush) -> str:
    return name if name in push.beside else f"results/{name}"
