"""The drill's rows where the pod goes silent and the watchdog must act: the agent killed (F5), the
notifier down (F13), the reaper stopped (F14), the pod's clock ahead (F5c), the watchdog asleep (F5r), a
transient not-found (F5g)."""

from __future__ import annotations

from gpuc.testkit.drill_stage import (
    MIN,
    RowResult,
    Stage,
    job_end_row,
    no_gpu_reading,
    pod_row,
    state_of,
    survivors_killed,
)


def f5_agent_killed(stage: Stage) -> RowResult:
    return _silence_row(stage, "F5", "agent killed (OOM) / container frozen")


def f13_notifier_down(stage: Stage) -> RowResult:
    row = _silence_row(stage, "F13", "notification endpoint down (reaper's destroy)")
    if stage.provider.alive("f13-pod"):
        row.problems.append("the destroy did not happen")
    return row


def _silence_row(stage: Stage, row: str, failure: str) -> RowResult:
    pod_id = f"{row.lower()}-pod"
    # past one periodic results push (sync_interval_s): what a kill can cost is after it
    pod = stage.launch_busy(pod_id, 35 * MIN)
    died_at = stage.now
    pod.alive_agent = False  # killed: no more ticks, no more heartbeats
    pod.idle()  # the provider sees the GPU go quiet
    stage.run_until_gone(pod_id)
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, died_at)
    text = f"silence + period + grace{stage.bound_note(died_at)}"
    return pod_row(
        stage, pod, row, failure, "reaper (heartbeat silence)", stage.billed_min(pod_id, died_at), bound, text
    )


def f14_reaper_stopped(stage: Stage) -> RowResult:
    from gpuc.client.pods.survey import reaper_warnings

    stage.launch("f14-pod").busy()
    stage.run(32 * MIN)
    stage.reaper_stopped_at = stage.now
    missed_at = stage.next_reap  # the first pass that does not happen
    seen_at: float | None = None
    unreadable_s = 0.0  # the status could not be read (its store down, with faults on): `gpuc ls` said so instead
    stage.run(missed_at - stage.now)
    while stage.now < missed_at + 4 * stage.period:
        st = stage.status()
        if st is None:
            unreadable_s += 1.0
        elif reaper_warnings(st.reaper_last_run, st.reaper_period_s, st.server_time):
            seen_at = stage.now
            break
        stage.run(1.0, step=1.0)
    visible = None if seen_at is None else (seen_at - missed_at) / MIN
    # Each second the status could not be read pushes the stale warning back by as much; `gpuc ls` shows
    # "watchdog unreachable" meanwhile. The bound grows by that time, as a row's does by a lost pass.
    bound = (stage.period + 1.0 + unreadable_s) / MIN
    note = f" + {unreadable_s:.0f} s status unreadable" if unreadable_s else ""
    return RowResult(
        "F14",
        "the reaper stopped running",
        "gpuc ls / doctor (status)",
        visible,
        bound,
        f"visible within one period (+1 s sampling){note}",
        notifications=stage.notifications(),
    )


def f5c_clock_ahead(stage: Stage) -> RowResult:
    """The pod's clock runs 6 min ahead: outside the functions' 5-minute signature window. Its job keeps
    the GPU busy, but the provider reports no utilisation: only the heartbeats say the pod works."""
    pod = stage.launch("f5c-pod", clock_skew_s=6 * MIN)
    pod.busy()
    stage.provider.set(pod.pod_id, gpu_util_pct=None)
    ran_s = 2 * 3600.0
    stage.run(ran_s)
    caught_by = "heartbeats on the functions' time; wrapper"
    row = job_end_row(stage, pod, "F5c", "pod clock 6 min ahead, job running", caught_by, ran_s)
    alerts = sum(1 for m in stage.messages(pod.pod_id) if "pod clock off by" in m)
    if alerts != 1:
        row.problems.append(f"the 'pod clock off' alert was sent {alerts} time(s), not once")
    return row


def f5r_watchdog_slept(stage: Stage) -> RowResult:
    """A pod's network to the watchdog blips, the reaper marks it "will destroy at T", and the laptop that
    runs the watchdog goes to sleep for three hours. At the wake-up pass T is long past and the pod has
    not yet pinged (the functions were asleep): that pass must destroy nothing and restart every
    deadline. Another pod's agent died during the sleep: destroyed within F5's bound of the wake."""
    living, dying = stage.launch("f5r-pod-1"), stage.launch("f5r-pod-2")
    for pod in (living, dying):
        no_gpu_reading(stage, pod)
    stage.run(35 * MIN)  # past one periodic results push: what a kill can cost is after it
    living.transport.down = True  # the blip
    stage.run(3 * 3600, until=lambda: state_of(stage, living.pod_id) == "down")
    stage.reaper_stopped_at = stage.now  # the lid closes
    dying.alive_agent = False
    for pod in (living, dying):
        pod.transport.down = True
    stage.run(3 * 3600)
    for pod in (living, dying):
        pod.transport.down = False
    stage.reaper_stopped_at = None
    wake = stage.now
    stage.reap(wake)  # the timer fires on wake, before any pod's next heartbeat
    stage.run_until_gone(dying.pod_id)
    stage.run(30 * MIN)
    said = any(n.kind == "clock" for n in stage.sent())
    problems = [] if said else ["no alert said the reaper's clock jumped"]
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, wake)
    return pod_row(
        stage,
        dying,
        "F5r",
        "watchdog slept 3 h (laptop lid) with a pod marked",
        "reaper: a late pass restarts deadlines",
        stage.billed_min(dying.pod_id, wake),
        bound,
        f"0 false kills; a dead one: as F5 after the wake{stage.bound_note(wake)}",
        false_kills=survivors_killed(stage, [living]),
        problems=problems,
    )


def f5g_transient_not_found(stage: Stage) -> RowResult:
    """For one pass the provider's list and `get` both say the pod does not exist (a stale replica). A
    watch dropped on that would never destroy it: then its agent dies."""
    pod = stage.launch_busy("f5g-pod", 20 * MIN)
    stage.provider.lose(pod.pod_id, 1)
    stage.run(stage.period)
    stage.run(10 * MIN)
    died_at = stage.now
    pod.alive_agent = False
    pod.idle()
    stage.run_until_gone(pod.pod_id)
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, died_at)
    return pod_row(
        stage,
        pod,
        "F5g",
        "provider says 'not found' once, then the agent dies",
        "reaper: gone needs two passes",
        stage.billed_min(pod.pod_id, died_at),
        bound,
        f"as F5{stage.bound_note(died_at)}",
    )
