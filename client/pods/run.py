"""`gpuc run`: a job on a pod gpuc started, under the wrapper (on its exit: sync -> notify -> destroy); and
finding a pod by what the user typed (look_up, resolve_pod), which `down`, `logs` and `results` share.

Refused while the pod runs a job: the pod says so itself (onpod/ask.py job-state), and a reading that
cannot be trusted refuses too, since a second job's exit destroys the pod under the first.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuc.client.context import Ctx
from gpuc.client.onpod.ask import OlderPod, PodAnswerError, job_state
from gpuc.client.onpod.script import check_before_upload, check_command, check_in_bundle, named_files
from gpuc.client.onpod.upload import Bundle, upload
from gpuc.client.runs import RunRecord
from gpuc.core.clock import duration_text
from gpuc.core.errors import NotFound, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.core.podpaths import STATE_REL as STATE_DIR
from gpuc.core.providers.base import PodAccess, Provider


def job_on_pod(access: PodAccess, pod: Pod) -> str | None:
    """What keeps `run` off this pod: a job still running, or the pod ending; None when it is free.
    A reading that cannot be trusted raises: a second job is what destroys a pod under the first."""
    try:
        state = job_state(access)
    except OlderPod:
        raise
    except PodAnswerError as exc:
        raise SafetyRefusal(
            f"could not tell whether a job is running on {pod.id} ({exc.message}): not starting another",
            hint=f"look with `gpuc ls` or ssh in; start it anyway with: gpuc run {pod.id} --force -- ...",
        ) from None
    if state.job_pid is not None:
        return f"a job is still running on it (pid {state.job_pid})"
    if state.ended in ("", pod.id) or state.ending:
        return "it is ending (its results sync and destroy are under way)"  # warm.ENDING
    return None


def run_job(
    ref: str,
    command: list[str],
    ctx: Ctx,
    dry_run: bool = False,
    force: bool = False,
    job_id: str | None = None,
    bundle: Bundle | None = None,
    job_env: Mapping[str, str] | None = None,
    clean: bool = False,
    *,
    wait: bool = False,
    here: Path | None = None,
) -> Pod:
    """Start COMMAND under the wrapper. Refused while the pod runs a job (checked on the pod itself):
    the second job's exit would destroy the pod under the first. `force` starts it anyway. `bundle`
    (`run --sync`): the project, uploaded first; never under a running job, whose files it would change,
    nor for a command that cannot run (checked here, then on the pod, before the upload). `wait` and `here`
    (the folder `run` was typed in) only shape the fix a refusal gives."""
    if bundle is not None:
        check_in_bundle(command, bundle, clone=bool(ctx.settings.git_remote), nothing="uploaded")
    run, found, provider = look_up(ref, ctx)
    if found is None:
        raise ended(run, command, wait=wait)
    pod = found
    if pod.status != "running":
        raise SafetyRefusal(f"pod {pod.id} is {pod.status}", hint="only a running pod can take a job")
    access = ctx.pod_access(provider, pod)
    busy = job_on_pod(access, pod)
    if busy and not force and run.warm_s:
        from gpuc.client.pods import warm  # lazy: `ls` and `down` load this module for look_up

        raise warm.busy_refusal(pod.id, busy, run)
    if busy and not force:
        raise SafetyRefusal(
            f"pod {pod.id}: {busy}; a second job would destroy the pod when it exits, under the first",
            hint=f"wait for it (gpuc ls), or start it anyway with: gpuc run {pod.id} --force -- ...",
        )
    if busy and bundle is not None:
        raise SafetyRefusal(
            f"pod {pod.id}: {busy}; --sync would change the files under it",
            hint=f"wait for it (gpuc ls), or run without --sync: gpuc run {pod.id} --force -- ...",
        )
    if busy and clean:
        raise SafetyRefusal(
            f"pod {pod.id}: {busy}; --clean would empty results/ under it",
            hint=f"wait for it (`gpuc logs {pod.id} -f` follows it)",
        )
    if busy:
        ctx.echo(f"{pod.id}: {busy}; starting another anyway (--force)")
    if bundle is None:
        # Refused, not destroyed: this pod was not just created for the job, it may hold someone's work.
        check_command(access, command, None, destroying=False, fix=sync_fix(ref, command, here, wait=wait))
    else:
        check_before_upload(access, command, bundle)
    if dry_run:
        if bundle is not None:
            ctx.echo(f"dry run: would upload {bundle.describe()} to {pod.id}")
        if job_env:
            ctx.echo(f"dry run: would give the job {', '.join(sorted(job_env))} (--env)")
        if clean:
            ctx.echo(f"dry run: would push results/ on {pod.id}, then remove what the destination holds (--clean)")
        ctx.echo(f"dry run: would start under the wrapper on {pod.id}: {short_command(command)}")
        return pod
    if bundle is not None:
        upload(access, bundle, ctx.echo)
        check_command(access, command, bundle, destroying=False)
    if job_env:
        from gpuc.core.podconfig import render_env_file  # pydantic: only a job given variables loads it

        if job_id is None:
            raise SafetyRefusal("a job with --env needs its job id", hint="report this as a bug")
        # Over ssh's stdin into a mode-600 file the job's wrapper reads and removes: never argv, never output.
        access.put_file(f"{STATE_DIR}/job-env/{job_id}", render_env_file(job_env).encode(), 0o600)
    if clean:
        ctx.echo(clean_results(access, pod))
    if run.warm_s:
        from gpuc.client.pods.warm import move_deadline  # lazy: as above

        moved = move_deadline(run, pod, ctx)  # a warm pod's deadline follows its jobs
        if moved is not None:
            ctx.echo(moved)
    start_job(access, command, job_id)
    ctx.echo(job_started(pod, command, run.warm_s))
    return pod


def clean_results(access: PodAccess, pod: Pod) -> str:
    """`run --clean`: the pod pushes results/, then removes what the destination holds as it is (never what it
    does not: instance_side/clean.py). Refused, starting no job, when it removed nothing for a reason."""
    from gpuc.client.onpod.ask import clean_results as ask_clean

    try:
        done = ask_clean(access)
    except OlderPod:
        raise
    except PodAnswerError as exc:
        raise SafetyRefusal(
            f"results/ on {pod.id} was not emptied: {exc.error or exc.message}; nothing was deleted and no job started",
            hint=f"run without --clean (the job then finds the last job's results/), or `gpuc logs {pod.id}` "
            "and the pod's .gpuc/agent.log",
        ) from None
    said = (
        f"results/ on {pod.id}: {done.removed} file(s) removed ({done.removed_bytes} bytes), each at "
        f"{done.destination} as it was (--clean)"
    )
    if done.kept_count:
        more = f" (+{done.kept_count - len(done.kept)} more)" if done.kept_count > len(done.kept) else ""
        said += f"; {done.kept_count} kept: {', '.join(done.kept[:5])}{more}"
    return said


def ended(run: RunRecord, command: Sequence[str], *, wait: bool) -> NotFound:
    """`run` on a pod that has ended: the `up` that starts a new one for this job (a warm pod's with its warm
    time), rather than `gpuc ls`, which would only show it gone."""
    warm = f" --warm {duration_text(run.warm_s)}" if run.warm_s else ""
    again = f"gpuc up {shlex.quote(run.experiment)}{warm}{' --wait' if wait else ''} -- {shlex.join(command)}"
    what = f"the warm pod of {run.experiment}" if run.warm_s else f"the pod of {run.experiment}"
    return NotFound(
        f"pod {run.pod_id} no longer exists at {run.provider}: {what} has ended; nothing was run",
        hint=f"start a new one with this job: {again}",
    )


def sync_fix(ref: str, command: Sequence[str], here: Path | None, *, wait: bool) -> str:
    """The fix for a file the pod lacks: `--sync` when it is in this folder (written since the upload)."""
    folder = here if here is not None else Path.cwd()
    inside = [n for n in named_files(list(command))[1] if not n.startswith(("/", "~")) and ".." not in n.split("/")]
    local = [name for name in inside if (folder / name).is_file()]
    if not local:
        return "fix the command's name or path (the pod holds what `up` or the last `run --sync` uploaded)"
    again = f"gpuc run {shlex.quote(ref)} --sync{' --wait' if wait else ''} -- {shlex.join(command)}"
    return f"{', '.join(local)} is here but not on the pod: upload this folder first with {again}"


def job_variables(names: Sequence[str], ctx: Ctx) -> dict[str, str]:
    """`gpuc run --env NAME`: each value from the environment, then .env, as `up --env` finds it; a name
    found nowhere, NAME=value or a key that never goes onto a pod is refused, naming only the name."""
    if not names:
        return {}
    from gpuc.client.pods.plan import check_env_file
    from gpuc.core.podsecrets import choose

    env_file = check_env_file(ctx.settings, "local")  # its mode checked; a missing one holds nothing
    chosen = choose({}, None, [os.environ, env_file], asked=names)
    ctx.echo(f"variables to the job: {', '.join(sorted(chosen.values))} (--env; values never printed)")
    return dict(chosen.values)


def resolve_pod(ref: str, ctx: Ctx) -> tuple[RunRecord, Pod, Provider]:
    run, pod, provider = look_up(ref, ctx)
    if pod is None:
        raise NotFound(f"pod {run.pod_id} no longer exists at {run.provider}", hint="`gpuc ls` shows live pods")
    return run, pod, provider


def look_up(ref: str, ctx: Ctx) -> tuple[RunRecord, Pod | None, Provider]:
    """The run, its pod as the provider lists it now (None: gone), and that provider. Refuses a pod
    without gpuc's marks: gpuc never acts on a pod it did not start."""
    run = ctx.runs.find(ref)
    if run.pod_id is None:
        raise NotFound(f"run {run.run_id} never got a pod id", hint="`gpuc ls` shows what exists at the provider")
    provider = ctx.provider(run.provider)
    pod = provider.get(run.pod_id)
    if pod is not None and not pod.managed:
        raise SafetyRefusal(f"pod {pod.id} is not marked as gpuc's", hint="gpuc never acts on pods it did not start")
    return run, pod, provider


def short_command(command: list[str], width: int = 72) -> str:
    text = " ".join(command).replace("\n", "; ")
    return text if len(text) <= width else text[: width - 3] + "..."


def start_job(access: PodAccess, command: list[str], job_id: str | None = None) -> None:
    named = ["--job-id", job_id] if job_id else []
    access.spawn(["python", "-m", "gpuc.instance_side", "run", *named, "--", *command], role="job")


def job_started(pod: Pod, command: list[str], warm_s: float | None = None) -> str:
    """Started is all `up` and `run` know without --wait: never said as if it had succeeded. A warm pod
    (`up --warm`) stays after the job: said in its own words."""
    from gpuc.client.pods.warm import kept_words

    then = (
        kept_words(warm_s)
        if warm_s
        else ("when it exits the pod syncs results/ and the log, notifies you and destroys itself")
    )
    follow = f"Follow it: gpuc logs {pod.id} -f"
    return f"job STARTED on {pod.id}: {short_command(command)}\n  it runs on its own; {then}. {follow}"
