"""`up` stopped early (Ctrl-C, a closed terminal, a failure) with a pod created, or maybe created: what `up`
created, it destroys FIRST, then says so, bounded in time; what it could not destroy is named with how to
find it, and the watchdog and the ledger are told how it ended (client/pods/interrupts.py defers a second
stop signal meanwhile)."""

from __future__ import annotations

import contextlib
import errno

from gpuc.client.context import Ctx
from gpuc.client.pods.interrupts import (
    CleanupTimeout,
    Interrupted,
    say,
    silence_broken_output,
    stop_signals_deferred,
    time_limit,
)
from gpuc.client.pods.spent import spent_words
from gpuc.client.text import short_span
from gpuc.core.errors import GpucError, WatchdogError
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.common import look_up
from gpuc.core.redact import redact
from gpuc.core.termsafe import clean_line

UP_STOPPED = "up stopped early: "  # the watchdog's note of the end (the status page shows why)
WATCHDOG_END_LIMIT_S = 15.0  # after the destroy: only a false warning later is at stake, not money
CLEANUP_LIMIT_S = 60.0  # the destroy's own retries fit; a provider that never answers does not hold the terminal
FIND_TRIES = 3  # a pod whose create was cut off may take a moment to be listed (create_once looks as often)
FIND_DELAY_S = 2.0


def _why(exc: BaseException) -> str:
    if isinstance(exc, Interrupted):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "Ctrl-C"
    if isinstance(exc, OSError) and exc.errno in (errno.EPIPE, errno.EIO):
        return "output closed (broken pipe or closed terminal)"
    text = exc.message if isinstance(exc, GpucError) else str(exc) or type(exc).__name__
    return text.splitlines()[0][:200] if text else type(exc).__name__


def abort(pod: Pod | None, spec: PodSpec, ctx: Ctx, exc: BaseException, begun: list[bool]) -> None:
    """`up` ends early with a pod created, or maybe created (the create was cut off before its answer):
    destroy it FIRST, then say so. Printing first is what left pods billing: after Ctrl-C on `up | tee`
    the first print fails on the broken pipe. During the destroy a second Ctrl-C is deferred, and the
    whole is bounded by CLEANUP_LIMIT_S; what could not be destroyed is named, with how to find it."""
    why = _why(exc)
    still = f"gpuc: still destroying what up created ({why}); Ctrl-C again does not stop it"
    with stop_signals_deferred(still):
        begun.append(True)
        destroyed: list[str] = []
        try:
            with time_limit(CLEANUP_LIMIT_S):
                lines = _destroy_made(pod, spec, ctx, why, destroyed)
        except CleanupTimeout:
            what = pod.id if pod is not None else f"a pod named {spec.name}"
            lines = [
                f"gpuc: up ended early: {why}; could not destroy {what} within {CLEANUP_LIMIT_S:.0f}s. "
                f"Find it with `gpuc ls` (named {spec.name}) and end it with `gpuc down`; if nobody does, "
                f"the watchdog destroys it ({short_span(ctx.settings.unregistered_grace_s)} after its start "
                "if it was never registered)"
            ]
        secrets = ctx.settings.secret_values()
        for line in lines:  # a reason may quote a provider or a pod: scrubbed as the CLI's own errors are
            if not say(clean_line(redact(line, secrets))):
                break
        for pod_id in destroyed:  # after the words: they say what happened, this only tidies the watchdog
            # onstart is set for a run with --recover only: its recovery is stopped too, so no attempt follows.
            _end_at_watchdog(pod_id, ctx, f"{UP_STOPPED}{why}", spec.run_id if spec.onstart else None)
        silence_broken_output()


