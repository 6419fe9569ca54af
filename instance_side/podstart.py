"""The steps of a pod's own start (instance_side/boot.py says when each runs), on the pod's files as `up`
leaves them: every process is started as `up` starts it over ssh (instance_side/wrapper.py spawn_detached,
through the install's launcher), every step said in the pod's log and in boot.out, secrets masked."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuc.core.bootkit import BOOT_FILE
from gpuc.core.errors import GpucError
from gpuc.instance_side.boot import (
    BOOTSTRAP_TIMEOUT_S,
    NOTIFY_BUDGET_S,
    VERIFY_TIMEOUT_S,
    BootError,
    BootPlan,
    child_environ,
    fetch,
    reason,
    run_logged,
    say,
)
from gpuc.instance_side.context import load_context, make_ender
from gpuc.instance_side.ending import Ending
from gpuc.instance_side.heartbeat import event_body
from gpuc.instance_side.joblog import read_outcome
from gpuc.instance_side.podfiles import PodPaths, atomic_write, flag, is_ended
from gpuc.instance_side.procs import JobScanError, job_alive, read_job_stamp
from gpuc.instance_side.resume import RestoreError, restore
from gpuc.instance_side.sync import make_sync, run_objects, with_job_log
from gpuc.instance_side.wrapper import RESUME_FAILED, agent_alive, record_command, spawn_detached


def start(paths: PodPaths, environ: Mapping[str, str]) -> int:
    """`boot --installed`: everything after the install, with gpuc's dependencies."""
    try:
        return _first(paths, Starter(paths, child_environ(environ, paths)))
    except (GpucError, OSError) as exc:
        (paths.state / BOOT_FILE).unlink(missing_ok=True)
        say(f"boot failed: {reason(exc)}")
        return 1


def again(paths: PodPaths, environ: Mapping[str, str]) -> int:
    """`boot --again`: a container start on a pod set up before. A first boot the restart cut short (boot.json
    still there, no job started yet: killed during a long bootstrap) is done again; a bootstrap skips its steps
    already done, and results/ holds only what the restore put there."""
    try:
        starter = Starter(paths, child_environ(environ, paths))
        if (paths.state / BOOT_FILE).exists() and not paths.job_command.exists():
            starter.say("the first boot was cut short by a restart: doing it again")
            return _first(paths, starter)
        (paths.state / BOOT_FILE).unlink(missing_ok=True)
        return starter.again()
    except (GpucError, OSError) as exc:
        say(f"restart failed: {reason(exc)}")
        return 1


def _first(paths: PodPaths, starter: Starter) -> int:
    """boot.json goes once the boot has run its course, whatever came of it (its secrets are in secrets.env);
    a boot killed on the way leaves it for the next container start."""
    boot_file = paths.state / BOOT_FILE
    code = starter.first(BootPlan.load(boot_file))
    boot_file.unlink(missing_ok=True)
    return code


