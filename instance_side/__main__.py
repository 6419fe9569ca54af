"""python -m gpuc.instance_side {agent | run -- CMD ... | sync}

Reads the pod's files from PodPaths.from_env() (GPUC_POD_ROOT, default "/"). argparse, not click:
the agent's memory budget has no room for what it does not use.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from types import FrameType

from gpuc.core.errors import GpucError
from gpuc.instance_side.context import build_agent, load_context, make_ender
from gpuc.instance_side.podfiles import PodPaths, hold_agent_lock
from gpuc.instance_side.sync import make_sync
from gpuc.instance_side.wrapper import JobWrapper, job_environ

_TRUE = ("1", "true", "yes", "on")


def flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() in _TRUE


def cmd_agent(paths: PodPaths) -> int:
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
    return 0


def cmd_run(paths: PodPaths, argv: Sequence[str]) -> int:
    if not argv:
        raise GpucError("nothing to run", hint="python -m gpuc.instance_side run -- python train.py")
    environ = os.environ
    ctx = load_context(paths, role="wrapper", echo=sys.stderr)
    dry_run = flag(environ, "DRY_RUN")
    sync = make_sync(ctx.cfg, ctx.secrets, paths=paths)
    ender = make_ender(ctx, sync=sync, keep_alive=flag(environ, "KEEP_ALIVE"), dry_run=dry_run)
    wrapper = JobWrapper(
        ctx.cfg,
        paths,
        ender=ender,
        clock=ctx.clock,
        log=ctx.log,
        env=job_environ(environ, ctx.secrets, ctx.cfg.pod_id),
        dry_run=dry_run,
    )
    return wrapper.run(argv)


def cmd_sync(paths: PodPaths) -> int:
    ctx = load_context(paths, role="sync", echo=sys.stderr)
    sync = make_sync(ctx.cfg, ctx.secrets, paths=paths)
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


def parse(argv: Sequence[str]) -> tuple[str, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m gpuc.instance_side", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("agent", help="heartbeats and the idle watch, for the pod's life")
    run = sub.add_parser("run", help="run a job, then sync -> notify -> destroy")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    sub.add_parser("sync", help="push results/ and verify the remote listing")
    args = parser.parse_args(argv)
    cmd = list(getattr(args, "cmd", None) or [])
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    return str(args.command), cmd


def main(argv: Sequence[str] | None = None) -> int:
    command, cmd = parse(sys.argv[1:] if argv is None else argv)
    paths = PodPaths.from_env()
    try:
        if command == "agent":
            return cmd_agent(paths)
        if command == "run":
            return cmd_run(paths, cmd)
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
