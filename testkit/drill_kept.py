"""Drill rows for F16: a results sync fails at the end and nobody answers.

The pod's real Ender and agent keep the pod (F8), nag, retry the sync, and at the end of the kept window
STOP it, never destroy it: GPU billing ends at the stop, the disk with results/ stays (0 bytes lost).
F16b is the watchdog's backstop, with the pod unable to stop itself: one pod's key is refused the stop,
another's agent dies right after saying "kept". The real reaper stops both, destroys neither.

Billed minutes run from the job's exit to the stop (what the GPU bills); the disk's storage after it is
the price of keeping the results, said daily by the reaper. At the end the user answers as `gpuc down
--force` would (the end recorded as the user's, then the destroy), so no pod is left for the tally.
"""

from __future__ import annotations

from gpuc.core import api
from gpuc.core.errors import GpucError
from gpuc.functions.edge import Request
from gpuc.functions.handlers import dispatch
from gpuc.testkit.drill_stage import ADMIN, MIN, SYNC_S, DrillPod, RowResult, Stage

KEPT_TRAIN_S = 20 * MIN


def kept_pod(stage: Stage, pod_id: str) -> DrillPod:
    """A pod whose every sync fails (its bucket is a file), whose self-stop really stops it at the provider."""
    pod = stage.launch_busy(pod_id, KEPT_TRAIN_S, sync_broken=True)
    (pod.paths.results / "model.bin").write_bytes(b"\7" * 65536)  # what the job was run for

    def stop_at_provider() -> str:
        stage.provider.stop(pod_id)
        return f"stopped {pod_id}"

    pod.destroyer.stop_target = stop_at_provider
    return pod


def on_disk(pod: DrillPod) -> dict[str, bytes]:
    return {str(p.relative_to(pod.paths.results)): p.read_bytes() for p in pod.paths.results.rglob("*") if p.is_file()}


def bytes_lost(stage: Stage, pod: DrillPod, before: dict[str, bytes]) -> int:
    """What the kept pod no longer holds: everything, if it was destroyed; else what changed on its disk."""
    if pod.pod_id in stage.provider.destroyed:
        return sum(len(v) for v in before.values())
    now = on_disk(pod)
    return sum(len(v) for k, v in before.items() if now.get(k) != v)


def user_answers(stage: Stage, pod_id: str) -> None:
    """`gpuc down POD --force`: the end recorded as the user's word, then the destroy."""
    body = api.EndRequest(end_at=stage.now, by="down").model_dump_json().encode()
    headers = {"Authorization": f"Bearer {ADMIN}"}
    dispatch(Request("POST", f"/v1/pods/{pod_id}/end", headers, body), stage.deps, stage.now)
    for _ in range(20):  # the fault plan's provider errors: `down` would say so, the user runs it again
        try:
            stage.provider.destroy(pod_id)
            return
        except GpucError:
            continue


def kept_problems(stage: Stage, pod: DrillPod, lost: int, *, pod_said: bool) -> list[str]:
    problems = []
    if pod.pod_id in stage.provider.destroyed:
        problems.append("the kept pod was destroyed before the user answered")
    current = stage.provider.pods.get(pod.pod_id)
    if current is None or current.status != "stopped":
        problems.append("the kept pod is not stopped: its GPU still bills")
    if lost:
        problems.append(f"{lost} bytes of results lost")
    kinds = {n.kind for n in stage.sent(pod.pod_id)}
    cut_off = any(stage.in_window(k) for k in ("functions unreachable", "notifier down"))
    wanted = {"sync_failed", "kept_stopping", "kept_stopped"} if pod_said else {"sync_failed", "kept_stopped"}
    if not cut_off and not stage.plan.on and not wanted <= kinds:
        problems.append(f"the user was not told: {sorted(wanted - kinds)} missing")
    return problems


def heard_kept(stage: Stage, pod_id: str) -> bool:
    rec = stage.real_store.get_pod(pod_id)
    return rec is not None and rec.kept_at is not None


def backstop_bound_min(stage: Stage, since: float) -> float:
    """The pod's own stop goes first: the watchdog stops it one period after the window, on the next pass."""
    return (stage.settings.kept_window_s + 2 * stage.period + SYNC_S) / MIN + stage.slack(since)