class Starter:
    def __init__(self, paths: PodPaths, env: Mapping[str, str]) -> None:
        self.paths = paths
        self.env = dict(env)
        self.ctx = load_context(paths, role="boot", environ=self.env, echo=sys.stdout)
        self.python = str(paths.python)

    def say(self, text: str) -> None:
        self.ctx.log.line(text)

    def tell(self, text: str) -> None:
        """The pod's event to the watchdog (and the phone): why this pod is not doing what it was rented for."""
        event = event_body(self.ctx.cfg.pod_id, "info", self.ctx.log.scrub(text))
        if not self.ctx.client.deliver(event, NOTIFY_BUDGET_S):
            self.say("the event was not delivered; the agent's heartbeats go on")

    # -- a re-rented pod's first start ------------------------------------------------------------------
    def first(self, plan: BootPlan) -> int:
        self.start_agent()
        if plan.project_url and plan.project_sha256:
            try:
                self.unpack_project(plan.project_url, plan.project_sha256)
            except BootError as exc:
                self.say(f"the project could not be put in place: {exc.message}; the job is not started")
                self.tell(f"boot: the project could not be put in place ({exc.message}): the job was not started")
                return 1
        if plan.bootstrap is not None:
            self.bootstrap(plan.bootstrap)
        if not self.verified():
            return 1
        if plan.resume_from and not self.restored(plan.resume_from):
            return RESUME_FAILED  # as the wrapper says it: the last push could not be restored
        if plan.command:
            self.start_job(plan.command, plan.job_id)
        else:
            self.say("the kit names no job: the pod waits for one (its idle watch applies)")
        return 0

    def start_agent(self) -> None:
        if agent_alive(self.paths) is True:
            self.say("the agent already runs")
            return
        pid = spawn_detached(self.paths, [self.python, "-m", "gpuc.instance_side", "agent"], "agent", self.env)
        if pid is None:
            raise BootError("the agent could not be started")
        self.say(f"agent started, pid {pid}")

    def unpack_project(self, url: str, sha256: str) -> None:
        """Into the upload folder as `up` sends it, then unpacked by the same code as `ask unpack`."""
        from gpuc.instance_side.ask import AskError, unpack

        data = fetch(url, sha256)
        self.paths.upload.mkdir(parents=True, exist_ok=True)
        for old in self.paths.upload.glob("part-*"):
            old.unlink()
        with open(self.paths.upload / "part-00000", "wb") as out:
            out.write(data)
        try:
            answer = unpack(self.paths, [sha256])
        except AskError as exc:
            raise BootError(str(exc)) from None
        self.say(f"project unpacked: {answer.get('files')} files in {self.paths.workspace}")

    def bootstrap(self, plan: dict[str, Any]) -> None:
        """As `up` runs it: a failed step leaves a working pod, watched by its agent; the job starts anyway."""
        atomic_write(self.paths.bootstrap_plan, json.dumps(plan, indent=2) + "\n", 0o600)
        argv = [self.python, "-m", "gpuc.instance_side", "bootstrap"]
        code, _ = run_logged(argv, self.env, BOOTSTRAP_TIMEOUT_S, self.ctx.log.scrub)
        self.say("bootstrap done" if code == 0 else f"bootstrap incomplete (exit {code}); going on")

    def verified(self) -> bool:
        """Is this the machine the run pays for? If not, the pod ends itself as every pod ends: sync -> notify
        (verify_failed) -> destroy."""
        from gpuc.instance_side.verify import parse_verdict

        argv = [self.python, "-m", "gpuc.instance_side", "verify", "--expect-count", str(self.ctx.cfg.gpu_count)]
        if self.ctx.cfg.gpu_expected:
            argv += ["--expect-gpu", self.ctx.cfg.gpu_expected]
        code, out = run_logged(argv, self.env, VERIFY_TIMEOUT_S, self.ctx.log.scrub)
        verdict = parse_verdict(out)
        if verdict is not None and verdict.get("ok") is True:
            return True
        checks = verdict.get("checks", []) if verdict is not None else []
        reasons = [str(c.get("detail")) for c in checks if isinstance(c, dict) and c.get("status") == "fail"]
        why = "; ".join(reasons) or f"no verdict (exit {code})"
        sync = with_job_log(make_sync(self.ctx.cfg, self.ctx.secrets, paths=self.paths), self.paths)
        ending = Ending(kind="verify_failed", message=f"verification failed: {why}; the job was not started")
        self.say(ending.message)
        # KEEP_ALIVE=1 keeps it as it keeps a pod after its job (debugging); `up --warm` does not: a bad machine.
        outcome = make_ender(self.ctx, sync=sync, keep_alive=flag(self.env, "KEEP_ALIVE")).end(ending)
        self.say(f"pod end: {outcome}")
        return False

    def restored(self, resume_from: str) -> bool:
        """The last push into results/ BEFORE the job starts. A restore that fails starts no job: it would start
        over and bill hours to redo the work. The agent keeps watching (its idle watch ends the pod)."""
        try:
            sync = make_sync(self.ctx.cfg, self.ctx.secrets, paths=self.paths)
            names = restore(resume_from, self.paths.results, objects=run_objects(sync), paths=self.paths)
        except (RestoreError, OSError) as exc:
            why = self.ctx.log.scrub(str(exc) or type(exc).__name__)
            self.say(f"could not restore the last push into results/: {why}; the job is not started (exit 75)")
            self.tell(
                f"recovered attempt: the last push could not be restored ({why}); the job was not started, so it "
                "does not start over. The pushed results are untouched; the idle watch ends this pod"
            )
            return False
        self.say(f"restored {len(names)} files of the last push into results/")
        return True

    def start_job(self, command: Sequence[str], job_id: str | None) -> None:
        """As `up` starts it (client/pods/run.py start_job): the wrapper, detached, role "job"."""
        record_command(self.paths, command, job_id)  # before: a restart in between still finds it
        named = ["--job-id", job_id] if job_id else []
        argv = [self.python, "-m", "gpuc.instance_side", "run", *named, "--", *command]
        pid = spawn_detached(self.paths, argv, "job", self.env)
        if pid is None:
            raise BootError("the job could not be started")
        self.say(f"job started under the wrapper, pid {pid}" + (f" (job {job_id})" if job_id else ""))

    # -- every later container start ----------------------------------------------------------------------
    def again(self) -> int:
        """A paused pod resumed (processes killed, disk kept): the agent, and the job where it was."""
        self.start_agent()
        record = read_command(self.paths)
        if record is None:
            self.say("no job was started on this pod: only the agent")
            return 0
        command, job_id = record
        why_not = self.why_not_again(job_id)
        if why_not:
            self.say(f"the job is not started again: {why_not}")
            return 0
        self.start_job(command, job_id)
        return 0

    def why_not_again(self, job_id: str | None) -> str | None:
        paths = self.paths
        if is_ended(paths, self.ctx.cfg.pod_id):
            return "the pod ended"
        outcome = read_outcome(paths)
        ended = outcome is not None and outcome.get("job_id") == job_id and outcome.get("exit_code") is not None
        if ended or paths.exit_code.exists():
            return "it had ended"
        try:
            stamp = read_job_stamp(paths.job)
        except JobScanError:
            return "its pid file cannot be read (a job may be running: never a second one)"
        if stamp is not None and job_alive(*stamp) and not _zombie(stamp[0]):
            return f"it still runs (pid {stamp[0]})"
        return None


def _zombie(pid: int) -> bool:
    """A killed job its killed parent left unreaped is not running: it must not keep the job from starting again
    (a container whose processes were killed is not always a fresh pid namespace)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def read_command(paths: PodPaths) -> tuple[list[str], str | None] | None:
    """What the wrapper last ran (wrapper.py record_command); None when none was recorded or it is unreadable."""
    try:
        data = json.loads(paths.job_command.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    argv, job_id = data.get("argv"), data.get("job_id")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        return None
    return argv, job_id if isinstance(job_id, str) else None
