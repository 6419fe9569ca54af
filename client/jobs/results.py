"""`gpuc results POD`: get the results out of a pod kept for them (its sync failed, F16), then end it.

A running pod: results/ and the job's log are copied over the ssh gpuc already uses (a local sandbox: a
copy of its folder) into ./results/<pod id>/ (or --to DIR), every name and size checked against the pod's
own listing, and only then is the pod ended through `gpuc down`'s path, which then finds nothing left
only on the pod. A stopped pod is resumed first (the provider's start) and reached over ssh once it runs.

Money and data, in that order:
- nothing is destroyed before the copy is verified; a copy that fails or does not match destroys nothing,
  and a pod this command resumed is stopped again;
- the watchdog is asked to hold off for the copy (a lease): a resumed pod's agent does not run, and its
  silence must not get it stopped mid-copy;
- a resume that gets no GPU (RunPod: the pod may come back with zero, enough to copy from) or hangs
  (Vast: "scheduling" while its machine's GPUs are taken) is said as such, with what to do.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.pods.down import down
from gpuc.client.pods.run import job_on_pod, resolve_pod
from gpuc.core.errors import ConfigError, GpucError, ProviderError, SafetyRefusal
from gpuc.core.podjson import Unreadable, last_json_line
from gpuc.core.providers.local import LocalProvider
from gpuc.core.redact import redact
from gpuc.instance_side import resultscopy

if TYPE_CHECKING:
    from gpuc.core.models import Pod
    from gpuc.core.providers.base import PodAccess, Provider

LEASE_S = 3600.0  # the watchdog holds off this long: a resume, an ssh wait and a copy
RESUME_TIMEOUT_S = 600.0
POLL_S = 3.0
COPY_MIN_RATE = 1e6  # bytes/s: the copy's timeout assumes at least this (and ten minutes more)
LIST_ARGV = ["python", "-m", "gpuc.instance_side.resultscopy", "list"]
NOT_COPIED = "LINKS-NOT-COPIED.txt"
# The pod's listing of results/ is one JSON line, a name and a size per file: tens of thousands of files fit.
LISTING_MAX_BYTES = 64 * 1024 * 1024

Listing = dict[str, list[object]]
Fetch = Callable[[IO[bytes], float], None]  # writes the pod's tar stream (resultscopy tar) within a timeout


def results(
    ref: str,
    ctx: Ctx,
    *,
    to: Path | None = None,
    note: str | None = None,
    dry_run: bool = False,
    fetch: Fetch | None = None,
) -> Path | None:
    """Copy, verify, then end. Returns where the results are (None on a dry run)."""
    _run, pod, provider = resolve_pod(ref, ctx)
    dest = (to if to is not None else Path.cwd() / "results" / pod.id).expanduser().absolute()
    check_dest(dest)
    if dry_run:
        plan(pod, dest, ctx)
        return None
    hold_watchdog(ctx, pod.id, ctx.clock.now() + LEASE_S)
    resumed = False
    try:
        if pod.status == "stopped":
            pod = resume(provider, pod, ctx)
            resumed = True
        elif pod.status != "running":
            raise SafetyRefusal(
                f"{pod.id} is {pod.status} ({pod.raw_status or '-'}): its disk cannot be read now",
                hint=f"wait until it is running or stopped (gpuc ls), then run `gpuc results {ref}` again",
            )
        access = reach(provider, pod, ctx)
        refuse_running_job(access, pod)
        copy_results(access, fetch or fetcher(access, provider, pod), dest, ctx)
    except BaseException:
        if resumed:
            put_back(provider, pod, ctx)
        hold_watchdog(ctx, pod.id, ctx.clock.now())  # the lease ends with this attempt
        raise
    down(pod.id, ctx, note=note, copied_to=dest)
    return dest


def check_dest(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ConfigError(
            f"{dest} already exists and is not empty: the results are not copied over it",
            hint="choose another folder with --to DIR, or move that one away",
        )


def plan(pod: Pod, dest: Path, ctx: Ctx) -> None:
    steps = [f"ask the watchdog to hold off {pod.id} for {LEASE_S / 60:.0f} min (a lease)"]
    if pod.status == "stopped":
        steps.append(f"resume it at {pod.provider} (GPU billing starts again) and wait for ssh")
    steps += [
        f"copy results/ and the job's log to {dest}, then check every name and size against the pod's listing",
        "end it as `gpuc down` does: record the end, notify, destroy, confirm gone, close the ledger row",
    ]
    ctx.echo(f"dry run: results {pod.id} ({pod.status}) would:")
    for i, step in enumerate(steps, 1):
        ctx.echo(f"  {i}. {step}")


def hold_watchdog(ctx: Ctx, pod_id: str, until: float) -> None:
    try:
        ctx.watchdog.keep(pod_id, until)
    except GpucError as exc:
        # The user is here; the watchdog's own holds (and the lease, once it answers) still apply.
        ctx.echo(f"  watchdog not told ({exc.message}); going on")


# -- a stopped pod: resume, wait, and put back on failure --------------------------------------------
def resume(provider: Provider, pod: Pod, ctx: Ctx, timeout_s: float = RESUME_TIMEOUT_S) -> Pod:
    ctx.echo(f"resuming {pod.id} at {provider.name} to copy its results (GPU billing starts again until it ends)")
    provider.start(pod.id)
    start = ctx.clock.now()
    current: Pod | None = pod
    while True:
        current = provider.get(pod.id)
        if current is None or current.status == "terminated":
            raise ProviderError(f"pod {pod.id} disappeared while resuming", provider=provider.name)
        if current.status == "running":
            break
        if ctx.clock.now() - start > timeout_s:
            raise resume_stuck(provider.name, current, timeout_s)
        ctx.clock.sleep(POLL_S)
    ctx.echo(f"  {pod.id}: running after {ctx.clock.now() - start:.0f}s")
    if current.gpu_count == 0:
        ctx.echo(f"  {provider.name} resumed it with no GPU (none free on its machine): enough to copy its disk")
    return current


def resume_stuck(provider: str, pod: Pod, timeout_s: float) -> GpucError:
    waiting = "scheduling" in pod.raw_status
    why = (
        "it waits for its machine's GPUs ('scheduling'): Vast starts a stopped instance only on the machine it "
        "was on, once that machine is free"
        if waiting
        else f"it is still {pod.status} ({pod.raw_status or '-'})"
    )
    return ProviderError(
        f"the resume of {pod.id} did not finish within {timeout_s / 60:.0f} min: {why}",
        provider=provider,
        hint=f"it is stopped again, its disk (results/) kept; try `gpuc results {pod.id}` later, "
        f"or destroy it with `gpuc down {pod.id} --force` if the results are not worth the wait",
    )


def put_back(provider: Provider, pod: Pod, ctx: Ctx) -> None:
    """A pod resumed for a copy that did not happen goes back to stopped: it must not bill its GPU."""
    try:
        provider.stop(pod.id)
        ctx.echo(f"  {pod.id} stopped again: its disk (results/) is kept, GPU billing ended")
    except GpucError as exc:
        ctx.echo(
            f"  COULD NOT STOP {pod.id} again ({exc.message}): it bills as a running pod. Stop it in the "
            f"{provider.name} console, or destroy it: gpuc down {pod.id} --force"
        )


# -- reaching the pod and copying ---------------------------------------------------------------------
def reach(provider: Provider, pod: Pod, ctx: Ctx) -> PodAccess:
    if isinstance(provider, LocalProvider):
        return ctx.pod_access(provider, pod)
    from gpuc.client.onpod.ssh import SshAccess, wait_for_ssh, wait_for_ssh_endpoint  # startup: this command only

    pod = wait_for_ssh_endpoint(provider, pod, clock=ctx.clock)
    access = ctx.pod_access(provider, pod)
    if isinstance(access, SshAccess):
        wait_for_ssh(access, clock=ctx.clock)
    return access


def refuse_running_job(access: PodAccess, pod: Pod) -> None:
    busy = job_on_pod(access, pod)
    if busy is not None and "job is still running" in busy:
        raise SafetyRefusal(
            f"{pod.id}: {busy}; its results are not final, and ending the pod would kill it",
            hint="wait for the job to end (gpuc logs POD -f); its own end syncs them",
        )


def fetcher(access: PodAccess, provider: Provider, pod: Pod) -> Fetch:
    if isinstance(provider, LocalProvider):
        paths = provider.paths(pod.id)
        return lambda out, _timeout: resultscopy.write_tar(paths, out)
    from gpuc.client.onpod.ssh import SshAccess  # startup: as in reach

    if not isinstance(access, SshAccess):
        raise ConfigError(f"no way to copy files from {pod.id}", hint="copy results/ yourself over ssh")
    return lambda out, timeout_s: ssh_tar(access, out, timeout_s)


def ssh_tar(access: object, out: IO[bytes], timeout_s: float) -> None:
    """The pod's tar stream straight into a file: never held in memory, never through a shell on this side."""
    from gpuc.client.onpod.ssh import SshAccess, SshError  # startup: as in reach

    assert isinstance(access, SshAccess)
    remote = " ".join(shlex.quote(a) for a in [str(access.paths.python), "-m", "gpuc.instance_side.resultscopy", "tar"])
    try:
        proc = subprocess.run(
            access.ssh_argv("exec " + remote),
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


def remote_listing(access: PodAccess) -> Listing:
    code, out = access.read(LIST_ARGV, timeout_s=300.0)
    found: object = None
    if code == 0:
        with contextlib.suppress(Unreadable):
            found = last_json_line(out, most=LISTING_MAX_BYTES)
    if not isinstance(found, dict) or not all(isinstance(v, list) and v for v in found.values()):
        raise GpucError(
            f"could not list results/ on the pod (exit {code})",
            hint="ssh in (gpuc ls shows how) and look at /workspace/results; nothing was destroyed",
        )
    return found


def copy_results(access: PodAccess, fetch: Fetch, dest: Path, ctx: Ctx) -> None:
    """Listing -> room check -> tar stream -> safe extract -> the same listing here -> then `dest`."""
    expected = remote_listing(access)
    files = {k: v for k, v in expected.items() if v[0] == "f"}
    if "results" not in expected:
        ctx.echo("  the pod has no results/ folder: only the job's log is copied")
    total = sum(int(str(v[1])) for v in files.values())
    dest.parent.mkdir(parents=True, exist_ok=True)
    if shutil.disk_usage(dest.parent).free < total + 64 * 1024 * 1024:
        raise ConfigError(
            f"not enough room in {dest.parent} for {mb(total)} of results",
            hint="free some space or choose another folder with --to DIR; nothing was destroyed",
        )
    ctx.echo(f"copying results/ ({len(files)} files, {mb(total)}) and the job's log to {dest} ...")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        with tempfile.TemporaryFile(dir=dest.parent) as stream:
            fetch(stream, 600.0 + total / COPY_MIN_RATE)
            stream.seek(0)
            skipped = extract(stream, staging)
        verify(expected, skipped, staging)
        write_not_copied(staging, skipped)
        if dest.exists():
            dest.rmdir()  # check_dest let only an empty folder through
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    ctx.echo(f"  copied and verified: {len(files)} files, {mb(total)}: every name and size matches the pod's")


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


def verify(expected: Listing, skipped: dict[str, str], staging: Path) -> None:
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
            hint="nothing was destroyed; run `gpuc results` again",
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
        text = "Links on the pod that point outside results/ (not made here; they hold no data):\n"
        (staging / NOT_COPIED).write_text(text + "\n".join(lines) + "\n", encoding="utf-8")


def describe(entry: list[object]) -> str:
    kind = entry[0]
    return f"{entry[1]} bytes" if kind == "f" else f"a link to {entry[1]}" if kind == "l" else "a folder"


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n} bytes"
