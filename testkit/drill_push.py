"""Drill rows F26a and F26f: results leave the pod while the job runs, and keep leaving when the agent dies.

F26a: the agent is killed mid-job (the OOM killer). The job wrapper's real AgentGuard sees agent.lock free
and starts a new agent, which carries on from the state its predecessor left (agent.py): the pod is kept,
heartbeats resume, pushes go on, the job's own end syncs everything. 0 false kills, 0 results lost.

F26f: the pod freezes mid-job (agent and job stop, the provider still lists it): the real reaper destroys
it for silence. What is lost is only what the job wrote after the last push (at most one push interval),
the pushes sent only what had changed, and the destroy notification says when results were last pushed.

Both use the real agent, the real incremental push (instance_side/push.py) to the drill's file:// bucket,
and the real reaper; the job is the drill's: a checkpoint a minute and a metrics file rewritten each time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from gpuc.core.clock import Clock
from gpuc.instance_side.agent import Agent, Probes
from gpuc.instance_side.push import MANIFEST_NAME, InlinePusher
from gpuc.instance_side.sync import FileBucketSync, Manifest
from gpuc.instance_side.wrapper import AgentGuard
from gpuc.testkit.drill_stage import EXPERIMENT, MIN, STEP_S, DrillPod, RowResult, Stage

CKPT_EVERY_S = MIN


class Outbid(BaseException):
    """The pod's processes killed (an outbid): nothing of the push runs after it, not even an `except Exception`."""


class CutBucket(FileBucketSync):
    """The real file:// destination, its pod killed as it starts writing its `cut_at`-th file (None: never)."""

    def __init__(self, bucket: Path, experiment: str = "exp", run_id: str = "run01", *, cut_at: int | None = None):
        super().__init__(bucket, experiment, run_id)
        self.cut_at = cut_at
        self.copies = 0

    def _copy(self, source: Path, key: str) -> None:
        self.copies += 1
        if self.copies == self.cut_at:
            raise Outbid
        super()._copy(source, key)


class CountingBucket(FileBucketSync):
    """The drill's real file:// destination, counting what each push hands it (what crosses the network)."""

    def __init__(self, bucket: Path, experiment: str, run_id: str) -> None:
        super().__init__(bucket, experiment, run_id)
        self.pushes: list[list[str]] = []

    def push_files(self, results_dir: Path, files: Mapping[str, int]) -> Manifest:
        if results_dir.name == "results":  # the job's files, not the log or the manifest beside them
            self.pushes.append(sorted(n for n in files if n != MANIFEST_NAME))
        return super().push_files(results_dir, files)


def pushing(pod: DrillPod) -> CountingBucket:
    """The pod's agent pushes through the real incremental push, to its real bucket, counted."""
    dest = CountingBucket(pod.bucket_dir.parent.parent, EXPERIMENT, pod.pod_id)
    pod.agent.pusher = InlinePusher(dest, pod.paths, pod.clock)
    return dest


class Job:
    """The drill's training job: a new checkpoint every minute, metrics.json rewritten with it. Files are
    stamped with the drill's (virtual) time, as a real job's are with the real time."""

    def __init__(self, pod: DrillPod, clock: Clock) -> None:
        self.pod = pod
        self.clock = clock
        self.written: dict[str, float] = {}  # name -> when last written
        self.next_at = clock.now()
        self.step = 0

    def advance(self) -> None:
        while self.clock.now() >= self.next_at:
            self.step += 1
            self._write(f"ckpt/step{self.step:03d}.pt", bytes([self.step % 251]) * (4096 + self.step))
            self._write("metrics.json", f'{{"step": {self.step:06d}}}\n'.encode())
            self.next_at += CKPT_EVERY_S

    def _write(self, name: str, data: bytes) -> None:
        path = self.pod.paths.results / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        at = int(self.clock.now() * 1e9)
        os.utime(path, ns=(at, at))
        self.written[name] = self.clock.now()


def restart_agent(pod: DrillPod) -> int:
    """What `python -m gpuc.instance_side agent` does on the pod: a new agent, carrying on (Agent.start)."""
    pusher = pod.agent.pusher
    pod.agent = Agent(
        pod.ctx.cfg,
        pod.paths,
        probes=Probes(gpu=pod.gpu, procs=pod.procs, ssh=pod.ssh, job=pod.job),
        client=pod.ctx.client,
        ender=pod.ender,
        sync=pod.sync,
        clock=pod.clock,
        log=pod.ctx.log,
        pusher=pusher,
    )
    pod.agent.start()
    pod.alive_agent = True
    return 4242


def train(stage: Stage, job: Job, seconds: float, guard: AgentGuard | None = None) -> None:
    end = stage.now + seconds
    while stage.now < end:
        job.advance()
        stage.run(STEP_S)
        if guard is not None:
            guard.check(stage.now)


