"""Drill rows for F15: a pod that looks alive past its deadline, on the emulated RunPod and Vast behind
the real HTTP providers, with the real agent (its deadline, its Ender, the real self-destroyers with the
pod-scoped keys) and the real reaper.

- F15 / F15v: a busy, pinging pod (GPU 100 %, a python job, an ssh terminal with input) whose agent is
  healthy: it warns, syncs and destroys itself a lead before the deadline. Billed <= --max-hours + one
  period from its start; 0 false kills, 0 results lost.
- F15h: a host that keeps the pod's token and pings "busy" every minute while ignoring every deadline (a
  hung NCCL collective, a patched agent, a hostile host), on both providers: only the reaper can end it,
  and does, within the same bound. RunPod's terminateAfter is sent and, as on the real API, never acts.

The drill's max-hours is short (virtual time on the stage's FakeClock).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuc.core import api
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider, SelfDestroyer
from gpuc.core.signing import derive_key
from gpuc.functions.app import ProviderPool
from gpuc.functions.edge import Request
from gpuc.functions.handlers import dispatch
from gpuc.instance_side.heartbeat import heartbeat_body
from gpuc.instance_side.sshscan import SshSession
from gpuc.testkit.drill_provider import emu_alive, emulated
from gpuc.testkit.drill_stage import ADMIN, EXPERIMENT, MIN, STEP_S, DrillPod, RowResult, Stage

MAX_HOURS = 1.0
GRAPHQL_URL = "https://api.runpod.test/graphql"
VAST_URL = "https://console.vast.test/api/v0"


class DeadlinePod(DrillPod):
    """A DrillPod at an emulated provider, its config carrying the deadline `up` writes."""

    def __init__(self, stage: Stage, pod_id: str, provider: str, deadline_at: float) -> None:
        self.deadline_at = deadline_at
        self.provider_name = provider
        super().__init__(stage, pod_id)
        stage.provider.pods.pop(pod_id)  # it lives at the emulator, not at the drill's own provider

    def _write_config(self, bucket: Path) -> None:
        super()._write_config(bucket)
        data = json.loads(self.paths.config.read_text())
        data.update(deadline_at=self.deadline_at, provider=self.provider_name)
        self.paths.config.write_text(json.dumps(data))

    def looks_alive(self) -> None:
        """Every sign of work the idle watch knows: nothing here may keep the pod past its deadline."""
        self.gpu.util, self.procs.pids = 100.0, [4242]
        self.ssh.sessions_ = [SshSession(tty="pts/0", last_input=self.stage.now)]
        self.paths.keep_file.touch()

    def fake_ping(self, now: float) -> None:
        """A hostile host's heartbeat: the pod's own token and client code, "busy", and nothing else."""
        busy = [{"index": 0, "utilization_pct": 100.0}]
        self.ctx.client.queue_heartbeat(heartbeat_body(self.pod_id, gpus=busy, python_procs=1, job_running=True))
        self.ctx.client.flush(now)


@dataclass
class Rented:
    name: str
    emu: Any
    provider: Provider
    pod: Pod
    started: float
    drill: DeadlinePod
    gone_at: float | None = None

    @property
    def pod_id(self) -> str:
        return self.pod.id

    @property
    def deadline(self) -> float:
        return self.drill.deadline_at


def f15_runpod(stage: Stage) -> RowResult:
    return _agent_row(stage, "runpod", "F15")


def f15v_vast(stage: Stage) -> RowResult:
    return _agent_row(stage, "vast", "F15v")


def _agent_row(stage: Stage, name: str, row: str) -> RowResult:
    with _providers(stage) as (emus, providers):
        pod = _rent(stage, name, emus[name], providers[name], f"{row.lower()}-pod")
        _run(stage, [pod], MAX_HOURS * 3600 + 3 * stage.period, agents=True)
        problems = _common_problems(stage, [pod])
        if not pod.drill.agent.stopped:
            problems.append("the agent did not end the pod itself")
        warned = any(n.kind == "deadline_warning" for n in stage.sent(pod.pod_id))
        if not warned and not stage.plan.on:
            problems.append("no deadline warning reached the phone")
        lead = stage.settings.deadline_lead_s + stage.settings.idle_check_interval_s
        return RowResult(
            row,
            f"busy, pinging pod past its deadline ({name})",
            "pod's agent (sync first); reaper behind it",
            _billed(pod),
            _bound(stage, pod.started),
            f"--max-hours + one period{stage.bound_note(pod.started)}",
            false_kills=_false_kills([pod], lead),
            results_lost=pod.drill.results_lost(),
            notifications=stage.notifications(pod.pod_id),
            problems=problems,
        )


def f15h_host_fakes_pings(stage: Stage) -> RowResult:
    with _providers(stage) as (emus, providers):
        pods = [_rent(stage, n, emus[n], providers[n], f"f15h-{n}") for n in ("runpod", "vast")]
        _run(stage, pods, MAX_HOURS * 3600 + 4 * stage.period, agents=False)
        problems = _common_problems(stage, pods)
        for pod in pods:
            if pod.gone_at is not None and stage.reaper_destroys[pod.pod_id] == 0:
                problems.append(f"{pod.name}: gone, but not by the reaper")
        billed = [b for b in (_billed(p) for p in pods) if b is not None]
        return RowResult(
            "F15h",
            "host fakes busy pings past the deadline (RunPod, Vast)",
            "reaper: the deadline rule",
            max(billed) if len(billed) == len(pods) else None,
            _bound(stage, min(p.started for p in pods)),
            f"--max-hours + one period{stage.bound_note(min(p.started for p in pods))}",
            false_kills=_false_kills(pods, 0.0),
            notifications=sum(stage.notifications(p.pod_id) for p in pods),
            problems=problems,
        )


# -- the wiring --------------------------------------------------------------------------------------------
class _providers:
    """The emulated RunPod and Vast behind the real providers, watched by the stage's reaper."""

    def __init__(self, stage: Stage) -> None:
        rp_emu, vast_emu, runpod, vast = emulated(stage.clock)
        self.emus: dict[str, Any] = {"runpod": rp_emu, "vast": vast_emu}
        self.providers: dict[str, Provider] = {"runpod": runpod, "vast": vast}
        stage.deps.providers = ProviderPool.of(stage.provider, runpod, vast)

    def __enter__(self) -> tuple[dict[str, Any], dict[str, Provider]]:
        return self.emus, self.providers

    def __exit__(self, *exc: object) -> None:
        for provider in self.providers.values():
            provider.close()


