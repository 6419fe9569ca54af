"""The drill's rows about the provider: a pod paused or stopped behind gpuc's back (F6, F7), one provider
blind to the reaper (F12b), and the provider API's errors through the real HTTP providers and the
emulators (F12)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.errors import GpucError, ProviderError
from gpuc.core.models import PodSpec
from gpuc.core.pod import PodStatus
from gpuc.core.providers.base import Provider
from gpuc.core.signing import new_token
from gpuc.functions.app import Deps, ProviderPool
from gpuc.testkit.drill_stage import (
    EXPERIMENT,
    MIN,
    FaultPlan,
    FaultTally,
    RowResult,
    Stage,
    passes_bound_s,
    pod_row,
    spec_bound_s,
)
from gpuc.testkit.fakes import FakeProvider


def f6_paused(stage: Stage) -> RowResult:
    return _provider_state_row(
        stage,
        "F6",
        "interruptible outbid, instance paused",
        "paused",
        stage.settings.paused_limit_s,
        "30 min + one period",
        interruptible=True,
    )


def f7_stopped(stage: Stage) -> RowResult:
    return _provider_state_row(
        stage, "F7", "pod stopped and forgotten", "stopped", stage.settings.stopped_limit_s, "24 h + one period"
    )


def _provider_state_row(
    stage: Stage, row: str, failure: str, status: PodStatus, limit_s: float, text: str, *, interruptible: bool = False
) -> RowResult:
    pod_id = f"{row.lower()}-pod"
    pod = stage.launch_busy(pod_id, 35 * MIN, interruptible=interruptible)  # past one periodic results push
    at = stage.now
    pod.alive_agent = False  # a paused or stopped container runs nothing
    stage.provider.set(pod_id, status=status, gpu_util_pct=None)
    stage.run_until_gone(pod_id, limit_s + 3 * 3600, step=60.0)
    bound = spec_bound_s(stage.settings, limit_s) / MIN + stage.slack(at)
    billed = stage.billed_min(pod_id, at)
    return pod_row(stage, pod, row, failure, "reaper", billed, bound, text + stage.bound_note(at))


def f12b_one_provider_blind(stage: Stage) -> RowResult:
    """The Vast key was revoked: every Vast read fails for hours. A pod's agent dies on the other
    provider: it is destroyed within F5's bound all the same (blindness is per provider), nothing is done
    on the Vast pod, and the blindness escalates to an error-level alert after an hour."""
    vast = FakeProvider(stage.clock, name="vast")
    vast.add("f12b-vast-pod", created_at=stage.now)
    vast.fail = ProviderError("HTTP 401: the API key was revoked", provider="vast", status=401)
    stage.deps.providers = ProviderPool.of(stage.provider, vast)
    stage.register("f12b-vast-pod", new_token(), provider="vast")
    lost: list[float] = []  # passes that could not see THIS provider (faults on): each costs one period
    inner = stage.reaper

    def reaper(deps: Deps, now: float) -> api.ReapReport:
        try:
            report = inner(deps, now)
        except Exception:
            lost.append(now)
            raise
        if stage.provider.name in report.blind_providers:
            lost.append(now)
        return report

    stage.reaper = reaper
    pod = stage.launch_busy("f12b-pod", 35 * MIN)
    died_at = stage.now
    pod.alive_agent = False
    pod.idle()
    stage.run_until_gone(pod.pod_id)
    stage.run(90 * MIN)
    blind = [n for n in stage.sent() if n.kind == "blind"]
    problems = [] if any(n.level == "error" for n in blind) else ["no error-level alert after an hour blind"]
    if vast.destroyed:
        problems.append("something was destroyed at the blind provider")
    slack = sum(1 for t in lost if t >= died_at)
    bound = passes_bound_s(stage.settings, stage.settings.silence_limit_s) / MIN + slack * stage.period / MIN
    note = f" + {slack} lost pass(es)" if slack else ""
    return pod_row(
        stage,
        pod,
        "F12b",
        "one provider blind for hours (key revoked)",
        "reaper: blindness per provider",
        stage.billed_min(pod.pod_id, died_at),
        bound,
        f"as F5 at the other provider{note}",
        problems=problems,
    )


# -- F12: provider API errors, through the real HTTP providers and the emulators -------------------
EMU_RUNPOD_KEY = "rpa_DRILL" + "0" * 31


EMU_VAST_KEY = "drillvast" + "0" * 31


EMU_FAULT_OPS = {
    "runpod": ("list", "get", "destroy"),
    "vast": ("list", "list_v0", "get", "destroy"),
}


# The schedule when faults are off: one of each kind, at the calls the reaper makes.
FIXED_FAULTS = (("list", "503"), ("get", "429"), ("destroy", "timeout_after_commit"), ("list", "success_false"))


EMU_KINDS = ("500", "503", "429", "timeout", "drop", "success_false", "schema_drift", "timeout_after_commit")


def emulated(clock: FakeClock) -> tuple[Any, Any, Provider, Provider]:
    from gpuc.core.providers.http import zero_backoff
    from gpuc.core.providers.runpod import RunPodProvider
    from gpuc.core.providers.vast import VastProvider
    from gpuc.testkit.emulators.runpod import RunPodEmulator
    from gpuc.testkit.emulators.vast import VastEmulator

    rp_emu = RunPodEmulator(api_key=EMU_RUNPOD_KEY, clock=clock)
    vast_emu = VastEmulator(api_key=EMU_VAST_KEY, clock=clock)
    runpod = RunPodProvider(
        EMU_RUNPOD_KEY,
        graphql_url="https://api.runpod.test/graphql",
        rest_url="https://api.runpod.test/v2",
        transport=rp_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    vast = VastProvider(
        EMU_VAST_KEY,
        url="https://console.vast.test/api/v0",
        transport=vast_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    return rp_emu, vast_emu, runpod, vast


def emu_alive(emu: Any) -> set[str]:
    return {str(p.id) for p in emu.alive()}


def emu_names(emu: Any) -> Counter[str]:
    return Counter(str(getattr(p, "name", None) or getattr(p, "label", None)) for p in emu.alive())


def f12_provider_errors(root: Path, *, seed: int, faults: bool, tally: FaultTally) -> RowResult:
    """A silent pod on each emulated provider, reaped while the providers answer 5xx / 429 / timeouts /
    success:false / schema drift. The bound is not time: no leak, no double create or destroy."""
    plan = FaultPlan(seed * 1000 + 12, on=faults, tally=tally)
    stage = Stage(root, plan)
    rp_emu, vast_emu, runpod, vast = emulated(stage.clock)
    stage.deps.providers = ProviderPool.of(stage.provider, runpod, vast)
    emus = {"runpod": rp_emu, "vast": vast_emu}
    rng = random.Random(seed * 7919 + 12)
    problems: list[str] = []
    billed: list[float] = []
    sent = 0
    try:
        pods: dict[str, tuple[str, float]] = {}
        for name, provider in (("runpod", runpod), ("vast", vast)):
            if faults and rng.random() < 0.5:
                kind = rng.choice(("503", "timeout_after_commit", "drop_after_commit", "500_after_commit"))
                emus[name].faults.add("create", kind, times=1)
                tally.injected[f"emulator create {kind}"] += 1
            spec = PodSpec(experiment=EXPERIMENT, run_id=f"f12-{name}", provider=name, gpu_type="RTX 4090")
            try:
                pod = provider.create(spec)
            except GpucError:
                continue  # `up` failed: whatever the provider did create is a stray for the reaper (F11)
            stage.register(pod.id, new_token(), provider=name, name=pod.name)
            pods[pod.id] = (name, stage.now)  # never pings: the agent died at boot
        started = stage.now
        for name, emu in emus.items():
            for op, kind in FIXED_FAULTS:
                emu.faults.add(op, kind, times=1)
                tally.injected[f"emulator {kind}"] += 1
            if faults:
                for _ in range(rng.randint(4, 10)):
                    kind = rng.choice(EMU_KINDS)
                    emu.faults.add(rng.choice(EMU_FAULT_OPS[name]), kind, times=1)
                    tally.injected[f"emulator {kind}"] += 1

        def all_gone() -> bool:
            return not any(emu_alive(emu) for emu in emus.values())

        gone_at: dict[str, float] = {}

        def watch() -> bool:
            for pid, (name, _) in pods.items():
                if pid not in gone_at and pid not in emu_alive(emus[name]):
                    gone_at[pid] = stage.now
            return all_gone()

        stage.run(4 * 3600, step=30.0, until=watch)
        for pid, (_, since) in pods.items():
            if pid in gone_at:
                billed.append((gone_at[pid] - since) / MIN)
        if not pods and all_gone():
            billed.append((stage.now - started) / MIN)
        for emu in emus.values():
            tally.pods_leaked += len(emu_alive(emu))
            tally.double_creates += sum(n - 1 for n in emu_names(emu).values() if n > 1)
        for pid in pods:
            tally.double_destroys += max(0, stage.reaper_destroys[pid] - 1)
        if not all_gone():
            problems.append("a pod outlived the faults (leak)")
        blind = sum(1 for e in emus.values() for r in e.requests if r.fault)
        if blind == 0:
            problems.append("no fault reached the providers: the row proved nothing")
        sent = stage.notifications()
    finally:
        runpod.close()
        vast.close()
        stage.close()
    return RowResult(
        "F12",
        "provider API errors (5xx, 429, timeouts, success:false, drift)",
        "everyone retries; destroy idempotent",
        max(billed) if billed else None,
        None,
        "no leak, no double action",
        notifications=sent,
        problems=problems,
    )
