"""The drill's rows about the watchdog's store: a pod never registered (F11), the store lost with pods
running (F11s)."""

from __future__ import annotations

from gpuc.core.models import PodSpec
from gpuc.testkit.drill_stage import (
    EXPERIMENT,
    MIN,
    RowResult,
    Stage,
    lose_store,
    minutes_text,
    no_gpu_reading,
    pod_row,
    spec_bound_s,
    survivors_killed,
    unclaimed,
)


def f11_never_registered(stage: Stage) -> RowResult:
    run_id = "f11-pod"
    created_at = stage.now
    stage.provider.create(PodSpec(experiment=EXPERIMENT, run_id=run_id, provider="drill", gpu_type="RTX 4090"))
    stage.run_until_gone(run_id)
    bound = spec_bound_s(stage.settings, stage.settings.unregistered_grace_s) / MIN + stage.slack(created_at)
    return RowResult(
        "F11",
        "laptop crashed after create, before register",
        "reaper (tagged, unregistered)",
        stage.billed_min(run_id, created_at),
        bound,
        f"grace + one period{stage.bound_note(created_at)}",
        notifications=stage.notifications(run_id),
    )


def f11s_store_lost(stage: Stage) -> RowResult:
    """watchdog.db deleted while two pods work (a new GPUC_HOME, a table restored from an old backup look the
    same): the watchdog comes back on an empty store at the same URL. The pods carry their own proof:
    each ping presents the pod's claim, signed with the watchdog's key, and the ping verifies with the
    token derived from that key, so the record is re-created from it and the pod judged as before. Both
    live, nobody had to answer a warning. (Before claims, both were warned about and destroyed unless kept.)"""
    pods = [stage.launch(f"f11s-pod-{i}") for i in (1, 2)]
    for pod in pods:
        no_gpu_reading(stage, pod)
    stage.run(35 * MIN)  # past one periodic results push
    lose_store(stage)
    lost_at = stage.now
    # Past the grace in which a young store holds every destroy, twice, and a stray's destroy after it.
    stage.run(2 * stage.settings.unregistered_grace_s + 4 * stage.period)
    problems = [f"{p} was not re-created from its claim" for p in unclaimed(stage, [p.pod_id for p in pods])]
    if any("cannot verify" in m for p in pods for m in stage.messages(p.pod_id)):
        problems.append("a pod that proved itself was warned about as unverifiable")
    return pod_row(
        stage,
        pods[0],
        "F11s",
        "watchdog store lost (deleted watchdog.db), pods alive",
        "the pods' claims: records re-created",
        None,
        None,
        f"0 destroyed: each re-created from its claim ({minutes_text(stage.now - lost_at)} watched after the loss)",
        false_kills=survivors_killed(stage, pods),
        problems=problems,
    )
