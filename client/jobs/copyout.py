"""Copying files off a pod, verified: the pod lists what it will send (instance_side/resultscopy.py), sends
it as a tar stream over the ssh gpuc already uses (a local sandbox: its folder), the laptop extracts it
with the data filter into a staging folder, lists that, and only a copy whose every name and size matches
the pod's listing is moved into place. `gpuc results` (results/ and the job's log) and `gpuc cp POD:PATH`
(one file or folder of the workspace) share it.

A pod on Vast is a stranger's machine: nothing it sends lands outside the staging folder, no device, no
absolute name; a link pointing outside the copy is not made but written down (NOT_COPIED).
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.podjson import Unreadable, last_json_line
from gpuc.core.providers.local import LocalProvider
from gpuc.core.redact import redact
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

Listing = dict[str, list[object]]
Fetch = Callable[[IO[bytes], float], None]  # writes the pod's tar stream (resultscopy tar) within a timeout


@dataclass(frozen=True)
class What:
    """What is copied: `args` after list/tar on the pod ([] = results/ and the job's log), and its words."""

    args: tuple[str, ...] = ()
    label: str = "results/ and the job's log"
    retry: str = "run `gpuc results` again"

    @classmethod
    def workspace_path(cls, rel: str, pod_id: str) -> What:
        return cls(("--path", rel), rel, f"run `gpuc cp {pod_id}:{rel}` again")


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


def ssh_tar(access: object, out: IO[bytes], timeout_s: float, what: What = RESULTS) -> None:
    """The pod's tar stream straight into a file: never held in memory, never through a shell on this side."""
    from gpuc.client.onpod.ssh import SshAccess, SshError  # startup: as in fetcher

    assert isinstance(access, SshAccess)
    argv = [str(access.paths.python), *COPY_MODULE[1:], "tar", *what.args]
    try:
        proc = subprocess.run(
            access.ssh_argv("exec " + " ".join(shlex.quote(a) for a in argv)),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            env=access.env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SshError(f"the copy did not finish within {timeout_s / 60:.0f} min", hint="try again") from None
    if proc.returncode != 0:
        tail = redact(proc.stderr.decode(errors="replace").strip()[-300:]) or "no output"
        raise SshError(f"the copy over ssh failed (exit {proc.returncode}): {tail}", hint="try again")


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
    return found


def copy_results(access: PodAccess, fetch: Fetch, dest: Path, ctx: Ctx, what: What = RESULTS) -> None:
    """Listing -> room check -> tar stream -> safe extract -> the same listing here -> then `dest`."""
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
            fetch(stream, 600.0 + total / COPY_MIN_RATE)
            stream.seek(0)
            skipped = extract(stream, staging)
        verify(expected, skipped, staging, what)
        write_not_copied(staging, skipped)
        if dest.exists():
            dest.rmdir()  # the caller let only an empty folder through
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    echo(f"  copied and verified: {len(files)} files, {mb(total)}: every name and size matches the pod's")


def extract(stream: IO[bytes], into: Path) -> dict[str, str]:
    """Untar with the data filter: nothing lands outside `into`, no devices, no absolute names. A link that
    would point outside the copy is not made; it is returned (name -> target) to be written down."""
    skipped: dict[str, str] = {}

    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        try:
            return tarfile.data_filter(member, path)
        except tarfile.FilterError:
            if member.issym():
                skipped[member.name] = member.linkname
                return None
            raise

    try:
        with tarfile.open(fileobj=stream, mode="r:") as tar:
            tar.extractall(into, filter=keep)
    except (tarfile.TarError, OSError) as exc:
        raise GpucError(
            f"the copy is damaged: {type(exc).__name__}: {redact(str(exc))[:200]}",
            hint="try again; nothing was destroyed",
        ) from None
    return skipped


def verify(expected: Listing, skipped: dict[str, str], staging: Path, what: What = RESULTS) -> None:
    here = local_listing(staging)
    missing, wrong = [], []
    for name, want in expected.items():
        if want[0] == "l" and skipped.get(name) == want[1]:
            continue  # written down in NOT_COPIED instead
        got = here.get(name)
        if got is None:
            missing.append(name)
        elif got != want:
            wrong.append(f"{name} ({describe(got)} here, {describe(want)} on the pod)")
    if missing or wrong:
        shown = "; ".join([*(f"{n} missing" for n in missing[:3]), *wrong[:3]])
        raise GpucError(
            f"the copy does not match the pod: {len(missing)} missing, {len(wrong)} different ({shown})",
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


def write_not_copied(staging: Path, skipped: dict[str, str]) -> None:
    if skipped:
        lines = [f"{name} -> {target}" for name, target in sorted(skipped.items())]
        text = "Links on the pod that point outside what was copied (not made here; they hold no data):\n"
        (staging / NOT_COPIED).write_text(text + "\n".join(lines) + "\n", encoding="utf-8")


def describe(entry: list[object]) -> str:
    kind = entry[0]
    return f"{entry[1]} bytes" if kind == "f" else f"a link to {entry[1]}" if kind == "l" else "a folder"


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n} bytes"