def f16_kept_then_stopped(stage: Stage) -> RowResult:
    pod = kept_pod(stage, "f16-pod")
    before = on_disk(pod)
    exit_at = stage.now
    outcome = pod.job_exit(0, KEPT_TRAIN_S)
    window = stage.settings.kept_window_s
    stage.run(window + 2 * stage.period, until=lambda: "f16-pod" in stage.provider.stopped_at)
    stage.run(stage.period)
    lost = bytes_lost(stage, pod, before)
    problems = [] if outcome == "kept_sync_failed" else [f"the end gave {outcome}, not kept_sync_failed"]
    problems += kept_problems(stage, pod, lost, pod_said=True)
    stopped = stage.provider.stopped_at.get(pod.pod_id)
    billed = None if stopped is None else (stopped - exit_at) / MIN
    if stopped is not None and stopped < exit_at + window:
        problems.append(f"stopped {(exit_at + window - stopped) / MIN:.0f} min before the kept window ended")
    check = stage.settings.idle_check_interval_s
    bound = (window + check + 2 * SYNC_S) / MIN + stage.slack(exit_at)
    text = f"kept window ({window / 3600:g} h) + 1 check + sync; 0 bytes lost, disk kept{stage.bound_note(exit_at)}"
    if pod.destroyer.calls.count("stop") > pod.destroyer.stops:  # a fault refused the self-stop
        bound = backstop_bound_min(stage, exit_at)
        text = f"self-stop failed: as F16b{stage.bound_note(exit_at)}"
    row = RowResult(
        "F16",
        "results sync fails at the end, nobody answers",
        "wrapper/agent keep, then STOP the pod",
        billed,
        bound,
        text,
        results_lost=1 if lost else 0,
        notifications=stage.notifications(pod.pod_id),
        false_kills=1 if pod.pod_id in stage.provider.destroyed else 0,
        problems=problems,
    )
    user_answers(stage, pod.pod_id)
    return row


def f16b_watchdog_stops_it(stage: Stage) -> RowResult:
    refused, dead = kept_pod(stage, "f16b-refused"), kept_pod(stage, "f16b-dead")
    refused.destroyer.refuse_stop = True  # the pod key may not stop it (UNCONFIRMED scope): it keeps billing
    before = {p.pod_id: on_disk(p) for p in (refused, dead)}
    exit_at = stage.now
    outcomes = [p.job_exit(0, KEPT_TRAIN_S) for p in (refused, dead)]
    # The agent dies once the watchdog has its word that the pod is kept (the end's nag, or any ping after
    # it, says so). A word that never arrived protects nothing: that pod dies as F5 does.
    stage.run(3600, until=lambda: heard_kept(stage, dead.pod_id))
    dead.alive_agent = False
    dead.idle()
    window, period = stage.settings.kept_window_s, stage.period
    gone = lambda: all(p.pod_id in stage.provider.stopped_at for p in (refused, dead))  # noqa: E731
    stage.run(window + 3 * period, until=gone)
    refused.alive_agent = False  # a stopped container runs nothing
    stage.run(period)
    problems = [f"the end gave {o}" for o in outcomes if o != "kept_sync_failed"]
    billed: list[float] = []
    lost_any = 0
    for pod in (refused, dead):
        lost = bytes_lost(stage, pod, before[pod.pod_id])
        lost_any += lost
        problems += [f"{pod.pod_id}: {p}" for p in kept_problems(stage, pod, lost, pod_said=pod is refused)]
        stopped = stage.provider.stopped_at.get(pod.pod_id)
        if stopped is not None:
            billed.append((stopped - exit_at) / MIN)
    bound = backstop_bound_min(stage, exit_at)
    row = RowResult(
        "F16b",
        "kept pod cannot stop itself (key refused; agent dead)",
        "reaper: a kept pod's kill is a stop",
        max(billed) if len(billed) == 2 else None,
        bound,
        f"kept window + 2 periods; never destroyed{stage.bound_note(exit_at)}",
        results_lost=1 if lost_any else 0,
        notifications=stage.notifications(refused.pod_id) + stage.notifications(dead.pod_id),
        false_kills=sum(1 for p in (refused, dead) if p.pod_id in stage.provider.destroyed),
        problems=problems,
    )
    for pod in (refused, dead):
        user_answers(stage, pod.pod_id)
    return row
