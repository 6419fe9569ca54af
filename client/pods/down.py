"""`gpuc down`: sync gate -> record the end -> notify -> destroy (never stop) -> confirm gone -> close the
ledger row. A sync that fails keeps the pod (its results are only there) unless the user says --force.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from gpuc.client.context import Ctx
from gpuc.client.pods.run import look_up
from gpuc.client.pods.spent import spent
from gpuc.client.progress import Ticker
from gpuc.client.runs import RunRecord
from gpuc.core.api import EndRequest, RunRecovery
from gpuc.core.errors import GpucError, NotFound, ProviderError, SafetyRefusal
from gpuc.core.ledger.rows import money
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider
from gpuc.core.termsafe import clean_line
from gpuc.core.titles import title

# How long `down` waits for a watchdog pass inside a re-rent to see the stop (each of its steps is one provider
# call, with its own deadline), asking every BUSY_POLL_S; past it, `down` says what is still going on.
BUSY_WAIT_S = 90.0
# What the pod's shell answers `exec <gpuc's python>` with when the file is not there (POSIX: command not found);
# ssh's own failures are 255, a sync's are its own codes.
NOT_INSTALLED = 127
BUSY_POLL_S = 3.0


def down(
    ref: str,
    ctx: Ctx,
    note: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    copied_to: Path | None = None,
) -> None:
    """Sync gate → record the end → notify → destroy (never stop) → confirm gone → close the ledger.
    `copied_to`: `gpuc results` copied results/ there and verified it, which satisfies the sync gate.
    A recovering run (`up --recover`) has its recovery stopped first, and its pod now is its latest attempt's."""
    run, pod, provider = look_up_run(ref, ctx)
    recovering = None if dry_run else stop_recovery(run, ctx)
    if recovering is not None:
        pod = current_attempt(recovering, run, pod, provider)
    if pod is None:
        ctx.echo(f"{run.pod_id} is already gone at {run.provider}")
        _finish_down(run, ctx, note, recovering)
        _say_spent(run, ctx, recovering)
        return
    steps = [
        "stop the run's recovery (if it recovers)",
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
    elif recovering is not None and pod.status == "paused":
        _outbid_attempt(pod, recovering, ctx)
    elif recovering is not None and pod.id != run.pod_id:
        _sync_gate(provider, pod, ctx, force, rented_for=recovering)
    else:
        _sync_gate(provider, pod, ctx, force)
    end_at = ctx.clock.now()
    _record_end(ctx, pod.id, end_at, note)
    so_far = spent(ctx, run.pod_id) if recovering is None else None  # a run's attempts: its row closes below
    cost = so_far.usd if so_far is not None else None
    _notify(
        ctx, title("destroyed by gpuc down", experiment=run.experiment, cost_usd=cost), f"Nothing to do. Pod {pod.id}."
    )
    result = provider.destroy(pod.id)
    if not provider.confirm_gone(pod.id, ctx.clock):
        raise ProviderError(
            f"{pod.id} still listed after destroy",
            provider=provider.name,
            hint="run gpuc down again, or check the console",
        )
    ctx.echo(f"{pod.id}: {result.replace('_', ' ')}, confirmed gone")
    _finish_down(run, ctx, note, recovering)
    _say_spent(run, ctx, recovering)


def _say_spent(run: RunRecord, ctx: Ctx, recovering: RunRecovery | None) -> None:
    """The ledger's figure once its row is closed: what the pod (a recovering run: every attempt) cost."""
    found = spent(ctx, run.pod_id)
    if recovering is not None and (found is None or not found.final):
        # The run's one row stays open until the watchdog records its end: its own figure, not the first pod's.
        ctx.echo(
            f"  the run spent {money(recovering.spent_usd)} across {len(recovering.attempts)} attempt(s)"
            " (the watchdog's figure; its ledger row closes once the watchdog records its end)"
        )
    elif found is not None:
        whole = "the run (every attempt)" if recovering is not None else "the pod"
        ctx.echo(f"  {whole} {found.words()} (gpuc ledger)")


def look_up_run(ref: str, ctx: Ctx) -> tuple[RunRecord, Pod | None, Provider]:
    """look_up, and for a pod the watchdog rented to recover a run (this laptop never saw its id), its run:
    the watchdog's record names it."""
    try:
        return look_up(ref, ctx)
    except NotFound:
        run_id = _run_of_pod(ref, ctx)
        if run_id is None:
            raise
        return look_up(run_id, ctx)


def _run_of_pod(pod_id: str, ctx: Ctx) -> str | None:
    try:
        pods = ctx.watchdog.status().pods
    except GpucError:
        return None
    return next((p.run_id for p in pods if p.pod_id == pod_id and p.run_id), None)


def stop_recovery(run: RunRecord, ctx: Ctx) -> RunRecovery | None:
    """A run that recovers from outbids is stopped at the watchdog BEFORE its pod is destroyed: else the
    watchdog could rent the next attempt while (or after) the user ends this one. None: the run does not
    recover (the watchdog holds no such run), or the watchdog could not be asked (said: the destroy goes on,
    the user asked for it, and a destroyed pod is no outbid to recover from)."""
    try:
        recovering = ctx.watchdog.run(run.run_id)
        if recovering is None or recovering.done:
            return recovering
        if not recovering.stop_asked:
            ctx.watchdog.stop_run(run.run_id)
        recovering = settled(run.run_id, ctx) or recovering
    except GpucError as exc:
        ctx.echo(
            f"  could not ask the watchdog whether run {run.run_id} recovers ({exc.message}): destroying anyway; "
            f"if it does, stop it from the phone or run `gpuc down {run.run_id}` again once the watchdog answers"
        )
        return None
    if recovering.busy is not None:
        # A pass inside a re-rent: it destroys what it rents after this stop (confirmed gone) and says so; until
        # it is over, which pod is the run's is not known here, so nothing is claimed about what bills.
        raise GpucError(
            f"recovery of run {run.run_id} stopped, but the watchdog is still {recovering.busy}: it destroys any "
            "attempt rented after your stop, confirmed gone, and tells you",
            hint=f"run `gpuc down {run.run_id}` again in a minute: it ends the run's pod once the watchdog is done",
        )
    attempts = len(recovering.attempts)
    ctx.echo(
        f"  recovery of run {run.run_id} stopped (attempt {attempts} of up to {recovering.recover + 1}, "
        f"${recovering.spent_usd:.2f} spent): no further attempt is rented"
    )
    return recovering


def settled(run_id: str, ctx: Ctx) -> RunRecovery | None:
    """The run as the watchdog keeps it once no pass is inside an act on it (read after the stop: an act claimed
    before the stop sees it at its next step), or as it is after BUSY_WAIT_S."""
    waited = 0.0
    every_s = ctx.settings.progress_every_s
    ticker = Ticker("waiting for the watchdog to finish with the run", ctx.clock, say=ctx.echo, every_s=every_s)
    while True:
        now = ctx.watchdog.run(run_id)
        if now is None or now.busy is None or waited >= BUSY_WAIT_S:
            return now
        ticker.tick(now.busy)
        ctx.clock.sleep(BUSY_POLL_S)
        waited += BUSY_POLL_S


def current_attempt(recovering: RunRecovery, run: RunRecord, pod: Pod | None, provider: Provider) -> Pod | None:
    """The run's pod now: its latest attempt not ended (the first pod is gone after an outbid)."""
    live = [a.pod_id for a in recovering.attempts if a.end is None]
    if not live or (pod is not None and pod.id == live[-1]):
        return pod
    found = provider.get(live[-1])
    if found is not None and not found.managed:
        raise SafetyRefusal(f"pod {found.id} is not marked as gpuc's", hint="gpuc never acts on pods it did not start")
    return found if found is not None else pod


def _outbid_attempt(pod: Pod, recovering: RunRecovery, ctx: Ctx) -> None:
    """A recovering run's outbid attempt: its disk is read by nothing while paused, and the stop just asked has the
    watchdog destroy it (a stopped recovery keeps no paused attempt): refusing here said "kept, --force" while the
    watchdog destroyed it a pass later. A recovering run resumes from its pushes (up refuses --recover without a
    destination they reach), so what it pushed is said, and the destroy goes on."""
    kept = f" at {recovering.results_at}" if recovering.results_at else ""
    ctx.echo(
        f"  {pod.id} is paused (outbid): its disk is out of reach; the run's results are its last push{kept}: "
        "destroying it, as the stopped recovery does"
    )


def _sync_gate(provider: Provider, pod: Pod, ctx: Ctx, force: bool, *, rented_for: RunRecovery | None = None) -> None:
    """`rented_for`: the recovering run the watchdog re-rented `pod` for (an attempt after the first)."""
    if pod.status != "running":
        if force:
            ctx.echo(f"{pod.id} is {pod.status}: its disk is out of reach; destroying anyway (--force)")
            return
        raise SafetyRefusal(f"{pod.id} is {pod.status}: its results cannot be synced", hint=_unsynced_hint(pod))
    code, out = ctx.pod_access(provider, pod).run(["python", "-m", "gpuc.instance_side", "sync"])
    if code == 0:
        ctx.echo(f"  results synced and verified ({out.strip().splitlines()[-1] if out.strip() else 'ok'})")
        return
    if rented_for is not None and code == NOT_INSTALLED:
        _still_booting(pod, rented_for, ctx)
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


def _still_booting(pod: Pod, recovering: RunRecovery, ctx: Ctx) -> None:
    """A re-rented attempt whose boot has not yet installed gpuc (the shell found no gpuc python): its job is
    started by gpuc's agent, after the install and the restore of the run's last push, so nothing ran there and
    its disk holds nothing the push lacks. Keeping it "for its results" would bill a pod that holds none."""
    kept = f" at {recovering.results_at}" if recovering.results_at else ""
    ctx.echo(
        f"  {pod.id} is still booting (gpuc is not installed on it yet): no job ran there; the run's results are "
        f"its last push{kept}: destroying it"
    )


def _unsynced_hint(pod: Pod) -> str:
    if pod.status == "paused":
        # Outbid (or frozen): its disk is read again only if its bid wins, which the user cannot make happen, and
        # `gpuc results` refuses a paused pod too; pointing there left an outbid pod's disk billing.
        return (
            f"what its job wrote after its last push is only on its disk, out of reach until its bid wins again and "
            f"billing while paused: `gpuc down {pod.id} --force` destroys it (what was pushed stays where it went)"
        )
    return (
        f"what was not pushed during the run is only on the pod: `gpuc results {pod.id}` copies results/ here and "
        f"ends it; `gpuc down {pod.id} --force` destroys them"
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


def _finish_down(run: RunRecord, ctx: Ctx, note: str | None, recovering: RunRecovery | None = None) -> None:
    ctx.runs.set_phase(run.run_id, "ended", now=ctx.clock.now(), note=note)
    if not run.pod_id:
        return
    if recovering is None:
        close_ledger(ctx, run.pod_id, note)
        return
    # A recovering run's one row holds every attempt's cost: closed with the watchdog's figures, never at the
    # first pod's price x the time since it started.
    try:
        ended = ctx.watchdog.run(run.run_id)
        closed = ctx.ledger().close_run(run.pod_id, ended, note) if ended is not None else None
    except GpucError as exc:
        ctx.echo(f"ledger: {exc}")
        return
    if closed is None:
        ctx.echo("ledger: the run's row closes with its cost across attempts once the watchdog records its end")
        return
    from gpuc.client.pods.recovery.runs import tidy_kits

    for line in tidy_kits(ctx, {run.run_id: ended}):
        ctx.echo(line)


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
