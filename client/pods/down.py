"""`gpuc down`: sync gate -> record the end -> notify -> destroy (never stop) -> confirm gone -> close the
ledger row. A sync that fails keeps the pod (its results are only there) unless the user says --force.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from gpuc.client.context import Ctx
from gpuc.client.pods.run import look_up
from gpuc.client.runs import RunRecord
from gpuc.core.api import EndRequest
from gpuc.core.errors import GpucError, ProviderError, SafetyRefusal
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider
from gpuc.core.termsafe import clean_line
from gpuc.core.titles import title


def down(
    ref: str,
    ctx: Ctx,
    note: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    copied_to: Path | None = None,
) -> None:
    """Sync gate → record the end → notify → destroy (never stop) → confirm gone → close the ledger.
    `copied_to`: `gpuc results` copied results/ there and verified it, which satisfies the sync gate."""
    run, pod, provider = look_up(ref, ctx)
    if pod is None:
        ctx.echo(f"{run.pod_id} is already gone at {run.provider}")
        _finish_down(run, ctx, note)
        return
    steps = [
        "sync results and verify",
        "record the end with the watchdog",
        "notify",
        "destroy",
        "confirm gone",
    ]
    if dry_run:
        ctx.echo(f"dry run: down {pod.id} would: " + " -> ".join(steps))
        return
    if copied_to is not None:
        ctx.echo(f"  results/ copied to {copied_to} and verified: nothing is left only on the pod")
    else:
        _sync_gate(provider, pod, ctx, force)
    end_at = ctx.clock.now()
    _record_end(ctx, pod.id, end_at, note)
    _notify(ctx, title("destroyed by gpuc down", experiment=run.experiment), f"Nothing to do. Pod {pod.id}.")
    result = provider.destroy(pod.id)
    if not provider.confirm_gone(pod.id, ctx.clock):
        raise ProviderError(
            f"{pod.id} still listed after destroy",
            provider=provider.name,
            hint="run gpuc down again, or check the console",
        )
    ctx.echo(f"{pod.id}: {result.replace('_', ' ')}, confirmed gone")
    _finish_down(run, ctx, note)


def _sync_gate(provider: Provider, pod: Pod, ctx: Ctx, force: bool) -> None:
    if pod.status != "running":
        if force:
            ctx.echo(f"{pod.id} is {pod.status}: its disk is out of reach; destroying anyway (--force)")
            return
        raise SafetyRefusal(
            f"{pod.id} is {pod.status}: its results cannot be synced",
            hint=f"what was not pushed during the run is only on the pod: `gpuc results {pod.id}` copies "
            f"results/ here and ends it; `gpuc down {pod.id} --force` destroys them",
        )
    code, out = ctx.pod_access(provider, pod).run(["python", "-m", "gpuc.instance_side", "sync"])
    if code == 0:
        ctx.echo(f"  results synced and verified ({out.strip().splitlines()[-1] if out.strip() else 'ok'})")
        return
    if force:
        ctx.echo("  sync FAILED; destroying anyway (--force)")
        return
    _notify(
        ctx,
        title("results sync FAILED: pod kept, billing", experiment=pod.experiment or pod.name),
        f"Get the results: gpuc results {pod.id} (gpuc down refused to destroy it).",
    )
    why = clean_line(out.strip().splitlines()[-1][:240]) if out.strip() else "no output"  # the pod's words
    raise SafetyRefusal(
        f"results sync failed on {pod.id} ({why}); the pod is kept",
        hint=f"results are only on the pod: `gpuc results {pod.id}` copies them here and ends it; "
        f"`gpuc down {pod.id} --force` destroys them",
    )


def _record_end(ctx: Ctx, pod_id: str, end_at: float, note: str | None) -> None:
    try:
        ctx.watchdog.end(pod_id, EndRequest(end_at=end_at, by="down", note=note))
    except GpucError as exc:
        # The user is here and asked for the destroy: a watchdog outage must not keep a pod billing.
        ctx.echo(f"  watchdog unreachable ({exc.message}); the ledger is closed locally")


def _notify(ctx: Ctx, headline: str, message: str) -> None:
    # A notification never blocks a destroy (F13).
    with contextlib.suppress(GpucError):
        ctx.watchdog.notify(headline, message)


def _finish_down(run: RunRecord, ctx: Ctx, note: str | None) -> None:
    ctx.runs.set_phase(run.run_id, "ended", now=ctx.clock.now(), note=note)
    if run.pod_id:
        close_ledger(ctx, run.pod_id, note)


def close_ledger(ctx: Ctx, pod_id: str, note: str | None) -> None:
    try:
        ctx.ledger().end(pod_id, end_ts=ctx.clock.now(), note=note)
    except GpucError as exc:
        ctx.echo(f"ledger: {exc}")



def wait_gone(ctx: Ctx, pod: Pod, timeout_s: float, poll_s: float = 0.5) -> bool:
    """Block until the pod is gone (the wrapper destroyed it) or the timeout passes."""
    provider = ctx.provider(pod.provider)
    deadline = ctx.clock.now() + timeout_s
    while ctx.clock.now() < deadline:
        current = provider.get(pod.id)
        if current is None:
            ctx.echo(f"{pod.id} is gone")
            return True
        ctx.clock.sleep(poll_s)
    ctx.echo(f"{pod.id} still exists after {timeout_s:.0f}s")
    return False

