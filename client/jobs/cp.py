"""`gpuc cp POD:PATH [DIR]` and `gpuc cp PATH POD:[DIR]`: files between this laptop and a pod gpuc started,
over the ssh gpuc already uses (a local sandbox: its folder), PATH on the pod relative to its workspace.

From the pod: the pod lists what it sends, and the copy lands only when every name and size matches
(client/jobs/copyout.py); nothing here is overwritten. To the pod: what `up` would send of that file or
folder (the same exclusions, the same refusal of anything that looks like a credential, checked before the
pod is touched), unpacked on the pod by `ask unpack`, which lets nothing land outside the workspace.
Neither way reaches outside the workspace: not the pod's secrets file, not gpuc's own `.gpuc/`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath

from gpuc.client.context import Ctx
from gpuc.client.jobs.copyout import NOT_COPIED, What, copy_results, fetcher
from gpuc.client.jobs.places import Destination, copy_pushed, last_push, result_places
from gpuc.client.jobs.results import reach
from gpuc.client.onpod.upload import (
    Bundle,
    check_credentials,
    check_size,
    collect,
    refuse_credential_folder,
    skipped_name,
    upload,
)
from gpuc.client.pods.run import look_up, resolve_pod
from gpuc.client.runs import RunRecord
from gpuc.core.errors import ConfigError, NotFound, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider


def split_target(text: str) -> tuple[str | None, str]:
    """ "POD:PATH" -> (POD, PATH); a local path otherwise. As scp reads it: a colon before any slash names a
    pod, so `./a:b` and `/tmp/a:b` stay local."""
    head, colon, tail = text.partition(":")
    if colon and head and "/" not in head:
        return head, tail
    return None, text


def workspace_rel(path: str, *, folder: bool) -> str:
    """A path on the pod, checked here as the pod checks it: inside the workspace, never gpuc's own files."""
    rel = PurePosixPath(path or ".")
    if rel.is_absolute() or ".." in rel.parts or (rel.parts and rel.parts[0] == ".gpuc"):
        raise ConfigError(
            f"{path!r} is not a path inside the pod's workspace",
            hint="name it relative to the workspace, e.g. POD:results/run1 (the job's folder)",
        )
    if not folder and not rel.parts:
        raise ConfigError("name what to copy from the pod", hint="e.g. gpuc cp POD:results/metrics.json .")
    return rel.as_posix()


def cp(source: str, dest: str, ctx: Ctx) -> str:
    """One copy, either way; returns where it landed."""
    src_pod, src = split_target(source)
    dest_pod, dst = split_target(dest)
    if (src_pod is None) == (dest_pod is None):
        raise ConfigError(
            "one side of `gpuc cp` must be a pod (POD:PATH) and the other a path here",
            hint="e.g. gpuc cp POD:results/metrics.json .   or   gpuc cp data/ POD:data",
        )
    if src_pod is not None:
        return pull(src_pod, workspace_rel(src, folder=False), Path(dst or "."), ctx)
    assert dest_pod is not None
    return push(Path(src), dest_pod, workspace_rel(dst, folder=True), ctx)


def _running_pod(ref: str, ctx: Ctx) -> tuple[Pod, Provider]:
    _run, pod, provider = resolve_pod(ref, ctx)
    if pod.status != "running":
        raise SafetyRefusal(
            f"pod {pod.id} is {pod.status}: its disk cannot be read or written now",
            hint=f"a stopped pod kept for its results: `gpuc results {pod.id}` resumes it and copies them",
        )
    return pod, provider


def pull(ref: str, rel: str, into: Path, ctx: Ctx) -> str:
    into = into.expanduser().absolute()
    name = PurePosixPath(rel).name or "workspace"
    final = into / name
    if final.exists() or final.is_symlink():
        raise ConfigError(f"{final} already exists: nothing is copied over it", hint="move it away, or copy elsewhere")
    if not into.is_dir():
        raise ConfigError(f"{into} is not a folder here", hint="create it, or name a folder that exists")
    run, found, _provider = look_up(ref, ctx)
    if found is None:
        return _pull_from_last_push(run, rel, final, ctx)
    pod, provider = _running_pod(ref, ctx)
    access = reach(provider, pod, ctx)
    what = What.workspace_path(rel, pod.id)
    holder = Path(tempfile.mkdtemp(prefix=f".gpuc-cp-{name}-", dir=into))
    try:
        staged = holder / "copy"
        manifest = copy_results(access, fetcher(access, provider, pod, what), staged, ctx, what)
        move_new(staged / name, final)
        if manifest is not None:
            where = link_new(staged / manifest, into, name)
            ctx.echo(f"  the links on the pod are not made here; they are listed in {where}")
    finally:
        shutil.rmtree(holder, ignore_errors=True)
    return str(final)


