"""What the reaper tells the phone: one pod's problem (nagged while it lasts), a problem of the whole pass
(blind, fleet, the destroy cap, a young store, balances), each said once when it starts, nagged, and
cleared once. Every alert is a compare-and-set on the store, so two passes at once say it once."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gpuc.core.clock import iso
from gpuc.core.notify.message import Level, counted, defang
from gpuc.core.titles import cost_so_far, title
from gpuc.functions.app import announce, describe
from gpuc.functions.reaper.record import ReaperMeta
from gpuc.functions.reaper.rules import minutes
from gpuc.functions.reaper.sight import Sight
from gpuc.functions.reaper.state import Pass
from gpuc.functions.store import StoredPod

log = logging.getLogger("gpuc.reaper")

BLIND_ESCALATE_S = 3600.0  # blind longer than this: error level, once an hour while it lasts
# A balance above the cap costs nothing now: once a day, low priority (it was hourly at high priority,
# 24 pushes a day for a user who tops up $25 a month, who then mutes the topic and misses a kept pod).
CAP_NAG_S = 24 * 3600.0


def pod_problem(run: Pass, rec: StoredPod, key: str, title: str, message: str, *, every: float | None = None) -> None:
    """Notify on a new problem, then nag every `every` (nag_interval_s) while it lasts (CAS: once per pass)."""
    nagging = rec.alerted == key
    interval = run.deps.settings.nag_interval_s if every is None else every
    if nagging and rec.alerted_at is not None and run.now - rec.alerted_at < interval:
        return
    expect = {"alerted": rec.alerted, "alerted_at": rec.alerted_at}
    if not run.deps.store.update_if(rec.pod_id, expect, {"alerted": key, "alerted_at": run.now}):
        return
    if nagging:
        run.act_on(rec, "warn", f"still: {message}")
        title = f"{title} (still)"
    announce(run.deps, run.now, title, message, pod_id=rec.pod_id, kind="alert", level="warning")


def run_problem(
    run: Pass,
    key: str,
    active: bool,
    *,
    title: str,
    message: str,
    clear_title: str,
    detail: str = "",
    level: Level = "warning",
    every: float | None = None,
) -> None:
    """A problem of the whole pass (blind, fleet, cap): one alert, nagged every `every` (nag_interval_s),
    and one all-clear."""
    if run.dry_run:
        if active:
            run.act("*", detail or "*", "alert", title)
        return
    store = run.deps.store
    meta = store.get_meta(key)
    value: Mapping[str, Any] = meta.value if meta else {}
    was = bool(value.get("active"))
    if active:
        due = not was or value.get("detail") != detail
        interval = run.deps.settings.nag_interval_s if every is None else every
        due = due or run.now - float(value.get("alerted_at", 0.0)) >= interval
        if not due:
            return
        new: dict[str, Any] = {"active": True, "alerted_at": run.now, "detail": detail}
    elif was:
        new = {"active": False}
    else:
        return
    if not store.put_meta(key, new, meta.version if meta else None):
        return  # another pass said it
    run.act("*", detail or "*", "alert", title if active else clear_title)
    text = message if active else "Back to normal."
    after: Level = "low" if level == "low" else "info"
    announce(run.deps, run.now, title if active else clear_title, text, kind=key, level=level if active else after)


def alert_blind(run: Pass, sight: Sight, prev: ReaperMeta) -> dict[str, float]:
    """Per provider: one alert when it goes blind, error level once an hour after the first hour (a
    frozen pod there bills unchecked all that time), one all-clear. Returns provider -> blind since."""
    known = prev.blind_since
    since = {name: known.get(name, run.now) for name in sight.blind}
    for name in sorted(set(sight.blind) | (set(known) & set(sight.read))):
        blind_problem(run, name, sight.blind.get(name), since.get(name, run.now))
    return since


def blind_problem(run: Pass, name: str, why: str | None, since: float) -> None:
    if run.dry_run:
        if why is not None:
            run.act("*", name, "alert", f"gpuc: reaper blind on {name}")
        return
    store, key = run.deps.store, f"blind:{name}"
    meta = store.get_meta(key)
    value: Mapping[str, Any] = meta.value if meta else {}
    was = bool(value.get("active"))
    lasted = run.now - since
    level: Level = "error" if lasted >= BLIND_ESCALATE_S else "warning"
    if why is not None:
        due = not was or value.get("level") != level
        due = due or (level == "error" and run.now - float(value.get("alerted_at", 0.0)) >= BLIND_ESCALATE_S)
        if not due:
            return
        new: dict[str, Any] = {"active": True, "alerted_at": run.now, "level": level}
        title = f"gpuc: reaper blind on {name}" + (f" for {minutes(lasted)}" if level == "error" else "")
        text = (
            f"Cannot read {name}: {why}. Nothing is marked or destroyed on {name} pods until it can see again "
            f"(blind since {iso(since)}); pods at other providers are watched as usual."
        )
    elif was:
        new, level = {"active": False}, "info"
        title, text = f"gpuc: the reaper can read {name} again", "Back to normal."
    else:
        return
    if not store.put_meta(key, new, meta.version if meta else None):
        return  # another pass said it
    run.act("*", name, "alert", title)
    announce(run.deps, run.now, title, text, kind="blind", level=level)


def alert_cap(run: Pass) -> None:
    cap = run.deps.settings.max_destroys_per_run
    run_problem(
        run,
        "cap",
        run.capped > 0,
        title=f"gpuc: destroy cap reached ({cap} per pass)",
        message=f"{run.capped} more destroys were deferred to the next pass. Many pods due at once is "
        "unusual: check `gpuc ls`.",
        clear_title="gpuc: destroys are under the cap again",
    )


def alert_held(run: Pass) -> None:
    """A young store's hold is a state that lasts: one alert when it first defers a destroy, one when it
    ends (a clock jump says so itself)."""
    run_problem(
        run,
        "young",
        run.young and run.held > 0,
        title="gpuc: watchdog store is new: destroys held",
        message=f"{run.held} destroys deferred: {run.hold}. A new or lost store (deleted watchdog.db, a new "
        "GPUC_HOME, a fresh deployment, a second watchdog on this account) cannot tell a healthy pod from a "
        "stray; pods registered with another watchdog: `gpuc watchdog deploy --carry` carries them over.",
        clear_title="gpuc: watchdog store old enough: destroys resume",
    )


def alert_balances(run: Pass, sight: Sight) -> None:
    """Per provider account, alert only: too low (pods stop when it hits zero, mid-run, data unsynced)
    or above the user's cap (what a leaked key or a runaway loop could spend). Transitions + nag, as
    run_problem does. Read after every destroy of the pass: a balance read can never delay a kill."""
    settings = run.deps.settings
    for name in sight.read:
        try:
            usd = run.deps.providers.get(name).balance().balance_usd
        except Exception as exc:  # a missing balance is not a problem of the fleet: log, no alert
            log.warning("reaper: balance of %s unreadable: %s", name, describe(exc, run.deps))
            continue
        run_problem(
            run,
            f"balance_low:{name}",
            usd < settings.balance_low_usd,
            title=f"gpuc: {name} balance low (${usd:.2f})",
            message=f"The {name} balance is ${usd:.2f}, below ${settings.balance_low_usd:.2f}: pods stop "
            "when it reaches zero. Top up, or sync and end your runs.",
            clear_title=f"gpuc: {name} balance is above ${settings.balance_low_usd:.2f} again",
            detail=name,
        )
        run_problem(
            run,
            f"balance_cap:{name}",
            usd > settings.balance_cap_usd,
            title=f"gpuc: {name} balance above your cap (${usd:.2f})",
            message=f"Keep less on {name}: ${usd:.2f} is above your cap of ${settings.balance_cap_usd:.2f}, "
            "and is what a leaked key could spend. Nothing is billing because of it.",
            clear_title=f"gpuc: {name} balance is under your cap again",
            detail=name,
            level="low",
            every=CAP_NAG_S,
        )


def tell(
    run: Pass, rec: StoredPod, outcome: str, message: str, kind: str, level: Level = "info", cost: float | None = None
) -> None:
    """A notification about one pod, sent at this pass's time: titled by its experiment and `outcome`; the
    message first (what happened, what to do), then which pod it is."""
    text = f"{message.rstrip('.')}. Pod {who(rec)}."
    announce(run.deps, run.now, pod_title(rec, outcome, cost), text, pod_id=rec.pod_id, kind=kind, level=level)


def pod_title(rec: StoredPod, outcome: str, cost: float | None = None) -> str:
    return title(outcome, experiment=rec.experiment, cost_usd=cost)


def tell_destroyed(run: Pass, rec: StoredPod, reason: str) -> None:
    message = f"{reason}. Confirmed gone at the provider.{cost_text(rec)}{last_push_note(rec, run.now)}"
    cost = cost_so_far(rec.price_per_hour, rec.started_at, rec.end_at)
    tell(run, rec, "destroyed by the watchdog", message, "destroyed", cost=cost)


def last_push_note(rec: StoredPod, now: float) -> str:
    """What a destroy from outside costs, from the pod's last heartbeat: whether its job was still
    running, and when results were last pushed, how many, where ("results pushed 6 min ago to s3[:]//...: 41
    files"). The destination is the pod's word: defanged like all pod text. "" for a pod that never pinged."""
    hb = rec.last_heartbeat
    if hb is None:
        return ""
    said = " Its last heartbeat said the job was still running." if hb.job_running else ""
    if hb.pushed_ago_s is None or rec.last_seen is None:
        return f"{said} No results push was reported: what its results/ held goes with it."
    ago = max(0.0, now - (rec.last_seen - hb.pushed_ago_s))  # on the watchdog's clock, never the pod's
    where = defang(hb.pushed_to or "its results destination", 200)
    files = counted(hb.pushed_files or 0, "file")
    after = "what the job wrote after that goes with the pod."
    return f"{said} Results pushed {minutes(ago)} ago to {where}: {files}; {after}"


def who(rec: StoredPod) -> str:
    return f"{rec.pod_id} ({rec.provider}, {rec.experiment})"


def cost_text(rec: StoredPod) -> str:
    if rec.price_per_hour is None or rec.started_at is None or rec.end_at is None:
        return ""
    hours = max(0.0, rec.end_at - rec.started_at) / 3600
    return f" Ran {hours:.2f} h, about ${hours * rec.price_per_hour:.2f}."