def _rent(stage: Stage, name: str, emu: Any, provider: Provider, run_id: str) -> Rented:
    """What `up` does, as far as the deadline goes: create, register start + max-hours, the agent's config."""
    spec = PodSpec(experiment=EXPERIMENT, run_id=run_id, provider=name, gpu_type="RTX 4090", max_hours=MAX_HOURS)
    made = provider.create(spec)
    started = stage.now
    deadline = started + MAX_HOURS * 3600
    drill = DeadlinePod(stage, made.id, name, deadline)
    _register(stage, made, drill.token, started, deadline)
    drill.ender.destroyer = _self_destroyer(name, emu, made.id, stage)
    emu.set_gpu_util(made.id, 100)
    return Rented(name, emu, provider, made, started, drill)


def _self_destroyer(name: str, emu: Any, pod_id: str, stage: Stage) -> Any:
    """The real self-destroy with the pod-scoped key the platform injects (RunPod's, Vast's)."""
    from gpuc.core.providers.podkey import RunPodSelfDestroyer, VastSelfDestroyer

    url = {"runpod": ("GPUC_RUNPOD_GRAPHQL_URL", GRAPHQL_URL), "vast": ("GPUC_VAST_URL", VAST_URL)}[name]
    environ = {**emu.pod_environ(pod_id), url[0]: url[1]}
    kind: type[RunPodSelfDestroyer] | type[VastSelfDestroyer] = (
        RunPodSelfDestroyer if name == "runpod" else VastSelfDestroyer
    )
    destroyer: SelfDestroyer = kind.from_environ(environ, send=emu.pod_send(), clock=stage.clock)
    return lambda: destroyer


def _register(stage: Stage, pod: Pod, token: str, started: float, deadline: float) -> None:
    body = api.RegisterRequest(
        pod_id=pod.id,
        provider=pod.provider,
        name=pod.name,
        experiment=EXPERIMENT,
        key=derive_key(token),
        price_per_hour=pod.price_per_hour,
        started_at=started,
        deadline_at=deadline,
    )
    answer = dispatch(
        Request("POST", "/v1/pods", {"Authorization": f"Bearer {ADMIN}"}, body.model_dump_json().encode()),
        stage.deps,
        stage.now,
    )
    if answer.status != 200:
        raise RuntimeError(f"drill setup: register answered {answer.status}: {answer.body}")


def _run(stage: Stage, pods: list[Rented], seconds: float, *, agents: bool) -> None:
    """The stage's clock, reaper and fault plan; each pod's agent ticks (or its host fakes pings) while the
    emulator still has it."""
    end = stage.now + seconds
    next_ping = {p.pod_id: stage.now for p in pods}
    while stage.now < end and any(p.gone_at is None for p in pods):
        stage.clock.advance(STEP_S)
        now = stage.now
        for pod in pods:
            if pod.gone_at is not None:
                continue
            pod.drill.looks_alive()
            if agents:
                pod.drill.agent.tick(now)
            elif now >= next_ping[pod.pod_id]:
                next_ping[pod.pod_id] = now + stage.settings.heartbeat_interval_s
                pod.drill.fake_ping(now)
        if now >= stage.next_reap:
            stage.next_reap += stage.period
            stage.reap(now)
        for pod in pods:
            if pod.gone_at is None and pod.pod_id not in emu_alive(pod.emu):
                pod.gone_at = stage.now


def _billed(pod: Rented) -> float | None:
    return None if pod.gone_at is None else (pod.gone_at - pod.started) / MIN


def _bound(stage: Stage, since: float) -> float:
    return MAX_HOURS * 60 + stage.period / MIN + stage.slack(since)


def _false_kills(pods: list[Rented], lead_s: float) -> int:
    """Ended before its deadline (less the agent's own lead, for a pod that ends itself)."""
    return sum(1 for p in pods if p.gone_at is not None and p.gone_at < p.deadline - lead_s)


def _common_problems(stage: Stage, pods: list[Rented]) -> list[str]:
    problems = []
    for pod in pods:
        if pod.gone_at is None:
            problems.append(f"{pod.name}: still billing at the end of the row")
        if pod.pod_id in emu_alive(pod.emu):
            continue
        if stage.reaper_destroys[pod.pod_id] > 1:
            problems.append(f"{pod.name}: destroyed {stage.reaper_destroys[pod.pod_id]} times")
    return problems
