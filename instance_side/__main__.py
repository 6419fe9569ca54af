"""python -m gpuc.instance_side {agent | run -- CMD | sync | push | bootstrap | verify | ask Q | boot | selfcheck}

Reads the pod's files from PodPaths.from_env() (GPUC_POD_ROOT, default "/"). argparse, not click:
the agent's memory budget has no room for what it does not use. Each command imports its own code, so
`ask`, which the laptop runs over ssh several times per command, starts without the agent's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from gpuc.core.errors import GpucError
from gpuc.instance_side.podfiles import PodPaths, flag, load_secrets

if TYPE_CHECKING:
    from gpuc.instance_side.podlog import PodLog


def cmd_agent(paths: PodPaths) -> int:
    from gpuc.instance_side.context import build_agent, load_context
    from gpuc.instance_side.podfiles import hold_agent_lock

    ctx = load_context(paths, role="agent")
    if hold_agent_lock(paths) is None:
        _say("gpuc: an agent is already running on this pod")
        return 0
    agent = build_agent(ctx)
    stop: list[int] = []

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        stop.append(signum)

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    # Started from an ssh session, the agent must outlive it.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    agent.run_forever(lambda: bool(stop))
    if stop and not agent.stopped:
        # Told to stop (the provider stopping the pod, a shutdown): the results go once more first.
        agent.push_now("the agent was told to stop")
    return 0


def cmd_run(paths: PodPaths, argv: Sequence[str], job_id: str | None = None) -> int:
    if not argv:
        raise GpucError("nothing to run", hint="python -m gpuc.instance_side run -- python train.py")
    from gpuc.instance_side.context import load_context, make_ender
    from gpuc.instance_side.joblog import echo_fd
    from gpuc.instance_side.sync import make_sync, with_job_log
    from gpuc.instance_side.wrapper import AgentGuard, JobWrapper, job_environ

    environ = os.environ
    ctx = load_context(paths, role="wrapper", echo=sys.stderr)
    secrets = {**ctx.secrets, **_job_env(paths, job_id, ctx.log)}
    dry_run = flag(environ, "DRY_RUN")
    sync = with_job_log(make_sync(ctx.cfg, ctx.secrets, paths=paths), paths)
    # A warm pod (`up --warm`) outlives its jobs, as KEEP_ALIVE does; its idle watch ends it (idle.py).
    keep_alive = flag(environ, "KEEP_ALIVE") or ctx.cfg.warm_s > 0
    ender = make_ender(ctx, sync=sync, keep_alive=keep_alive, dry_run=dry_run)
    wrapper = JobWrapper(
        ctx.cfg,
        paths,
        ender=ender,
        clock=ctx.clock,
        log=ctx.log,
        env=_with_hf_home(job_environ(environ, secrets, ctx.cfg.pod_id), paths),
        dry_run=dry_run,
        job_id=job_id,
        output_echo=echo_fd(),
        guard=None if dry_run else AgentGuard(paths, ctx.cfg, ctx.log),
    )
    return wrapper.run(argv)


def _job_env(paths: PodPaths, job_id: str | None, log: PodLog) -> dict[str, str]:
    """`gpuc run --env NAME`: this job's own variables, put there by the laptop just before it started the
    job. Removed once read: they were asked for this job, not for the pod (and never for another job)."""
    if job_id is None or not job_id.replace("-", "").isalnum():
        return {}
    path = paths.job_env / job_id
    if not path.exists():
        return {}
    try:
        values = load_secrets(path)
    finally:
        path.unlink(missing_ok=True)
    log.add_secrets(values.values())
    return values


def cmd_sync(paths: PodPaths) -> int:
    from gpuc.instance_side.context import load_context
    from gpuc.instance_side.sync import make_sync, with_job_log

    ctx = load_context(paths, role="sync", echo=sys.stderr)
    sync = with_job_log(make_sync(ctx.cfg, ctx.secrets, paths=paths), paths)
    try:
        manifest = sync.push(paths.results)
        verified = sync.verify(manifest)
    except GpucError:
        raise
    except Exception as exc:
        ctx.log.line(f"sync failed: {type(exc).__name__}: {exc}")
        return 1
    if not verified:
        ctx.log.line(f"sync NOT verified: the listing at {sync.describe()} does not match what was sent")
        return 1
    ctx.log.line(f"sync verified: {manifest.summary()}")
    return 0


def cmd_push(paths: PodPaths) -> int:
    """One incremental push at low priority (instance_side/push.py); the agent starts it when due."""
    from gpuc.instance_side.context import load_context
    from gpuc.instance_side.push import lower_priority, push_once
    from gpuc.instance_side.sync import make_sync, with_job_log

    priority = lower_priority()  # first: the scan and the uploads run at it
    ctx = load_context(paths, role="push")
    sync = with_job_log(make_sync(ctx.cfg, ctx.secrets, paths=paths), paths)
    report = push_once(sync, paths, ctx.clock, settle_s=ctx.cfg.sync_settle_s)
    if report is None:
        ctx.log.line("results push: another push is under way")
        return 0
    ctx.log.line(f"results push ({priority}): {ctx.log.scrub(report.summary())}")
    return 1 if report.error else 0


def _with_hf_home(env: dict[str, str], paths: PodPaths) -> dict[str, str]:
    # The job finds the models the bootstrap prefetched (on the volume, downloaded once).
    env.setdefault("HF_HOME", str(paths.hf_home))
    return env


def cmd_bootstrap(paths: PodPaths) -> int:
    from gpuc.core.clock import SystemClock
    from gpuc.instance_side import bootstrap

    return bootstrap.main(paths, SystemClock())


def cmd_verify(paths: PodPaths, expect_gpu: str | None, expect_count: int) -> int:
    from gpuc.core.atomicfile import atomic_write
    from gpuc.instance_side import verify

    verdict = verify.verify_machine(
        expect_gpu,
        expect_count,
        nvml=verify.import_optional("pynvml"),
        torch=verify.import_optional("torch"),
    )
    for check in verdict.checks:
        _say(f"gpuc: verify {check.name}: {check.status} - {check.detail}")
    with contextlib.suppress(OSError):
        if paths.state.is_dir():
            atomic_write(paths.verdict, verdict.dumps() + "\n", 0o644)
    print(verdict.dumps(), flush=True)
    return 0 if verdict.ok else 1


def cmd_boot(paths: PodPaths, again: bool, installed: bool) -> int:
    if again or installed:  # the second half runs with gpuc's dependencies installed
        from gpuc.instance_side import podstart

        return podstart.again(paths, os.environ) if again else podstart.start(paths, os.environ)
    from gpuc.instance_side import boot

    return boot.boot(paths, os.environ)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gpuc.instance_side", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("agent", help="heartbeats and the idle watch, for the pod's life")
    run = sub.add_parser("run", help="run a job, then sync -> notify -> destroy")
    run.add_argument("--job-id", default=None, help="the id `gpuc` gave this job (recorded in its outcome)")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sub.add_parser("sync", help="push results/ and verify the remote listing")
    sub.add_parser("push", help="send what changed in results/ since the last verified push (low priority)")
    sub.add_parser("bootstrap", help="make the pod ready (idempotent steps, timed into a CSV)")
    verify = sub.add_parser("verify", help="is this the machine we pay for? prints a JSON verdict")
    verify.add_argument("--expect-gpu", default=None, help="the rented GPU type, e.g. 'RTX 4090'")
    verify.add_argument("--expect-count", type=int, default=1, help="how many GPUs were rented")
    boot = sub.add_parser(
        "boot", help="a pod starts itself from its boot kit (the onstart runs it; --again: a restart)"
    )
    boot.add_argument("--again", action="store_true", help="a container restart: the agent and the job again")
    boot.add_argument("--installed", action="store_true", help=argparse.SUPPRESS)  # the boot's second half
    # Parsed by instance_side/ask.py itself, so a wrong question gets a JSON answer too (exit 2).
    check = sub.add_parser("selfcheck", help="can this pod run gpuc? python, every module, the wire schema, NVML")
    check.add_argument("--json", action="store_true", help="one JSON line")
    ask = sub.add_parser("ask", help="one JSON line for the laptop: job-state, log, unpack, missing, key-scope")
    ask.add_argument("question", nargs=argparse.REMAINDER, help="QUESTION ARGS...")
    args = parser.parse_args(argv)
    cmd = list(getattr(args, "cmd", None) or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    args.cmd = cmd
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["ask"]:
        from gpuc.instance_side import ask

        return ask.main(argv[1:])
    args = parse(argv)
    command = str(args.command)
    paths = PodPaths.from_env()
    try:
        if command == "agent":
            return cmd_agent(paths)
        if command == "run":
            return cmd_run(paths, args.cmd, getattr(args, "job_id", None))
        if command == "bootstrap":
            return cmd_bootstrap(paths)
        if command == "verify":
            return cmd_verify(paths, args.expect_gpu, args.expect_count)
        if command == "push":
            return cmd_push(paths)
        if command == "boot":
            return cmd_boot(paths, args.again, args.installed)
        if command == "selfcheck":
            from gpuc.instance_side import selfcheck

            return selfcheck.main(args.json)
        return cmd_sync(paths)
    except GpucError as exc:
        _say(f"gpuc: error: {exc}")
        return exc.exit_code


def _say(text: str) -> None:
    try:
        print(text, file=sys.stderr)
    except (OSError, ValueError):
        return


def _silence_dead_streams() -> None:
    """A dropped ssh leaves stdout/stderr dead: the interpreter's final flush must not turn the
    job's exit code into 120."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)


if __name__ == "__main__":
    code = main()
    _silence_dead_streams()
    sys.exit(code)