def move_new(src: Path, dst: Path) -> None:
    """`src` to `dst`, never over anything there (a file made meanwhile included)."""
    refusal = ConfigError(f"{dst} already exists: nothing is copied over it", hint="move it away, or copy elsewhere")
    if src.is_dir():
        if dst.exists() or dst.is_symlink():
            raise refusal
        src.rename(dst)
        return
    try:
        os.link(src, dst)  # fails on any name already there, unlike a rename
    except FileExistsError:
        raise refusal from None


def link_new(manifest: Path, into: Path, name: str) -> Path:
    """The links file beside the copy, under the first of its names nothing holds yet: a file of the
    user's (or of an earlier copy) is never replaced."""
    for n in range(1, 100):
        where = into / (f"{name}.{NOT_COPIED}" if n == 1 else f"{name}.LINKS-NOT-COPIED-{n}.txt")
        try:
            os.link(manifest, where)
        except FileExistsError:
            continue
        return where
    raise ConfigError(f"{into} holds 99 links files of {name}", hint="remove the old ones and copy again")


def _pull_from_last_push(run: RunRecord, rel: str, final: Path, ctx: Ctx) -> str:
    """The pod is gone: results/... from what its last verified push left at the destination,
    said as such. Only results/ was pushed: any other path of the workspace went with the pod."""
    parts = PurePosixPath(rel).parts
    if parts[:1] != ("results",):
        raise NotFound(
            f"pod {run.pod_id} no longer exists at {run.provider}: {rel} went with it",
            hint=f"only results/ outlives a pod (pushed while the job ran): gpuc cp {run.pod_id}:results/... .",
        )
    inside = "/".join(parts[1:])
    where = Destination(result_places(ctx.settings, run.provider, run.experiment, run.run_id))
    try:
        push = last_push(where)
        if push is None:
            raise NotFound(
                f"pod {run.pod_id} no longer exists at {run.provider}, and {where.describe()} holds no push of it",
                hint="`gpuc logs` shows what its job said",
            )
        if inside in push.files:  # one file: it lands under its own name
            names = [inside]
        else:
            names = sorted(n for n in push.files if not inside or n.startswith(inside.rstrip("/") + "/"))
        if not names:
            raise NotFound(f"{rel} is not in {push.said(ctx.clock.now())}", hint=f"gpuc results {run.pod_id} gets all")
        holder = Path(tempfile.mkdtemp(prefix=".gpuc-cp-", dir=final.parent))
        try:
            copy_pushed(where, push, names, holder)
            move_new(holder / inside if inside else holder, final)
        finally:
            shutil.rmtree(holder, ignore_errors=True)
    finally:
        where.close()
    ctx.echo(f"pod {run.pod_id} is gone: {rel} is from {push.said(ctx.clock.now())}, not from the pod")
    return str(final)


def push(local: Path, ref: str, rel_dir: str, ctx: Ctx) -> str:
    bundle = _bundle(local, ctx)  # checked here, before the pod is touched
    pod, provider = _running_pod(ref, ctx)
    access = reach(provider, pod, ctx)
    prefix = "/".join(part for part in (rel_dir if rel_dir != "." else "", bundle.prefix) if part)
    bundle.prefix = prefix
    upload(access, bundle, ctx.echo, what="copy")
    return f"{pod.id}:{prefix or '.'}"


def _bundle(local: Path, ctx: Ctx) -> Bundle:
    """What `up` would send of it, named under its own name (a folder keeps its name, as cp -r does)."""
    if local.is_symlink() or not local.exists():
        raise ConfigError(f"{local} is not a file or folder here", hint="name a file or a folder (not a link)")
    # The name given is judged too, not only the names inside it: `~/.kube` holds `config`.
    refuse_credential_folder(local if local.is_dir() else local.parent)  # as given: a link's name counts
    if local.is_dir():
        bundle = collect(local.resolve(), ctx.settings.home)
        bundle.prefix = local.resolve().name
    elif skipped_name(PurePosixPath(local.name)) is not None:
        raise ConfigError(f"{local} is never sent to a pod (a .env file holds keys)", hint="copy what the job needs")
    else:
        bundle = Bundle(root=local.resolve().parent, how="one file", files={local.name: local.stat().st_size})
    check_size(bundle, ctx.settings.upload_max_mb)
    check_credentials(bundle, ctx.settings.named_secrets())
    if not bundle.files and not bundle.links:
        raise ConfigError(
            f"nothing in {local} would be sent", hint="its files are all ignored (.gitignore, .gpucignore)"
        )
    return bundle
