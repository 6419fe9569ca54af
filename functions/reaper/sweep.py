"""The sweep: one reaper pass, and the loop that runs one every period.

A pass looks first (every provider read, sight.py), then decides whether it may destroy at all
(trust.py), then judges each pod (rules.py) and acts on the ruling (steps.py), then says what the whole
pass found (alerts.py), and records itself (record.py). One odd pod never stops the pass for the
others; a pass that fails records its error, not a run.
"""

from __future__ import annotations

import logging
import threading

from gpuc.core.api import ReapReport
from gpuc.functions.app import Deps, describe
from gpuc.functions.eventlimit import release_held
from gpuc.functions.reaper.alerts import alert_balances, alert_blind, alert_cap, alert_held
from gpuc.functions.reaper.budget import watch_budget
from gpuc.functions.reaper.owners import leave_others_alone
from gpuc.functions.reaper.record import ReaperMeta, read_meta, record_failed_run, record_run
from gpuc.functions.reaper.rules import fine_only_by_restart, judge, kept_gate, veto
from gpuc.functions.reaper.sight import Sight, adopt_strays, look, track_status
from gpuc.functions.reaper.state import Pass
from gpuc.functions.reaper.steps import (
    alert_only,
    all_clear,
    destroy,
    gone_twice,
    mark,
    reap_deadline,
    retry_destroy,
    settle_gone,
    stop_kept,
)
from gpuc.functions.reaper.trust import check_clock, check_store_age, fleet_silent, ingest_trouble
from gpuc.functions.recovery.runs import live_run_ids
from gpuc.functions.recovery.watch import recover_runs
from gpuc.functions.store import LIVE_STATES, StoredPod

log = logging.getLogger("gpuc.reaper")


def reap_once(deps: Deps, now: float, dry_run: bool = False) -> ReapReport:
    """One pass. Dry run: providers are read, nothing is written, notified or destroyed."""
    run = Pass(deps, now, dry_run, ReapReport(ran_at=now, dry_run=dry_run))
    sight = Sight()
    blind_since: dict[str, float] = {}
    try:
        prev = read_meta(deps.store)
        records = deps.store.list_pods(LIVE_STATES)
        if check_clock(run, prev, records):
            records = deps.store.list_pods(LIVE_STATES)  # as restart_deadlines left them
        check_store_age(run)
        run.recovering = live_run_ids(deps.store)
        sight = look(deps, records)
        for name, why in sight.blind.items():
            run.go_blind(name, why)
        blind_since = alert_blind(run, sight, prev)
        leave_others_alone(run, sight)  # before any stray is adopted: another watchdog's pods are not ours
        records = [track_status(run, r, sight) for r in records] + adopt_strays(run, sight)
        run.fleet_suspect = fleet_silent(run, records, sight)
        run.ingest = ingest_trouble(run)
        for rec in records:
            reap_guarded(run, rec, sight)
        release_held_events(run, records)
        recover_runs(run)  # after the pods: a paused pod of a live run was left to it above
        tidy_store(run)
        alert_cap(run)
        alert_held(run)
        alert_balances(run, sight)
        watch_budget(run, sight.pods)
    except Exception as exc:
        if not dry_run:
            record_failed_run(deps, now, exc)
        raise
    finally:
        flush(deps)
    if not dry_run:
        record_run(
            deps,
            ReaperMeta(
                last_run=now,
                blind=tuple(sorted(sight.blind)),
                blind_since=blind_since,
                blind_why=dict(sight.blind),
                epoch=run.epoch,
                actions=len(run.report.actions),
            ),
        )
    return run.report


def tidy_store(run: Pass) -> None:
    """What the store keeps for a window only (a webhook delivery's id) goes once the window is over."""
    if run.dry_run:
        return
    try:
        run.deps.store.sweep(run.now)
    except Exception as exc:  # the next pass sweeps again
        log.error("reaper: store sweep: %s", describe(exc, run.deps))


def flush(deps: Deps) -> None:
    try:
        deps.notifier.flush()
    except Exception as exc:  # F13: the phone being down is never the reaper's problem
        log.error("notifier flush failed: %s", type(exc).__name__)