def _destroy_made(pod: Pod | None, spec: PodSpec, ctx: Ctx, why: str, destroyed: list[str]) -> list[str]:
    """Destroy what `up` created (found by the run's name when the create had no answer yet), then the
    bookkeeping; the lines to say after. Prints nothing itself: stdout may be the broken pipe."""
    provider = ctx.provider(spec.provider)
    grace = short_span(ctx.settings.unregistered_grace_s)
    found_by_name = pod is None
    try:
        if pod is None:
            pod = look_up(spec.name, provider.find_by_name, ctx.clock, FIND_TRIES, FIND_DELAY_S)
            if pod is None:
                _close_books(None, spec, ctx, f"create cut off: {why}")
                return [
                    f"gpuc: up ended early: {why}, during the create; no pod named {spec.name} is listed at "
                    f"{spec.provider}. If the create went through after all, `gpuc ls` shows it and the "
                    f"watchdog destroys it {grace} after its start (it was never registered)"
                ]
        provider.destroy(pod.id)
        gone = provider.confirm_gone(pod.id, ctx.clock)
    except GpucError as exc:
        what = pod.id if pod is not None else f"the pod named {spec.name}"
        return [
            f"gpuc: up ended early: {why}; could not destroy {what}: {exc.message}. Check `gpuc ls` and end "
            f"it with `gpuc down`; the watchdog retries ({grace} after its start if it was never registered)"
        ]
    lines = [f"gpuc: up ended early: {why}; destroyed {pod.id} ({spec.name})"]
    if not gone:
        lines = [f"gpuc: up ended early: {why}; destroy of {pod.id} asked, but it is still listed (`gpuc ls`)"]
    if found_by_name:
        lines[0] += " (the create's answer never came: found by its name)"
    if gone and _was_registered(spec, ctx):
        destroyed.append(pod.id)  # ended at the watchdog after this, outside the destroy's time limit
    books = _close_books(pod.id, spec, ctx, f"up failed; destroyed ({why})")
    lines[0] += spent_words(ctx, pod.id)  # the ledger's row, closed just now: what the attempt cost
    return lines + books


def _was_registered(spec: PodSpec, ctx: Ctx) -> bool:
    """The watchdog took the pod (the run's phase says so, before the books mark it failed)."""
    try:
        return ctx.runs.find(spec.run_id).phase in ("registered", "running")
    except (GpucError, OSError):
        return True  # an end the watchdog does not know is refused, harmlessly


def _end_at_watchdog(pod_id: str, ctx: Ctx, note: str, recovering_run: str | None = None) -> None:
    """A registered pod `up` destroyed itself is ended at the watchdog too: else its next passes find it gone
    at the provider and warn the phone of a surprise ("its ledger row stays open"). Best effort, bounded:
    a pod never registered, or a watchdog away or slow, leaves that to the reaper as before. A run that was
    to recover (`--recover`) has its recovery stopped first: `up` failed, nothing is to be resumed."""
    from gpuc.core.api import EndRequest

    with contextlib.suppress(GpucError, OSError, CleanupTimeout), time_limit(WATCHDOG_END_LIMIT_S):
        if recovering_run is not None:
            ctx.watchdog.stop_run(recovering_run)
        end = EndRequest(end_at=ctx.clock.now(), by="up", note=note[:500])
        try:
            ctx.watchdog.end(pod_id, end)
        except WatchdogError as exc:
            if exc.status != 400:
                raise
            # A watchdog older than "up" as an ender refuses the word: the end itself is what matters.
            ctx.watchdog.end(pod_id, end.model_copy(update={"by": "down"}))


def _close_books(pod_id: str | None, spec: PodSpec, ctx: Ctx, note: str) -> list[str]:
    """The run's record and the ledger row's end, after the destroy: a book that cannot be written costs
    a line, never the destroy."""
    try:
        if pod_id is not None:
            ctx.runs.set_pod_id(spec.run_id, pod_id)
        ctx.runs.set_phase(spec.run_id, "failed", now=ctx.clock.now(), note=note[:200])
        if pod_id is not None:
            ctx.ledger().end(pod_id, end_ts=ctx.clock.now(), note=note[:120])
    except Exception as exc:  # the pod is destroyed already: nothing here may hide that
        reason = exc.message if isinstance(exc, GpucError) else str(exc) or type(exc).__name__
        return [f"  books: {reason[:200]} (`gpuc ls` and `gpuc ledger` add what is missing from the watchdog's)"]
    return []
