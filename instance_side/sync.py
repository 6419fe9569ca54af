"""Results out of the pod before it is destroyed (SPEC: "a sync counts only when the remote listing
matches what was sent"). A sync that fails or cannot be verified keeps the pod: losing the results is
the one failure worse than a few more minutes of billing.

Where results go (SPEC "Results"):
- `git_remote` set: files under 10 MB are committed to the experiment's repo under
  `results/<run_id>/` and pushed; larger ones go to the results bucket (an error if there is none).
- otherwise everything goes to the results bucket: `s3://bucket/prefix` (S3, or R2 and friends through
  `s3_endpoint_url`) or `file:///dir` (the local sandbox, tests), under `<experiment>/<run_id>/`.

What is sent is every regular file under results/, links followed (files and folders), as a copy
would see them. The sync fails only when a byte of the user's data could be lost: a folder or a file
that cannot be read is a failed sync naming it (the pod is kept and the user told which one, never a
result skipped in silence). Entries that hold no data never block it: a link that cannot be followed
(dangling, such as a `latest` link to a rotated checkpoint, a loop, a link to a device) is recorded
as a link with its target, in the manifest and in `logs/entries.json` beside the results. A name the
destination cannot store (not UTF-8 for S3 keys; for git, what git refuses or cannot list back; for
file://, what the filesystem refuses) is stored under an escaped key (the bytes percent-escaped,
reversibly), mapped in the manifest and verified under that key.

Verification lists the remote (for s3://, the watchdog's listing of the run's prefix; `git ls-tree -l` of
what the remote holds after the push) and compares names and sizes. The pod holds no S3 key: its s3://
objects go through URLs the watchdog grants for its own run's prefix only (instance_side/grants.py); the
git token comes from the pod's secrets file (or the process environment), never from the URL or a command
line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, unquote_to_bytes, urlparse

from gpuc.core.destinations import (
    GitRunner,
    S3Location,
    check_remote,
    git_auth_args,
    git_environ,
    git_runner,
)
from gpuc.core.errors import SyncError
from gpuc.core.podsecrets import GIT_TOKEN_ENV
from gpuc.core.redact import redact
from gpuc.instance_side.podfiles import AgentConfig, PodPaths

# Same shapes the laptop enforces (core.models); re-checked here because they become path parts.
_EXPERIMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_RUN_ID = re.compile(r"^[a-z0-9][a-z0-9-]{3,40}$")
# GitHub refuses files over 100 MB and a repo full of checkpoints is slow to clone for ever after:
# only small files travel with the code.
GIT_MAX_BYTES = 10 * 1024 * 1024
GIT_TIMEOUT_S = 600.0
PUSH_ATTEMPTS = 3


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


# -- names a destination cannot store ------------------------------------------------------------------
def _undecodable(ch: str) -> bool:
    return "\udc80" <= ch <= "\udcff"  # a byte that is not UTF-8, as os.fsdecode hands it to us


def escape_name(name: str, unsafe: Callable[[str], bool] = _undecodable) -> str:
    """Percent-escape the undecodable bytes, "%" and the characters `unsafe` names: reversible (unescaping
    gives the original bytes), and plain ASCII where the name was not."""
    out = []
    for ch in name:
        if _undecodable(ch):
            out.append(f"%{ord(ch) - 0xDC00:02X}")
        elif ch == "%" or unsafe(ch):
            out.extend(f"%{b:02X}" for b in ch.encode())
        else:
            out.append(ch)
    return "".join(out)


def assign_keys(names: Iterable[str], storable: Callable[[str], bool], escape: Callable[[str], str]) -> dict[str, str]:
    """name -> the key it is stored under, for the names the destination cannot store. An escaped key that
    another name already is (results/ holds both "a%FF" and b"a\xff") gets a suffix: never two files on
    one key."""
    names = list(names)
    taken = {name for name in names if storable(name)}
    keys: dict[str, str] = {}
    for name in sorted(n for n in names if n not in taken):
        keys[name] = _free_key(escape(name), taken)
        taken.add(keys[name])
    return keys


def _free_key(key: str, taken: Collection[str]) -> str:
    free, n = key, 0
    while free in taken:
        n += 1
        free = f"{key}.gpuc{n}"
    return free


def name_of_key(key: str) -> str:
    """The name an escaped key was made from (escape_name, _fs_escape and _git_escape percent-escape, reversibly;
    a `.gpucN` suffix told two names apart). What a restore reads back from a listing."""
    base = re.sub(r"\.gpuc[0-9]+$", "", key)
    return unquote_to_bytes(base).decode("utf-8", "surrogateescape")


def _utf8(name: str) -> bool:
    return not any(_undecodable(ch) for ch in name)


# What filesystems refuse in a name besides "/" and NUL (vfat, exFAT, NTFS): escaped on a refusal only.
_FS_UNSAFE = frozenset('\\:*?"<>|')
_NAME_REFUSED = (errno.EILSEQ, errno.EINVAL)


def _fs_escape(name: str) -> str:
    return escape_name(name, lambda ch: ch in _FS_UNSAFE or ord(ch) < 32)


def _check_names(experiment: str, run_id: str) -> None:
    if not _EXPERIMENT.match(experiment) or not _RUN_ID.match(run_id):
        raise SyncError(
            f"refusing to sync to a path built from {experiment!r}/{run_id!r}",
            hint="experiment and run id must be plain names (gpuc up sets them)",
        )


def _nothing_to_sync(destination: str, results_dir: Path) -> Manifest:
    return Manifest(destination, note=f"no {results_dir.name}/ directory: nothing to sync")


def _push_all(sync: BucketSync, results_dir: Path) -> Manifest:
    """Every file of results/ through `sync`, and the links that hold no data recorded beside them."""
    if not results_dir.is_dir():
        return _nothing_to_sync(sync.describe(), results_dir)
    listing = scan_results(results_dir)
    return dataclasses.replace(sync.push_files(results_dir, in_written_order(listing)), links=listing.links)


def in_written_order(listing: Listing) -> dict[str, int]:
    """The files of `listing`, oldest modification first (ties by name): the order every push sends them in, so
    that a push cut anywhere leaves at the destination what the job had written up to some moment
    (instance_side/push.py)."""
    ordered = sorted(listing.files, key=lambda name: (listing.mtimes.get(name, 0), name))
    return {name: listing.files[name] for name in ordered}


class FileBucketSync:
    """`file:///dir` -> `<dir>/<experiment>/<run_id>/`.

    Each file is written to a temporary name in its folder, then renamed over its own: a copy cut anywhere (the
    pod outbid mid-push) leaves the old whole file or the new whole file, never a torn one under the file's
    name, as an S3 PUT does. Files are written in the order `push_files` is given (push.py relies on it)."""

    def __init__(self, bucket_dir: Path, experiment: str, run_id: str) -> None:
        _check_names(experiment, run_id)
        self.dest = bucket_dir / experiment / run_id

    def describe(self) -> str:
        return f"file://{self.dest}"

    def push(self, results_dir: Path) -> Manifest:
        return _push_all(self, results_dir)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        keys: dict[str, str] = {}
        try:
            for rel in files:
                try:
                    self._copy(results_dir / rel, rel)
                except OSError as exc:
                    if exc.errno not in _NAME_REFUSED:
                        raise
                    # A filesystem that takes UTF-8 only, or no ":" (vfat, exFAT, a UTF-8-only ZFS, APFS):
                    # the name is refused, not the data.
                    keys[rel] = _free_key(_fs_escape(rel), {*files, *keys.values()})
                    self._copy(results_dir / rel, keys[rel])
        except OSError as exc:
            raise SyncError(
                f"copy to {self.describe()} failed: {exc.strerror or exc}",
                hint="free space or fix permissions there, then run: python -m gpuc.instance_side sync",
            ) from None
        return Manifest(self.describe(), dict(files), keys=keys)

    def _copy(self, source: Path, key: str) -> None:
        target = self.dest / key
        target.parent.mkdir(parents=True, exist_ok=True)
        # A short name of its own, beside the target (a rename stays in one filesystem): never longer than the
        # target's, and one no other writer picks (the final sync and a push may run at once).
        part = target.parent / f"{PART_PREFIX}{os.getpid()}-{next(_PARTS)}"
        try:
            shutil.copyfile(source, part)
            os.replace(part, target)
        finally:
            with contextlib.suppress(OSError):
                part.unlink()

    def verify(self, manifest: Manifest) -> bool:
        if not manifest.files:
            return True
        remote = local_listing(self.dest) if self.dest.is_dir() else {}
        return listing_matches(manifest.stored(), remote)


PART_PREFIX = ".gpuc-part-"  # a file:// copy under way (or cut): never a result, never restored
_PARTS = itertools.count()


def listing_matches(sent: Mapping[str, int], remote: Mapping[str, int]) -> bool:
    """Every file sent is at the remote with the same size (extra remote files are someone else's)."""
    return all(remote.get(name) == size for name, size in sent.items())


# -- S3-compatible storage ----------------------------------------------------------------------------
class RunObjects(Protocol):
    """The run's own objects at an s3:// destination, by name relative to `<prefix>/<experiment>/<run_id>/`:
    the transport under S3Sync and the restore. The pod's is instance_side/grants.py (URLs the watchdog
    grants: it holds no key); what is sent, and in what order, is the sync's to decide."""

    def describe(self) -> str: ...

    def put(self, name: str, source: Path, size: int) -> None: ...

    def put_many(self, files: Sequence[tuple[str, Path, int]]) -> None: ...

    def get(self, name: str, target: Path, *, size: int | None = None, limit: int | None = None) -> bool: ...

    def list(self) -> dict[str, int]: ...


class S3Sync:
    """`s3://bucket/prefix` -> `s3://bucket/prefix/<experiment>/<run_id>/...`, through `objects`."""

    def __init__(
        self, url: str, experiment: str, run_id: str, *, objects: RunObjects, endpoint_url: str | None = None
    ) -> None:
        _check_names(experiment, run_id)
        where = S3Location.parse(url)
        self.bucket = where.bucket
        self.base = where.run_base(experiment, run_id)
        self.endpoint_url = endpoint_url
        self.objects = objects

    def describe(self) -> str:
        via = f" via {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.base}/{via}"

    def push(self, results_dir: Path) -> Manifest:
        return _push_all(self, results_dir)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        # An S3 key is UTF-8 and goes into a URL and an XML listing: another byte, or a control character,
        # is stored under its escaped key (core.destinations.grant_name_problem is the watchdog's rule).
        keys = assign_keys(files, _s3_storable, _s3_escape)
        # In the order given: push.py sends oldest first (a cut push leaves a prefix).
        self.objects.put_many([(keys.get(rel, rel), results_dir / rel, size) for rel, size in files.items()])
        return Manifest(self.describe(), dict(files), keys=keys)

    def verify(self, manifest: Manifest) -> bool:
        if not manifest.files:
            return True
        return listing_matches(manifest.stored(), self.listing())

    def listing(self) -> dict[str, int]:
        return self.objects.list()


def _s3_control(ch: str) -> bool:
    return ord(ch) < 32 or ord(ch) == 127


def _s3_storable(name: str) -> bool:
    return _utf8(name) and not any(_s3_control(ch) for ch in name)


def _s3_escape(name: str) -> str:
    return escape_name(name, _s3_control)


RUN_BRANCH_PREFIX = "gpuc-results/"


def run_branch(run_id: str) -> str:
    """The branch a run's small results are pushed to, and the only one: `gpuc-results/<run_id>`."""
    return f"{RUN_BRANCH_PREFIX}{run_id}"


class GitSync:
    """Small results committed to the experiment's repo under `results/<run_id>/`, on the run's own branch
    (`gpuc-results/<run_id>`, started from the default branch's tip) and pushed there: never to another
    branch, never forced. So a protected default branch (pushes only through reviewed merges) never meets a
    pod, and what the pod's token could do to it is what the token's own rights allow (docs/secrets.md).

    Works in its own clone (`PodPaths.results_repo`), never in the user's checkout. A push rejected
    because the branch moved (another attempt of the run) is retried on top of the new tip:
    `results/<run_id>/` is this run's alone, so there is nothing to merge.
    """

    def __init__(
        self,
        remote: str,
        experiment: str,
        run_id: str,
        workdir: Path,
        *,
        environ: Mapping[str, str],
        secrets: Iterable[str] = (),
        runner: GitRunner = git_runner,
        pod_id: str = "pod",
    ) -> None:
        _check_names(experiment, run_id)
        check_remote(remote)
        self.remote = remote
        self.experiment = experiment
        self.run_id = run_id
        self.workdir = workdir
        self.env = dict(environ)
        self._secrets = tuple(secrets)
        self.runner = runner
        self.pod_id = pod_id
        self.subdir = f"results/{run_id}"

    def describe(self) -> str:
        return f"git {redact(self.remote, self._secrets)} {self.subdir}/"

    def push(self, results_dir: Path) -> Manifest:
        return _push_all(self, results_dir)

    @property
    def branch(self) -> str:
        return run_branch(self.run_id)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        branch = self._checkout()
        keys = assign_keys(files, _git_storable, _git_escape)
        for attempt in range(1, PUSH_ATTEMPTS + 1):
            self._commit(results_dir, files, keys)
            # Exactly the run's own branch, never forced: a rejected push is tried again on the new tip.
            code, out = self._git(["push", "--quiet", "origin", f"HEAD:refs/heads/{branch}"], check=False)
            if code == 0:
                return Manifest(self.describe(), dict(files), keys=keys)
            if attempt == PUSH_ATTEMPTS:
                raise self._error(f"push to {branch}", out)
            # The branch moved under us: start again from its new tip.
            self._update(branch)
        raise AssertionError("unreachable")

    def verify(self, manifest: Manifest) -> bool:
        if not manifest.files:
            return True
        return listing_matches(manifest.stored(), self.listing())

    def listing(self) -> dict[str, int]:
        """What the run's branch holds under results/<run_id>/, fetched afresh."""
        self._git(["fetch", "--quiet", "--depth", "1", "origin", f"refs/heads/{self.branch}"])
        # -z: paths verbatim (no C-style quoting of unusual names), NUL-terminated.
        _, out = self._git(["ls-tree", "-r", "-l", "-z", "FETCH_HEAD", "--", f"{self.subdir}/"])
        return _blob_sizes(out, self.subdir)

    # -- helpers -------------------------------------------------------------------------------
    def _checkout(self) -> str:
        if not (self.workdir / ".git").is_dir():
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir.parent.mkdir(parents=True, exist_ok=True)
            self._run(["clone", "--quiet", "--depth", "1", self.remote, str(self.workdir)], cwd=None)
        self._update(self.branch)
        self._protect()
        return self.branch

    def _update(self, branch: str) -> None:
        code, _ = self._git(["fetch", "--quiet", "--depth", "1", "origin", f"refs/heads/{branch}"], check=False)
        if code == 0:  # the run's first push has no branch yet: it starts from the default branch's tip (cloned)
            self._git(["reset", "--quiet", "--hard", "FETCH_HEAD"])

    def _commit(self, results_dir: Path, files: Mapping[str, int], keys: Mapping[str, str]) -> None:
        target = self.workdir / self.subdir
        try:
            for rel in files:
                key = keys.get(rel, rel)
                (target / key).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(results_dir / rel, target / key)
        except OSError as exc:
            raise SyncError(
                f"copy into the results clone failed: {exc.strerror or exc}", hint="free space on /workspace"
            ) from None
        # --force: the experiment's .gitignore often hides exactly what a run produces (*.pt, *.log,
        # results/); without it those files never reach the commit and the sync can never verify.
        self._git(["add", "--all", "--force", "--", self.subdir])
        code, _ = self._git(["diff", "--cached", "--quiet"], check=False)
        if code != 0:
            message = f"results: {self.experiment} {self.run_id} ({len(files)} files)"
            self._git(["commit", "--quiet", "--no-verify", "-m", message])
        self._check_committed({keys.get(name, name): size for name, size in files.items()})

    def _protect(self) -> None:
        """The repo's .gitattributes may rewrite what is stored (text=auto turns CRLF into LF, an LFS
        filter stores a pointer, ident, an encoding): the blob would never match what was sent. The
        clone's own info/attributes, which wins over the repo's, stores results/<run_id>/ byte for byte."""
        info = self.workdir / ".git" / "info"
        rule = f"/{self.subdir}/** -text -filter -ident -working-tree-encoding\n"
        try:
            info.mkdir(parents=True, exist_ok=True)
            (info / "attributes").write_text(rule, encoding="utf-8")
        except OSError as exc:
            raise SyncError(
                f"cannot write {info / 'attributes'}: {exc.strerror or exc}", hint="free space on /workspace"
            ) from None

    def _check_committed(self, files: Mapping[str, int]) -> None:
        """Before pushing: every file sent is in the commit, same size. If git would not take one (a
        nested .git folder, a name it refuses), say which and why, once, instead of a push whose
        verification can never pass."""
        if not files:
            return
        _, out = self._git(["ls-tree", "-r", "-l", "-z", "HEAD", "--", f"{self.subdir}/"])
        committed = _blob_sizes(out, self.subdir)
        wrong = [name for name, size in sorted(files.items()) if committed.get(name) != size]
        if wrong:
            named = ", ".join(f"results/{shown(name)}" for name in wrong[:3]) + (" ..." if len(wrong) > 3 else "")
            raise SyncError(
                f"git did not store {len(wrong)} result file(s) as they are: {named}",
                hint="move or rename them (or set GPUC_RESULTS_BUCKET for them), then run:"
                " python -m gpuc.instance_side sync",
            )

    def _git(self, args: list[str], *, check: bool = True) -> tuple[int, str]:
        return self._run(args, cwd=self.workdir, check=check)

    def _run(self, args: list[str], *, cwd: Path | None, check: bool = True) -> tuple[int, str]:
        identity = ["-c", "user.name=gpuc", "-c", f"user.email=gpuc@{self.pod_id}"]
        identity += ["-c", "commit.gpgsign=false"]
        full = [*identity, *git_auth_args(self.remote, self.env), *args]
        code, out = self.runner(full, cwd, self.env, GIT_TIMEOUT_S)
        if check and code != 0:
            raise self._error(args[0], out)
        return code, out

    def _error(self, what: str, output: str) -> SyncError:
        detail = redact(output.strip(), self._secrets)[-300:] or "no output"
        return SyncError(
            f"git {what} for {self.describe()} failed: {detail}",
            hint=f"check git_remote and {GIT_TOKEN_ENV} (it needs push rights), then run:"
            " python -m gpuc.instance_side sync",
        )


# git refuses a path with a component it could take for its own folder (`.git`, and as NTFS would read
# it `.git.`, `.git ` or `git~1`, in any case; git 2.39 on Linux). And it stores any byte, but gives its
# listing back to us as text: an undecodable name could never verify. Both are escaped.
_GIT_OWN = re.compile(r"(\.git[. ]*|git~1)", re.IGNORECASE)


def _git_storable(name: str) -> bool:
    return _utf8(name) and not any(_GIT_OWN.fullmatch(part) for part in name.split("/"))


def _git_escape(name: str) -> str:
    parts = escape_name(name).split("/")
    return "/".join(escape_name(p, lambda ch: ch in ".~") if _GIT_OWN.fullmatch(p) else p for p in parts)


def _blob_sizes(ls_tree_z: str, subdir: str) -> dict[str, int]:
    """`git ls-tree -r -l -z` output -> {path under subdir: size}, blobs only (a submodule is no file)."""
    found: dict[str, int] = {}
    for line in ls_tree_z.split("\0"):
        meta, _, path = line.partition("\t")
        fields = meta.split()
        if len(fields) == 4 and fields[1] == "blob" and fields[3].isdigit():
            found[path.removeprefix(f"{subdir}/")] = int(fields[3])
    return found


# -- small files to git, large ones to the bucket --------------------------------------------------
class BucketSync(Protocol):
    def describe(self) -> str: ...

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest: ...

    def verify(self, manifest: Manifest) -> bool: ...


class SplitSync:
    def __init__(self, git: GitSync, bucket: BucketSync | None, limit: int = GIT_MAX_BYTES) -> None:
        self.git = git
        self.bucket = bucket
        self.limit = limit

    def describe(self) -> str:
        large = self.bucket.describe() if self.bucket else "nowhere (no results bucket)"
        return f"{self.git.describe()} (files >= {self.limit // (1024 * 1024)} MB: {large})"

    def push(self, results_dir: Path) -> Manifest:
        if not results_dir.is_dir():
            return _nothing_to_sync(self.describe(), results_dir)
        listing = scan_results(results_dir)
        return dataclasses.replace(self.push_files(results_dir, listing.files), links=listing.links)

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        """`files` of results_dir, each where its size sends it (the incremental push sends a few), in the
        order given: consecutive files bound for one place go together (one commit for a run of small ones)."""
        large = {k: v for k, v in files.items() if v >= self.limit}
        if large and self.bucket is None:
            raise SyncError(
                f"{len(large)} results are {self.limit // (1024 * 1024)} MB or more and no bucket is set",
                hint="set GPUC_RESULTS_BUCKET=s3://bucket/prefix (large files never go to git)",
            )
        parts: list[Manifest] = []
        for to_git, run in _runs(files, self.limit):
            if to_git:
                parts.append(self.git.push_files(results_dir, run))
            elif self.bucket is not None:
                parts.append(self.bucket.push_files(results_dir, run))
        keys = {name: key for part in parts for name, key in part.keys.items()}
        return Manifest(self.describe(), dict(files), parts=tuple(parts), keys=keys)

    def verify(self, manifest: Manifest) -> bool:
        sent = sum(len(p.files) for p in manifest.parts)
        if sent != len(manifest.files):
            return False
        return all(self._owner(part).verify(part) for part in manifest.parts)

    def _owner(self, part: Manifest) -> BucketSync | GitSync:
        if part.destination == self.git.describe() or self.bucket is None:
            return self.git
        return self.bucket


def _runs(files: Mapping[str, int], limit: int) -> list[tuple[bool, dict[str, int]]]:
    """`files` cut into runs of consecutive ones bound for one place: (to git?, the run), in order."""
    runs: list[tuple[bool, dict[str, int]]] = []
    for name, size in files.items():
        to_git = size < limit
        if not runs or runs[-1][0] != to_git:
            runs.append((to_git, {}))
        runs[-1][1][name] = size
    return runs


class NoDestination:
    """No bucket configured: fine while results/ is empty, a failed sync as soon as it is not."""

    def describe(self) -> str:
        return "nowhere (no results bucket configured)"

    def push(self, results_dir: Path) -> Manifest:
        files = local_listing(results_dir) if results_dir.is_dir() else {}
        if files:
            raise SyncError(
                f"{results_dir.name}/ holds {len(files)} files but no results bucket is configured",
                hint="on your laptop, `gpuc results POD` copies them there, then ends the pod; set "
                "GPUC_RESULTS_BUCKET before the next up (`up` checks it before renting)",
            )
        return Manifest(self.describe(), note=f"no files in {results_dir.name}/: nothing to sync")

    def verify(self, manifest: Manifest) -> bool:
        return not manifest.files


class Unavailable:
    """A destination we cannot use: every push fails, so nothing is destroyed on its account."""

    def __init__(self, error: SyncError) -> None:
        self.error = error

    def describe(self) -> str:
        return f"unavailable ({self.error.message})"

    def push(self, results_dir: Path) -> Manifest:
        raise self.error

    def verify(self, manifest: Manifest) -> bool:
        return False


# -- the job's log and outcome, beside the results -------------------------------------------------
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


def own_job_sources(paths: PodPaths) -> dict[str, Path]:
    """The current job's own log and outcome, under the names they take at the destination."""
    from gpuc.instance_side.joblog import job_files, read_outcome

    outcome = read_outcome(paths)
    own = job_files(paths, outcome.get("job_id") if outcome else None)
    if own is None:
        return {}
    log, record = own
    return {f"{JOBS_DIR}{log.name}": log, f"{JOBS_DIR}{record.name}": record}
_OMITTED = "\n[gpuc: {n} bytes of the log omitted here to fit the destination]\n"


class JobLogSync:
    """Results first, then the job's log and outcome through the same destination, both verified: a pod
    that cannot send them keeps running like one whose results did not go, and says so.

    They are copied into a staging folder first: the job may still be writing its log (a periodic sync),
    and a listing can only match what was sent if what was sent stays the size it was. A name that
    results/ already holds (the job's own logs/job.log) is the job's: gpuc's copy is not sent over it.
    """

    def __init__(self, inner: ResultsSync, paths: PodPaths, *, log_limit: int | None = None) -> None:
        self.inner = inner
        self.paths = paths
        self.log_limit = log_limit

    def describe(self) -> str:
        return self.inner.describe()

    def push(self, results_dir: Path) -> Manifest:
        self._announce(results_dir)
        results = self.inner.push(results_dir)
        stage = self._stage(results_dir, results)
        if stage is None:
            return results
        logs = self.inner.push(stage)
        parts = (results, logs)
        beside = "job log and outcome" if {JOB_LOG_NAME, OUTCOME_NAME} & set(logs.files) else (
            ENTRIES_NAME if ENTRIES_NAME in logs.files else JOBS_INDEX
        )
        note = f"{results.summary()}; {beside} beside them" if logs.files else None
        return Manifest(
            results.destination, dict(results.files), note=note, parts=parts, links=results.links, keys=results.keys,
            beside=beside if logs.files else None,
        )

    def verify(self, manifest: Manifest) -> bool:
        if len(manifest.parts) != 2:
            ok = self.inner.verify(manifest)
        else:
            ok = all(self.inner.verify(part) for part in manifest.parts)
        if ok:
            self._record(manifest)
        return ok

    def _announce(self, results_dir: Path) -> None:
        """Before the files go: the push manifest at the destination says what is coming, in order, as a periodic
        push's does, so a sync cut midway (an outbid as the job ends) still restores as a prefix. Best effort: the
        gate is the verification."""
        from gpuc.instance_side.push import announce_sync  # lazy: push.py builds on this module

        dest = destination(self)
        if dest is None or not results_dir.is_dir():
            return
        with contextlib.suppress(Exception):
            announce_sync(dest, self.paths, scan_results(results_dir))

    def _record(self, manifest: Manifest) -> None:
        """A verified whole sync (the job's end, `sync` by hand) is a push too: the push manifest then says
        what the destination holds, for the laptop once the pod is gone and for a later pod. Best effort:
        the gate is the verification above, never this record."""
        from gpuc.instance_side.push import record_sync  # lazy: push.py builds on this module

        dest = destination(self)
        if dest is None:
            return
        with contextlib.suppress(Exception):
            record_sync(dest, manifest, self.paths)

    def _stage(self, results_dir: Path, results: Manifest) -> Path | None:
        stage = self.paths.log_stage
        shutil.rmtree(stage, ignore_errors=True)
        from gpuc.instance_side.joblog import jobs_index

        sources = {JOB_LOG_NAME: self.paths.job_log, OUTCOME_NAME: self.paths.outcome, **own_job_sources(self.paths)}
        wanted = {name: src for name, src in sources.items() if src.is_file() and not (results_dir / name).exists()}
        entries = entries_record(results) if not (results_dir / ENTRIES_NAME).exists() else None
        index = jobs_index(self.paths) if not (results_dir / JOBS_INDEX).exists() else None
        if not wanted and entries is None and index is None:
            return None
        try:
            for name, src in wanted.items():
                target = stage / name
                target.parent.mkdir(parents=True, exist_ok=True)
                snapshot(src, target, self.log_limit if name.endswith(".log") else None)
            for name, text in ((ENTRIES_NAME, entries), (JOBS_INDEX, index)):
                if text is not None:
                    (stage / name).parent.mkdir(parents=True, exist_ok=True)
                    (stage / name).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SyncError(
                f"cannot stage the job's log for the sync: {exc.strerror or exc}", hint="free space on /workspace"
            ) from None
        return stage


def entries_record(manifest: Manifest) -> str | None:
    """What `logs/entries.json` says: each link recorded (it held no data) with its target, and each name
    stored under an escaped key (the key percent-unescapes to the original bytes). None: nothing to say."""
    if not manifest.links and not manifest.keys:
        return None
    record = {
        "links": {shown(name): shown(target) for name, target in sorted(manifest.links.items())},
        "escaped": {key: shown(name) for name, key in sorted(manifest.keys.items())},
    }
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


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


def destination(sync: ResultsSync) -> BucketSync | None:
    """Where files can be sent a few at a time (the incremental push): None without a usable destination."""
    inner = sync.inner if isinstance(sync, JobLogSync) else sync
    if isinstance(inner, (FileBucketSync, S3Sync, SplitSync)):
        return inner
    return None


def run_objects(sync: ResultsSync) -> RunObjects | None:
    """The run's objects at an s3:// destination (the restore reads them), or None."""
    dest = destination(sync)
    inner = dest.bucket if isinstance(dest, SplitSync) else dest
    return inner.objects if isinstance(inner, S3Sync) else None


def with_job_log(sync: ResultsSync, paths: PodPaths) -> ResultsSync:
    """The sync that also sends the job's log and outcome, wherever results go. Without a destination
    there is nowhere to send them (and no reason to keep the pod for them)."""
    if isinstance(sync, (NoDestination, Unavailable)):
        return sync
    # Git alone takes files under its limit only: a longer log is cut in the middle to fit.
    limit = sync.limit - 1 if isinstance(sync, SplitSync) and sync.bucket is None else None
    return JobLogSync(sync, paths, log_limit=limit)


def make_sync(
    cfg: AgentConfig,
    secrets: Mapping[str, str] | None = None,
    *,
    paths: PodPaths | None = None,
    environ: Mapping[str, str] | None = None,
) -> ResultsSync:
    """The sync the pod's config asks for. The git token comes from the pod's secrets file, then the process
    environment; an s3:// destination takes no key: its objects go through the watchdog's grants, asked with
    the pod's token (instance_side/grants.py)."""
    try:
        return _make_sync(cfg, dict(secrets or {}), paths or PodPaths.from_env(), environ)
    except SyncError as exc:
        return Unavailable(exc)


def _make_sync(
    cfg: AgentConfig, secrets: dict[str, str], paths: PodPaths, environ: Mapping[str, str] | None
) -> ResultsSync:
    env = os.environ if environ is None else environ
    bucket = _bucket_sync(cfg, secrets, paths, env)
    if cfg.git_remote:
        git = GitSync(
            cfg.git_remote,
            cfg.experiment,
            cfg.run_id,
            paths.results_repo,
            environ=git_environ(env, secrets),
            secrets=[v for v in secrets.values() if v],
            pod_id=cfg.pod_id,
        )
        return SplitSync(git, bucket)
    return bucket or NoDestination()


def _bucket_sync(
    cfg: AgentConfig, secrets: Mapping[str, str], paths: PodPaths, environ: Mapping[str, str]
) -> FileBucketSync | S3Sync | None:
    bucket = cfg.results_bucket
    if not bucket:
        return None
    url = urlparse(bucket)
    if url.scheme == "file" and url.path:
        return FileBucketSync(Path(unquote(url.path)), cfg.experiment, cfg.run_id)
    if url.scheme == "s3":
        from gpuc.instance_side.grants import pod_objects

        objects = pod_objects(
            bucket, cfg.experiment, cfg.run_id, pod_id=cfg.pod_id, functions_url=cfg.functions_url,
            secrets=secrets, paths=paths, environ=environ,
        )  # fmt: skip
        return S3Sync(bucket, cfg.experiment, cfg.run_id, endpoint_url=cfg.s3_endpoint_url, objects=objects)
    raise SyncError(
        f"results bucket scheme {url.scheme or '(none)'!r} is not supported",
        hint="use s3://bucket/prefix (with GPUC_S3_ENDPOINT_URL for R2) or file:///path",
    )