def release_held_events(run: Pass, records: list[StoredPod]) -> None:
    """A pod's events over its hourly push limit are told as one notification once the hour is over."""
    if run.dry_run:
        return
    for rec in records:
        try:
            release_held(run.deps, rec, run.now)
        except Exception as exc:  # the next pass tells it
            log.error("reaper: held events of %s: %s", rec.pod_id, describe(exc, run.deps))


def reap_guarded(run: Pass, rec: StoredPod, sight: Sight) -> None:
    try:
        reap_pod(run, rec, sight)
    except Exception as exc:  # one odd pod must not stop the pass for the others
        log.error("reaper: pod %s: %s", rec.pod_id, describe(exc, run.deps))
        run.act_on(rec, "skip", f"error while checking it ({type(exc).__name__}); the next pass tries again")


def reap_pod(run: Pass, rec: StoredPod, sight: Sight) -> None:
    if rec.pod_id in sight.gone:
        if gone_twice(run, rec):
            settle_gone(run, rec)
        return
    pod = sight.pods.get(rec.pod_id)
    if pod is None:  # its provider could not be read
        if rec.state == "down" and rec.destroy_at is not None and run.now >= rec.destroy_at:
            run.act_on(rec, "skip", "due for destroy, but the reaper is blind: deferred")
        return
    if not pod.managed:
        alert_only(run, rec, "foreign", "the provider does not mark it as gpuc's: never touched")
        return
    if rec.state == "destroying":
        retry_destroy(run, rec)
        return
    rules = run.rules
    ruling = judge(rules, rec, pod)
    if ruling.kind == "wait":
        return
    if ruling.kind == "fine":
        if not fine_only_by_restart(rules, rec, pod):
            all_clear(run, rec)
        return
    ruling = kept_gate(rec, pod, ruling)
    if ruling.kind == "alert":
        every = run.deps.settings.kept_nag_interval_s if ruling.rule.startswith("kept") else None
        alert_only(run, rec, ruling.rule, ruling.reason, every=every)
        return
    why_not = veto(rules, rec, pod, ruling)
    if why_not is not None:
        alert_only(run, rec, f"{ruling.rule}:{why_not[0]}", f"{ruling.reason}; not destroying: {why_not[1]}")
        return
    if ruling.rule == "deadline" and not ruling.stop:  # a kept pod's deadline is a stop: mark() and below
        reap_deadline(run, rec, ruling)
        return
    if rec.state in ("ok", "late"):
        marked = mark(run, rec, ruling)
        if marked is None:
            return
        rec = marked
    if rec.destroy_at is not None and run.now >= rec.destroy_at:
        if ruling.stop:
            stop_kept(run, rec, ruling.reason)
        else:
            destroy(run, rec, ruling.reason)


def reap_safely(deps: Deps, dry_run: bool = False) -> ReapReport | None:
    """One pass that never raises: the loop must survive anything one pass does."""
    try:
        return reap_once(deps, deps.clock.now(), dry_run=dry_run)
    except Exception as exc:
        log.error("reaper pass failed: %s", describe(exc, deps))
        return None


def run_loop(deps: Deps, interval_s: float, stop: threading.Event, wake: threading.Event | None = None) -> None:
    """A pass every `interval_s`, and one as soon as `wake` is set (Deps.wake: Vast's outbid hint, a stop)."""
    wait = wake if wake is not None else stop
    while not stop.is_set():
        report = reap_safely(deps)
        if report is not None:
            log.info("%s", pass_line(report))
        wait.wait(interval_s)
        if wake is not None:
            wake.clear()


def pass_line(report: ReapReport) -> str:
    """One log line per pass (`gpuc watchdog serve` shows it): what it did, by pod id; no reasons (they
    are in the notifications), so nothing a provider echoed can reach the log."""
    done = [a for a in report.actions if a.action != "skip"]
    blind = f"; could not read {', '.join(report.blind_providers)} (no destroys there)" if report.blind else ""
    if not done:
        return f"reaper pass: nothing to do{blind}"
    return "reaper pass: " + ", ".join(f"{a.action} {a.provider}/{a.pod_id}" for a in done) + blind
