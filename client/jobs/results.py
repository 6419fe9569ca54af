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

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.jobs.copyout import NOT_COPIED, Fetch, copy_results, fetcher
from gpuc.client.jobs.places import Destination, LastPush, check_keys, copy_pushed, last_push, result_places
from gpuc.client.pods.down import down
from gpuc.client.pods.run import job_on_pod, look_up
from gpuc.client.runs import RunRecord
from gpuc.core.errors import ConfigError, GpucError, NotFound, ProviderError, SafetyRefusal
from gpuc.core.providers.local import LocalProvider
from gpuc.instance_side.sync import JOB_LOG_NAME, OUTCOME_NAME

if TYPE_CHECKING:
    from gpuc.core.pod import Pod
    from gpuc.core.providers.base import PodAccess, Provider

LEASE_S = 3600.0  # the watchdog holds off this long: a resume, an ssh wait and a copy
RESUME_TIMEOUT_S = 600.0
POLL_S = 3.0
__all__ = ["NOT_COPIED", "Fetch", "copy_results", "fetcher", "results"]


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
    run, found, provider = look_up(ref, ctx)
    dest = (to if to is not None else Path.cwd() / "results" / str(run.pod_id)).expanduser().absolute()
    check_dest(dest)
    if found is None:
        return from_last_push(run, dest, ctx, dry_run=dry_run)
    pod = found
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


def from_last_push(run: RunRecord, dest: Path, ctx: Ctx, *, dry_run: bool) -> Path | None:
    """The pod is gone: what its last verified push left at the destination, laid out as a kept pod's copy
    (results/ and, beside it, the job's log and outcome), and said as what it is. A push made after the job
    exited, with nothing still being written, is its final sync: all the job wrote. Any other push is the
    results as of that push, not the pod's (what the job wrote after it went with the pod)."""
    where = Destination(result_places(ctx.settings, run.provider, run.experiment, run.run_id))
    try:
        push = last_push(where)
        if push is None:
            why = f" ({where.errors[0]})" if where.errors else ""
            raise NotFound(
                f"pod {run.pod_id} no longer exists at {run.provider}, and {where.describe()} holds no push of its "
                f"results{why}",
                hint="a pod pushes results/ while its job runs (GPUC_SYNC_INTERVAL_S) and syncs them at its end; "
                "`gpuc logs` shows what its job said",
            )
        now = ctx.clock.now()
        code = push.after_exit(where.read_outcome() if OUTCOME_NAME in push.beside else None)
        said = push.said(now) if code is None else push.said_final(now, code)
        if dry_run:
            ctx.echo(
                f"dry run: pod {run.pod_id} is gone; would copy {len(push.files)} files of results/ and the job's "
                f"log from {said} to {dest}, checking every size"
            )
            return None
        check_keys(push, [*push.files, *push.beside])  # the pod's word: nothing read before all are the run's own
        copied = _copy_staged(where, push, dest)
    finally:
        where.close()
    log = "" if JOB_LOG_NAME in push.beside else " (no job log in it)"
    ended = (
        ": all its job wrote"
        if code is not None
        else ", not from the pod: what its job wrote after that push is not in them"
    )
    files = f"{len(push.files)} file{'s' if len(push.files) != 1 else ''}"
    ctx.echo(
        f"pod {run.pod_id} is gone: copied {files} of results/ and the job's log{log} ({copied} bytes in all) "
        f"from {said}{ended}"
    )
    return dest


def _copy_staged(where: Destination, push: LastPush, dest: Path) -> int:
    """Into a staging folder beside `dest`, moved into place only once every file matched its size: a copy
    cut short leaves nothing that looks like results."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        copied = copy_pushed(where, push, sorted(push.files), staging / "results")
        copied += copy_pushed(where, push, sorted(push.beside), staging)
        if dest.exists():
            dest.rmdir()  # check_dest let only an empty folder through
        staging.rename(dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return copied


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
