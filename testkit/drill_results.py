"""The drill's rows about the results and the pod's key: a sync that fails keeps the pod (F8), the key
refused (F9) or hearing not-found (F9n), the network lost (F10)."""

from __future__ import annotations

from gpuc.core.models import PodSpec
from gpuc.functions.app import ProviderPool
from gpuc.testkit.drill_provider import EMU_RUNPOD_KEY
from gpuc.testkit.drill_stage import EXPERIMENT, MIN, STEP_S, DrillPod, RowResult, Stage, pod_row, spec_bound_s


def f8_sync_fails(stage: Stage) -> RowResult:
    pod_id = "f8-pod"
    pod = stage.launch_busy(pod_id, 20 * MIN, sync_broken=True)
    outcome = pod.job_exit(0, 20 * MIN)
    stage.run(3 * 3600)  # the user is away for three hours: the idle watch and the reaper keep trying
    nags = sum(1 for m in stage.messages(pod_id) if "sync failed" in m.lower() or "sync_failed" in m)
    problems = [] if outcome == "kept_sync_failed" else [f"wrapper ended with {outcome}"]
    if nags < 2:
        problems.append(f"the kept-alive alert was sent {nags} time(s), not repeated")
    killed = 0 if stage.provider.alive(pod_id) else 1
    failure = "results sync fails at the end"
    text = "no data lost; kept, never destroyed (stopped at the kept window: F16)"
    return pod_row(
        stage, pod, "F8", failure, "wrapper keeps the pod", None, None, text, false_kills=killed, problems=problems
    )


def f9_key_refused(stage: Stage) -> RowResult:
    pod_id = "f9-pod"
    pod = stage.launch_busy(pod_id, 25 * MIN)
    pod.refuse_destroy = True
    exit_at = stage.now
    outcome = pod.job_exit(0, 25 * MIN)
    problems = [] if outcome == "destroy_failed" else [f"wrapper ended with {outcome}"]
    stage.run_until_gone(pod_id)
    # The pod reported its end (ledger closed, destroy_at = now + grace) before the refused call: the
    # reaper's "ended but alive" rule applies after the grace; "as F5" is the failure matrix's looser bound.
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
    billed = stage.billed_min(pod_id, exit_at)
    failure = "pod's API key refused self-destroy"
    text = f"as F5{stage.bound_note(exit_at)}"
    return pod_row(stage, pod, "F9", failure, "reaper (its own key)", billed, bound, text, problems=problems)


def f9n_pod_key_hears_not_found(stage: Stage) -> RowResult:
    """F9 in disguise: the pod-scoped key's terminate answers "pod not found to terminate" while the pod
    lives on. The real RunPod self-destroyer, through the RunPod emulator with the pod's own key, must not
    believe it: it reads itself, stops itself and says so; the reaper destroys it with the account key.

    The pod's end is known to the watchdog only by what the pod says (its end, then "only stopped"). When a fault
    refused every word of it, the watchdog sees a stopped pod it was told nothing about, the same as one stopped
    in the provider's console: F7's rule (a stopped pod bills its disk, destroyed after the stopped limit) is the
    one that applies, and the row holds the pod to it."""
    from gpuc.core.providers.http import zero_backoff
    from gpuc.core.providers.podkey import RunPodSelfDestroyer
    from gpuc.core.providers.runpod import RunPodProvider
    from gpuc.testkit.emulators.runpod import RunPodEmulator

    stage.run(25 * MIN)  # a watchdog up for a while (a brand-new store holds its destroys: not this row)
    emu = RunPodEmulator(api_key=EMU_RUNPOD_KEY, clock=stage.clock, boot_polls=0, balance=10.0, pod_key_not_found=True)
    graphql_url = "https://api.runpod.test/graphql"
    runpod = RunPodProvider(
        EMU_RUNPOD_KEY,
        graphql_url=graphql_url,
        rest_url="https://api.runpod.test/v2",
        transport=emu.transport(),
        clock=stage.clock,
        backoff=zero_backoff,
    )
    stage.deps.providers = ProviderPool.of(stage.provider, runpod)
    problems: list[str] = []
    heard = True
    try:
        made = runpod.create(PodSpec(experiment=EXPERIMENT, run_id="f9n-pod", provider="runpod", gpu_type="RTX 4090"))
        pod = DrillPod(stage, made.id)
        stage.provider.pods.pop(made.id)  # the pod lives at the emulated RunPod, not the drill's provider
        stage.register(made.id, pod.token, provider="runpod", name=made.name)
        environ = {**emu.pod_environ(made.id), "GPUC_RUNPOD_GRAPHQL_URL": graphql_url}
        destroyer = RunPodSelfDestroyer.from_environ(environ, send=emu.pod_send(), clock=stage.clock)
        pod.ender.destroyer = lambda: destroyer
        exit_at = stage.now
        outcome = pod.job_exit(0, 25 * MIN)
        if outcome != "destroy_failed":
            problems.append(f"wrapper ended with {outcome}, not destroy_failed")
        if made.id in emu.pods and emu.pods[made.id].state != "exited":
            problems.append("the pod believed 'not found' and did not stop itself")
        rec = stage.real_store.get_pod(made.id)
        heard = rec is not None and rec.end_at is not None
        if not heard and not pod.cut_off_since(exit_at):
            problems.append("the watchdog never heard the pod's end, and no fault refused it")
        limit_s = 4 * 3600 if heard else stage.settings.stopped_limit_s + 3 * 3600
        stage.run(limit_s, step=STEP_S if heard else MIN, until=lambda: made.id not in emu.pods)
        gone = made.id not in emu.pods
        if not gone:
            problems.append("the pod outlived the reaper (leak)")
        said = [m for m in stage.messages(made.id) if "stopped pod" in m]
        if not said and heard:
            problems.append("no notification says the pod was only stopped")
        billed = (stage.now - exit_at) / MIN if gone else None
    finally:
        runpod.close()
    if heard:
        bound, text = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at), "as F9"
    else:  # its words refused by a fault: as F7, from its stop
        bound = spec_bound_s(stage.settings, stage.settings.stopped_limit_s) / MIN + stage.slack(exit_at)
        text = "as F9; its end refused by a fault: as F7 (24 h + one period)"
    return pod_row(
        stage,
        pod,
        "F9n",
        "pod key told 'pod not found' but the pod lives",
        "the pod reads itself, stops, says so; reaper",
        billed,
        bound,
        f"{text}{stage.bound_note(exit_at)}",
        problems=problems,
    )


def f10_network_lost(stage: Stage) -> RowResult:
    pod_id = "f10-pod"
    pod = stage.launch_busy(pod_id, 15 * MIN)
    pod.transport.down = True  # cut off from the functions, still training
    stage.run(2 * 3600)
    killed = 0 if stage.provider.alive(pod_id) else 1
    alerts = sum(1 for n in stage.sent(pod_id) if n.kind == "alert")
    problems = [] if alerts else ["the reaper saw the silence but sent no alert"]
    failure = "pod lost network to the functions, still working"
    caught_by = "reaper: silence, provider says busy"
    text = "alert only, no kill"
    return pod_row(stage, pod, "F10", failure, caught_by, None, None, text, false_kills=killed, problems=problems)
