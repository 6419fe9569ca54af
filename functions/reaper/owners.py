"""Pods marked for another watchdog. Every pod `up` starts carries its watchdog's id where the
provider shows it (core.pod.WATCHDOG_ENV). A second watchdog on the same account (a migration, a second
laptop, a `serve` beside a deployment) would otherwise see every pod of the first as a stray and destroy
it: a pod marked for another watchdog is never this one's stray. It is left alone, and the user is told
once a day, with that watchdog's name. Pods carried in from another watchdog (`watchdog deploy --carry`:
no provider re-marks a running pod's env) are this watchdog's by its own config (Settings.watchdog_carried).
"""

from __future__ import annotations

from gpuc.core.pod import Pod
from gpuc.functions.app import announce
from gpuc.functions.reaper.sight import Sight
from gpuc.functions.reaper.state import Pass

ALERT_EVERY_S = 24 * 3600.0
KIND = "other_watchdog"


def leave_others_alone(run: Pass, sight: Sight) -> None:
    """Drop from this pass's strays every pod marked for another watchdog; alert once a day per watchdog."""
    own, carried = run.deps.watchdog_id, run.deps.carried_ids
    mine: list[tuple[str, Pod]] = []
    theirs: dict[str, list[str]] = {}
    for provider, pod in sight.strays:
        if pod.watchdog and pod.watchdog != own and pod.id not in carried:
            theirs.setdefault(pod.watchdog, []).append(f"{provider}/{pod.id}")
        else:
            mine.append((provider, pod))
    sight.strays = mine
    for other, pods in sorted(theirs.items()):
        alert_other(run, other, pods)


def alert_other(run: Pass, other: str, pods: list[str]) -> None:
    """Once a day per other watchdog (a compare-and-set on the store: two passes say it once)."""
    if run.dry_run:
        return
    store, key = run.deps.store, f"{KIND}:{other}"
    meta = store.get_meta(key)
    if meta is not None and run.now - float(meta.value.get("alerted_at", 0.0)) < ALERT_EVERY_S:
        return
    if not store.put_meta(key, {"alerted_at": run.now}, meta.version if meta else None):
        return
    run.act("*", other, "alert", f"{len(pods)} pods marked for another watchdog ({other}): left alone")
    me = run.deps.watchdog_id or "this watchdog"
    shown = ", ".join(pods[:10]) + (f" and {len(pods) - 10} more" if len(pods) > 10 else "")
    announce(
        run.deps,
        run.now,
        f"gpuc: {len(pods)} pods belong to another watchdog ({other})",
        f"{shown} are marked for watchdog {other}, not this one ({me}): left alone, neither watched nor "
        "destroyed here. If that watchdog still runs, nothing to do. If it is gone, run `gpuc watchdog deploy "
        "--carry` from its GPUC_HOME, or end them with `gpuc down POD`. Said once a day.",
        kind=KIND,
        level="warning",
    )
