"""Copying files off a pod, verified: the pod lists what it will send (instance_side/resultscopy.py), sends
it as a tar stream over the ssh gpuc already uses (a local sandbox: its folder), the laptop unpacks it
into a staging folder (core/untar.py), lists that, and only a copy whose every name and size matches the
pod's listing is moved into place. `gpuc results` (results/ and the job's log) and `gpuc cp POD:PATH` (one
file or folder of the workspace) share it.

A pod on Vast is a stranger's machine, and its tar may be built to attack this laptop: it is unpacked by
gpuc's own code, never tarfile's extraction (whose filter a chain of links fooled, CVE-2025-4517, and which
Python 3.11.0-3.11.3 lack). Only regular files and folders are written, none through a link; every member
must be in the pod's own listing, under what was asked, with the size listed (a pod adding files, or
claiming room it did not list, is refused); links are never made, they are written down (NOT_COPIED).
The stream itself is capped at what an honest tar of the listing takes (stream_cap): a pod sending more is
cut off there, before it can fill this laptop's disk with a temporary file.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, cast

from gpuc.client.context import Ctx
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.podjson import Unreadable, last_json_line
from gpuc.core.providers.local import LocalProvider
from gpuc.core.redact import redact
from gpuc.core.untar import Entry, unpack
from gpuc.instance_side import resultscopy

if TYPE_CHECKING:
    from gpuc.core.pod import Pod
    from gpuc.core.podpaths import PodPaths
    from gpuc.core.providers.base import PodAccess, Provider

COPY_MIN_RATE = 1e6  # bytes/s: the copy's timeout assumes at least this (and ten minutes more)
NOT_COPIED = "LINKS-NOT-COPIED.txt"
# The pod's listing is one JSON line, a name and a size per file: tens of thousands of files fit.
LISTING_MAX_BYTES = 64 * 1024 * 1024
COPY_MODULE = ["python", "-m", "gpuc.instance_side.resultscopy"]
BLOCK = 512  # a tar block: every header and every file's data take whole ones
STREAM_MARGIN = 1024 * 1024  # the end blocks, the last record's padding, and room to spare
CHUNK = 1024 * 1024

Listing = dict[str, list[object]]
Fetch = Callable[[IO[bytes], float], None]  # writes the pod's tar stream (resultscopy tar) within a timeout


@dataclass(frozen=True)
class What:
    """What is copied: `args` after list/tar on the pod ([] = results/ and the job's log), and its words."""

    args: tuple[str, ...] = ()
    label: str = "results/ and the job's log"
    retry: str = "run `gpuc results` again"
    # The names the copy may hold, and what is below them: as resultscopy names its sources.
    tops: tuple[str, ...] = ("results", "logs/job.log", "logs/outcome.json", "logs/jobs")

    @classmethod
    def workspace_path(cls, rel: str, pod_id: str) -> What:
        return cls(("--path", rel), rel, f"run `gpuc cp {pod_id}:{rel}` again", (PurePosixPath(rel).name,))

    def holds(self, name: str) -> bool:
        return any(name == top or name.startswith(top + "/") for top in self.tops)

    @property
    def manifest(self) -> str:
        """The links file's name beside the copy: never one of the copy's own names."""
        return next(n for n in (NOT_COPIED, *(f"LINKS-NOT-COPIED-{i}.txt" for i in range(2, 9))) if n not in self.tops)


RESULTS = What()


def fetcher(access: PodAccess, provider: Provider, pod: Pod, what: What = RESULTS) -> Fetch:
    if isinstance(provider, LocalProvider):
        paths = provider.paths(pod.id)
        chosen = _local_sources(paths, what)
        return lambda out, _timeout: resultscopy.write_tar(paths, out, chosen)
    from gpuc.client.onpod.ssh import SshAccess  # startup: the commands that copy only

    if not isinstance(access, SshAccess):
        raise ConfigError(f"no way to copy files from {pod.id}", hint="copy them yourself over ssh")
    return lambda out, timeout_s: ssh_tar(access, out, timeout_s, what)


def _local_sources(paths: PodPaths, what: What) -> list[resultscopy.Source] | None:
    if not what.args:
        return None
    try:
        return [resultscopy.workspace_source(paths, what.args[1])]
    except ValueError as exc:
        raise ConfigError(str(exc), hint="name a path relative to the pod's workspace, e.g. POD:results") from None


class StreamTooLong(GpucError):
    """The pod sent more than its listing can take as a tar: cut off, nothing of it kept."""


class Capped:
    """The file the pod's tar stream goes into, refusing a write past `cap` bytes (its writer stops there)."""

    def __init__(self, out: IO[bytes], cap: int, what: What) -> None:
        self.out, self.cap, self.what, self.written = out, cap, what, 0

    def write(self, data: bytes) -> int:
        if self.written + len(data) > self.cap:
            raise StreamTooLong(
                f"the pod sent more than its listing of {self.what.label} can take ({mb(self.cap)} at most): "
                "the copy was cut off there and nothing of it kept",
                hint=f"nothing was destroyed; {self.what.retry}, or look at the pod over ssh (gpuc ls shows how)",
            )
        self.written += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()

    def tell(self) -> int:  # tarfile's "w" mode asks where it is
        return self.out.tell()


def stream_cap(expected: Listing) -> int:
    """The most an honest tar of the listing takes (resultscopy.write_tar, PAX): each member's header and its
    extended header for a long name or link target, each file's data in whole blocks, and a margin."""
    blocks = 0
    for name, entry in expected.items():
        size = int(str(entry[1])) if entry[0] == "f" else 0
        named = len(name.encode()) + (len(str(entry[1]).encode()) if entry[0] == "l" else 0)
        blocks += 3 + 2 * -(-named // BLOCK) + -(-size // BLOCK)
    return blocks * BLOCK + STREAM_MARGIN


def ssh_tar(access: object, out: IO[bytes], timeout_s: float, what: What = RESULTS) -> None:
    """The pod's tar stream into a file through this process (so `out` may cap it): never held in memory,
    never through a shell on this side."""
    from gpuc.client.onpod.ssh import SshAccess, SshError  # startup: as in fetcher

    assert isinstance(access, SshAccess)
    argv = [str(access.paths.python), *COPY_MODULE[1:], "tar", *what.args]
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen(
            access.ssh_argv("exec " + " ".join(shlex.quote(a) for a in argv)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=access.env,
        ) as proc,
    ):
        assert proc.stdout is not None
        timed_out = threading.Event()

        def expire() -> None:  # a pod that stalls the stream cannot hold the copy
            timed_out.set()
            proc.kill()

        late = threading.Timer(timeout_s, expire)
        late.start()
        try:
            while chunk := proc.stdout.read(CHUNK):
                out.write(chunk)
        except BaseException:
            proc.kill()  # cut off (too long, or the user's Ctrl-C): the pod's sender ends with the pipe
            raise
        finally:
            late.cancel()
        code = proc.wait()
        if timed_out.is_set():
            raise SshError(f"the copy did not finish within {timeout_s / 60:.0f} min", hint="try again")
        if code != 0:
            errors.seek(0)
            tail = redact(errors.read(64 * 1024).decode(errors="replace").strip()[-300:]) or "no output"
            raise SshError(f"the copy over ssh failed (exit {code}): {tail}", hint="try again")


def remote_listing(access: PodAccess, what: What = RESULTS) -> Listing:
    code, out = access.read([*COPY_MODULE, "list", *what.args], timeout_s=300.0)
    found: object = None
    if code == 0:
        with contextlib.suppress(Unreadable):
            found = last_json_line(out, most=LISTING_MAX_BYTES)
    if not isinstance(found, dict) or not all(isinstance(v, list) and v for v in found.values()):
        said = redact(out.strip().splitlines()[-1][:200]) if code == 2 and out.strip() else f"exit {code}"
        raise GpucError(
            f"could not list {what.label} on the pod ({said})",
            hint="ssh in (gpuc ls shows how) and look in the workspace; nothing was destroyed",
        )
    strange = next((n for n, v in found.items() if not what.holds(n) or not _listed_shape(v)), None)
    if strange is not None:
        raise GpucError(
            f"the pod listed {strange[:200]!r}, which is not part of {what.label}: its copy is refused",
            hint="nothing was copied or destroyed; look at the pod over ssh (gpuc ls shows how)",
        )
    return found


def _listed_shape(entry: list[object]) -> bool:
    kind = entry[0]
    if kind == "f":
        return len(entry) == 2 and type(entry[1]) is int and entry[1] >= 0
    if kind == "l":
        return len(entry) == 2 and isinstance(entry[1], str)
    return entry == ["d"]


def copy_results(access: PodAccess, fetch: Fetch, dest: Path, ctx: Ctx, what: What = RESULTS) -> str | None:
    """Listing -> room check -> tar stream -> safe extract -> the same listing here -> then `dest`. Returns
    the links file's name in `dest` (`what.manifest`), None when the copy held no link."""
    echo = ctx.echo
    expected = remote_listing(access, what)
    files = {k: v for k, v in expected.items() if v[0] == "f"}
    if what == RESULTS and "results" not in expected:
        echo("  the pod has no results/ folder: only the job's log is copied")
    if what != RESULTS and not expected:
        raise GpucError(
            f"{what.label} is not on the pod", hint="a path is relative to the pod's workspace, e.g. POD:results/run1"
        )
    total = sum(int(str(v[1])) for v in files.values())
    dest.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(dest.parent).free < total + 64 * 1024 * 1024:
        raise ConfigError(
            f"not enough room in {dest.parent} for {mb(total)}",
            hint="free some space or choose another folder; nothing was destroyed",
        )
    echo(f"copying {what.label} ({len(files)} files, {mb(total)}) to {dest} ...")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        with tempfile.TemporaryFile(dir=dest.parent) as stream:
            capped = cast(IO[bytes], Capped(stream, stream_cap(expected), what))  # it writes, as a file does
            fetch(capped, 600.0 + total / COPY_MIN_RATE)
            stream.seek(0)
            links = extract(stream, staging, expected, what)
        verify(expected, links, staging, what)
        written = write_not_copied(staging, links, what.manifest)
        if dest.exists():
            dest.rmdir()  # the caller let only an empty folder through
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    echo(f"  copied and verified: {len(files)} files, {mb(total)}: every name and size matches the pod's")
    return written


def extract(stream: IO[bytes], into: Path, expected: Listing, what: What = RESULTS) -> dict[str, str]:
    """Unpack with core/untar (no link made or followed, nothing outside `into`), each member admitted only
    as the pod's listing names it. Returns the links (name -> target), which are never made."""

    def admit(name: str, entry: Entry) -> None:
        # Before anything of it is written: a pod adding files (or room) its listing did not claim is lying,
        # or its files changed under the copy.
        want = expected.get(name)
        if want != entry:
            said = "does not name it" if want is None else f"says {describe(want)}"
            raise GpucError(
                f"the copy does not match the pod: it sent {name[:200]!r} as {describe(entry)}, its listing {said}",
                hint=f"nothing was destroyed; {what.retry}",
            )

    try:
        done = unpack(stream, into, admit=admit)
    except GpucError as exc:
        if exc.hint is not None:
            raise  # admit's own, already said for the user
        raise GpucError(
            f"the copy from the pod was refused: {redact(exc.message)}",
            hint=f"nothing was written outside the staging folder and nothing was destroyed; {what.retry}, "
            "or look at the pod over ssh (gpuc ls shows how)",
        ) from None
    return done.symlinks


def verify(expected: Listing, links: dict[str, str], staging: Path, what: What = RESULTS) -> None:
    """The copy here, links written down included, against the pod's listing: nothing missing, nothing
    different, nothing more (only the folders above a listed name, which the tar need not hold)."""
    here = local_listing(staging) | {name: ["l", target] for name, target in links.items()}
    above = {str(p) for name in expected for p in PurePosixPath(name).parents if str(p) != "."}
    missing = [name for name in expected if name not in here]
    wrong = [
        f"{name} ({describe(here[name])} here, {describe(want)} on the pod)"
        for name, want in expected.items()
        if name in here and here[name] != want
    ]
    extra = [name for name, got in here.items() if name not in expected and not (got == ["d"] and name in above)]
    if missing or wrong or extra:
        shown = "; ".join([*(f"{n} missing" for n in missing[:3]), *wrong[:3], *(f"{n} not listed" for n in extra[:3])])
        raise GpucError(
            f"the copy does not match the pod: {len(missing)} missing, {len(wrong)} different, "
            f"{len(extra)} not in its listing ({redact(shown)})",
            hint=f"nothing was destroyed; {what.retry}",
        )


def local_listing(root: Path) -> Listing:
    out: Listing = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        found = resultscopy.entry(path, st)
        if found is not None:
            out[str(path.relative_to(root))] = found
    return out


def write_not_copied(staging: Path, links: dict[str, str], manifest: str = NOT_COPIED) -> str | None:
    """The links, written down beside the copy (created new: never over a file of the copy)."""
    if not links:
        return None
    lines = [f"{name} -> {target if target.isprintable() else repr(target)}" for name, target in sorted(links.items())]
    text = "Links on the pod, not made here (a link holds no data; make the ones you need yourself):\n"
    with (staging / manifest).open("x", encoding="utf-8") as out:
        out.write(text + "\n".join(lines) + "\n")
    return manifest


def describe(entry: list[object]) -> str:
    kind = entry[0]
    if kind == "f":
        return f"{entry[1]} bytes"
    return f"a link to {entry[1]}" if kind == "l" else f"a hard link to {entry[1]}" if kind == "h" else "a folder"


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n} bytes"
