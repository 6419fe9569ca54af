"""May this pass destroy at all, and on what evidence. A pass far from the last one (sleep, a clock step)
cannot trust any deadline; a store younger than the unregistered grace cannot tell a stray from a pod
registered elsewhere; many pods silent at once, or an ingest that refused heartbeats, make silence no
evidence. Each is found once per pass, before any pod is judged, and said to the user."""

from __future__ import annotations

from typing import Any

from gpuc.core.clock import iso
from gpuc.functions.app import announce, describe
from gpuc.functions.reaper.alerts import run_problem
from gpuc.functions.reaper.record import ReaperMeta
from gpuc.functions.reaper.rules import fleet_silence, fleet_suspect, minutes
from gpuc.functions.reaper.sight import Sight
from gpuc.functions.reaper.state import Pass
from gpuc.functions.store import StoredPod, store_born

JUMP_PERIODS = 3  # a pass more than this many periods (+ JUMP_SLACK_S) after the last one: a clock jump
JUMP_SLACK_S = 60.0  # also how far back the clock may seem to go (two passes racing) before it counts


def check_clock(run: Pass, prev: ReaperMeta, records: list[StoredPod]) -> bool:
    """A pass far too long after the last one (the laptop slept, the clock stepped forward) or before
    it (the clock went back) cannot trust any deadline: silence measured across a sleep is the
    watchdog's own absence, not the pods'. Nothing is destroyed in this pass, and every deadline
    starts again from it. True when the records were rewritten."""
    run.epoch = prev.epoch
    if prev.last_run is None:
        return False
    gap = run.now - prev.last_run
    period = run.deps.settings.reaper_period_s
    if -JUMP_SLACK_S <= gap <= JUMP_PERIODS * period + JUMP_SLACK_S:
        return False
    what = f"{minutes(gap)} after the last one" if gap > 0 else f"{minutes(-gap)} BEFORE the last one"
    run.hold = f"this pass came {what} (sleep or a clock step): every deadline restarts now"
    run.epoch = run.now
    if run.dry_run:
        return False
    for rec in records:
        restart_deadlines(run, rec)
    announce(
        run.deps,
        run.now,
        "gpuc: the reaper's clock jumped",
        f"This reaper pass came {what} (the machine slept, or its clock was stepped). Nothing is "
        "destroyed in this pass; silence, stopped/paused and marked-for-destroy deadlines start again "
        "now, so a pod that was fine is not taken for dead.",
        kind="clock",
        level="warning",
    )
    return True


def restart_deadlines(run: Pass, rec: StoredPod) -> None:
    """Times from before a backwards step lie in the future: bring them to now, so "afresh from this
    pass" holds for them too. A mark gets a whole new warning window."""
    now, grace = run.now, run.deps.settings.destroy_grace_s
    changes: dict[str, Any] = {
        name: now
        for name in ("last_seen", "provider_status_since", "registered_at", "gone_seen_at")
        if (value := getattr(rec, name)) is not None and value > now
    }
    late_end = rec.state == "ended" and rec.destroy_at is not None and rec.destroy_at > now + grace
    if rec.state == "down" or late_end:
        changes["destroy_at"] = now + grace
    if changes:
        run.deps.store.update_if(rec.pod_id, {"state": rec.state, "last_seq": rec.last_seq}, changes)


def check_store_age(run: Pass) -> None:
    """A store younger than the unregistered grace is itself suspect (deleted or corrupt watchdog.db,
    a new GPUC_HOME, a fresh deployment, a second watchdog on the account): every pod it never heard
    of looks like a stray. It warns, but destroys nothing until it is old enough."""
    settings = run.deps.settings
    born = store_born(run.deps.store, run.now, write=not run.dry_run)
    age = run.now - born
    run.young = age < settings.unregistered_grace_s and run.hold is None  # a clock jump says so itself
    if run.young:
        run.hold = (
            f"this watchdog's store is {minutes(max(age, 0.0))} old, younger than the unregistered grace "
            f"({minutes(settings.unregistered_grace_s)}): no destroy before "
            f"{iso(born + settings.unregistered_grace_s)}"
        )


def fleet_silent(run: Pass, records: list[StoredPod], sight: Sight) -> bool:
    """Many pods silent at once points at the watchdog or its network, not at the pods."""
    silent, watched = fleet_silence(run.rules, records, sight.pods)
    suspect = fleet_suspect(run.deps.settings, silent, watched)
    run_problem(
        run,
        "fleet",
        suspect,
        title=f"gpuc: {silent} of {watched} pods silent at once",
        message="Suspecting the watchdog or its network, not the pods: alerting only, destroying nothing "
        "for silence until they ping again.",
        clear_title="gpuc: the fleet is pinging again",
    )
    return suspect


def ingest_trouble(run: Pass) -> str | None:
    """Was the ingest throttled or failing while a pod could have been taken for silent (F18)? A flood
    that fills it makes real heartbeats fail: silence kills are held, like blindness, while it lasts and
    for one silence window after. A health that cannot be read counts as trouble: holding costs a delay,
    with the user told; a wrong "healthy" could cost a false kill of every pod at once. Deadlines and the
    other rules still apply, so the hold never makes the money unbounded."""
    health = run.deps.ingest_health
    if health is None:
        return None
    settings = run.deps.settings
    since = run.now - settings.silence_limit_s - settings.reaper_period_s
    try:
        trouble = health.trouble(since, run.now)
    except Exception as exc:
        trouble = f"could not be checked ({describe(exc, run.deps)})"
    run_problem(
        run,
        "ingest",
        trouble is not None,
        title="gpuc: the watchdog's ingest is refusing heartbeats",
        message=f"The ingest {trouble} in the last {minutes(run.now - since)}: a pod's heartbeats may not have "
        "reached the watchdog, so silence is no evidence. No pod is destroyed for silence until it is healthy "
        "again (ended, stopped, unregistered pods and deadlines are handled as usual). A flood against the "
        "public URL ends when the flood does; `gpuc ls` shows the pods.",
        clear_title="gpuc: the watchdog's ingest is healthy again",
    )
    return trouble