def f26a_agent_killed_job_running(stage: Stage) -> RowResult:
    pod_id = "f26a-pod"
    pod = stage.launch(pod_id)
    pod.job.start(worker="python", cpu_per_s=1.0, io_per_s=100_000.0)  # under the wrapper: job.pid
    # A CPU job (tokenizing, a data pass): the provider sees no busy GPU, so nothing outside the pod vetoes
    # a silence kill; only the agent's heartbeats keep it.
    stage.provider.set(pod_id, gpu_util_pct=0.0)
    dest = pushing(pod)
    job = Job(pod, stage.clock)
    guard = AgentGuard(
        pod.paths,
        pod.ctx.cfg,
        pod.ctx.log,
        alive=lambda _paths: pod.alive_agent,
        start=lambda _paths: restart_agent(pod),
    )
    train(stage, job, 12 * MIN, guard)
    killed_at = stage.now
    pod.alive_agent = False  # SIGKILL: no more ticks, no more heartbeats, its memory gone
    restarted_at = None
    while stage.now < killed_at + 30 * MIN:
        train(stage, job, STEP_S, guard)
        if restarted_at is None and pod.alive_agent:
            restarted_at = stage.now
    problems: list[str] = []
    alive = stage.provider.alive(pod_id)
    if restarted_at is None:
        problems.append("the agent was never restarted")
    elif restarted_at - killed_at > MIN:
        problems.append(f"the agent was restarted {restarted_at - killed_at:.0f} s after it died, not within a minute")
    if alive and len(dest.pushes) < 4:
        problems.append(f"pushes did not go on after the restart ({len(dest.pushes)} in 42 min)")
    false_kills = 0
    if alive:
        outcome = pod.job_exit(0, stage.now - killed_at + 12 * MIN)  # the job's own end: the final sync, the gate
        if outcome != "destroyed":
            problems.append(f"the job's end ended with {outcome}")
    else:
        false_kills = 1  # destroyed with its job running: what this row exists to prevent
    when = "never" if restarted_at is None else f"{restarted_at - killed_at:.0f} s"
    return RowResult(
        "F26a",
        "agent killed (OOM), job running",
        "wrapper restarts the agent",
        None,
        None,
        f"restarted in {when}, the pod kept, its state carried; 0 results lost",
        false_kills=false_kills,
        results_lost=pod.results_lost(),
        notifications=stage.notifications(pod_id),
        problems=problems,
    )


def f26f_pod_frozen_mid_job(stage: Stage) -> RowResult:
    pod_id = "f26f-pod"
    pod = stage.launch(pod_id)
    pod.busy()
    pod.job.start(worker="python", cpu_per_s=1.0, io_per_s=100_000.0)  # under the wrapper: job.pid
    dest = pushing(pod)
    job = Job(pod, stage.clock)
    interval = pod.ctx.cfg.sync_interval_s
    train(stage, job, 35 * MIN)  # three pushes in, then the freeze
    frozen_at = stage.now
    pod.alive_agent = False  # frozen: nothing on the pod runs, the job writes nothing more
    pod.idle()
    stage.run_until_gone(pod_id)
    problems = _only_changes_sent(dest)
    lost = sorted(n for n in job.written if not _kept(pod, n))
    beyond = [n for n in lost if job.written[n] < frozen_at - interval]
    if beyond:
        problems.append(f"{len(beyond)} files written more than one push interval before the freeze were lost")
    said = [m for m in stage.messages(pod_id) if "destroyed by the watchdog" in m or "Confirmed gone" in m]
    if not stage.plan.on and not any("Results pushed" in m and "still running" in m for m in said):
        problems.append("the destroy notification does not say when results were last pushed")
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, frozen_at)
    return RowResult(
        "F26f",
        "pod frozen mid-job",
        "reaper (heartbeat silence)",
        stage.billed_min(pod_id, frozen_at),
        bound,
        f"silence + period + grace; {len(lost)} files written in the last {interval / MIN:.0f} min went with it "
        f"(<= one push interval); {sum(len(p) for p in dest.pushes)} files sent in {len(dest.pushes)} pushes",
        results_lost=len(beyond),
        notifications=stage.notifications(pod_id),
        problems=problems,
    )


def _kept(pod: DrillPod, name: str) -> bool:
    """The bucket holds what the job last wrote to `name` (the pod's disk is gone with it at a real provider;
    the drill's copy of it says what it held)."""
    there = pod.bucket_dir / name
    return there.is_file() and there.read_bytes() == (pod.paths.results / name).read_bytes()


def _only_changes_sent(dest: CountingBucket) -> list[str]:
    """Each push after the first sent only what the job wrote since the push before: never a file twice
    unless it was written again (metrics.json is, every minute)."""
    seen: set[str] = set()
    for names in dest.pushes:
        again = [n for n in names if n in seen and n != "metrics.json"]
        if again:
            return [f"a push sent {len(again)} unchanged files again ({again[0]}...)"]
        seen.update(names)
    if not dest.pushes:
        return ["no periodic push ran"]
    return []
