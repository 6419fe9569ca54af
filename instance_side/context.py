"""Wiring: from the files `up` left on the pod to a ready agent, wrapper or sync. The only place
that picks concrete readers, probes and transports; everything else takes them as parameters."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.podpaths import CLAIM_ENV
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.ending import Ender
from gpuc.instance_side.gpu import GpuReader, NvmlReader, SimulatedReader
from gpuc.instance_side.heartbeat import PodClient
from gpuc.instance_side.jobtree import JobTreeProbe
from gpuc.instance_side.manifest import ResultsSync
from gpuc.instance_side.observe import Probes
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, load_secrets, pod_token
from gpuc.instance_side.podhttp import Transport, UrllibTransport
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.procs import ProcScanner
from gpuc.instance_side.pushrun import ProcessPusher
from gpuc.instance_side.selfdestroy import make_destroyer
from gpuc.instance_side.signer import ClaimFile, SeqCounter, Signer
from gpuc.instance_side.sshscan import SimSshProbe, SshScanner
from gpuc.instance_side.sync import make_sync, with_job_log


@dataclass
class PodContext:
    cfg: AgentConfig
    paths: PodPaths
    clock: Clock
    secrets: dict[str, str]
    log: PodLog
    client: PodClient


def load_context(
    paths: PodPaths,
    *,
    role: str,
    environ: Mapping[str, str] | None = None,
    clock: Clock | None = None,
    transport: Transport | None = None,
    echo: TextIO | None = None,
) -> PodContext:
    env = os.environ if environ is None else environ
    clock = clock or SystemClock()
    cfg = AgentConfig.load(paths.config)
    secrets = load_secrets(paths.secrets)
    token = pod_token(secrets, env)
    log = PodLog(paths.log, clock, role=role, secrets=[*secrets.values(), token], echo=echo)
    claim = ClaimFile(paths.claim, secrets.get(CLAIM_ENV))
    signer = Signer(cfg.pod_id, token, SeqCounter(paths.seq, clock), clock, claim)
    client = PodClient(
        cfg.watchdog_url,
        signer,
        transport or UrllibTransport(),
        clock,
        log,
        backoff_cap_s=cfg.heartbeat_interval_s,
    )
    return PodContext(cfg=cfg, paths=paths, clock=clock, secrets=secrets, log=log, client=client)


def make_ender(ctx: PodContext, *, sync: ResultsSync, keep_alive: bool = False, dry_run: bool = False) -> Ender:
    return Ender(
        cfg=ctx.cfg,
        paths=ctx.paths,
        sync=sync,
        client=ctx.client,
        destroyer=lambda: make_destroyer(ctx.cfg),
        clock=ctx.clock,
        log=ctx.log,
        keep_alive=keep_alive,
        dry_run=dry_run,
    )


def gpu_reader(cfg: AgentConfig, paths: PodPaths) -> GpuReader:
    if cfg.simulated_gpu:
        return SimulatedReader(paths.sim_gpu)
    try:
        import pynvml  # optional on a pod: without it the reader reports no GPU
    except ImportError:
        return NvmlReader(None)
    return NvmlReader(pynvml)


def default_probes(cfg: AgentConfig, paths: PodPaths) -> Probes:
    if cfg.provider == "local":
        # The laptop runs many python processes of its own: count only this sandbox's, and take
        # ssh sessions from the sim file (a sandbox has no sshd).
        return Probes(
            gpu=gpu_reader(cfg, paths),
            procs=ProcScanner(only_pod=cfg.pod_id),
            ssh=SimSshProbe(paths.sim_gpu),
            job=JobTreeProbe(paths.job),
        )
    # A pod in a sandbox on a shared machine (the rehearsal's emulated pods): the host's processes are not
    # its work, or a busy machine keeps a hung job's pod busy forever. Only the processes
    # started in its root count: its job's tree and its ssh sessions' commands.
    scope = paths.root if paths.root != Path("/") else None
    scanner = ProcScanner(only_root=scope)
    return Probes(gpu=gpu_reader(cfg, paths), procs=scanner, ssh=SshScanner(), job=JobTreeProbe(paths.job))


def build_agent(ctx: PodContext) -> Agent:
    sync = with_job_log(make_sync(ctx.cfg, ctx.secrets, paths=ctx.paths), ctx.paths)
    return Agent(
        ctx.cfg,
        ctx.paths,
        probes=default_probes(ctx.cfg, ctx.paths),
        client=ctx.client,
        ender=make_ender(ctx, sync=sync),
        sync=sync,
        clock=ctx.clock,
        log=ctx.log,
        pusher=ProcessPusher(ctx.paths),
    )
