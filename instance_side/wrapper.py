"""The job wrapper (layer 1 of docs/money.md): run the job; on ANY exit record the exit code first, then
sync -> notify -> destroy through the Ender.

Signals: SIGTERM, SIGINT and SIGHUP are caught while the job runs and passed on to it, so the
wrapper itself outlives them and still ends the pod. After the first SIGHUP (a dropped ssh) further
ones are ignored. When the wrapper runs in the foreground of a terminal, the terminal already
delivers SIGINT and SIGHUP to the job (same process group): passing them on again would hit the job
twice and could cut short its own clean-up, so only signals sent to the wrapper alone are forwarded.
The job stays in the wrapper's process group so that whatever stops the pod stops both.

Output: the job's stdout and stderr go through a pipe into `.gpuc/job.log` (joblog.JobLogTee), so they
are kept when the laptop goes away, synced beside results/ and shown by `gpuc logs`. The exit code is
recorded first, then the outcome (`.gpuc/outcome.json`: exit code, duration, the job id `gpuc` gave it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from gpuc.core.clock import Clock
from gpuc.core.podinstall import image_environ
from gpuc.core.podpaths import RESUME_ENV
from gpuc.core.podsecrets import never_on_pod
from gpuc.instance_side.ending import Ender, Ending
from gpuc.instance_side.joblog import KEPT_ENDINGS, JobLogTee, clear_outcome, job_files, last_line, write_outcome
from gpuc.instance_side.joblogsync import run_objects
from gpuc.instance_side.jobtree import job_stamp
from gpuc.instance_side.kept import ENDS_THE_WATCH
from gpuc.instance_side.keptwatch import KeptWatch
from gpuc.instance_side.podfiles import (
    POD_ID_ENV,
    AgentConfig,
    PodPaths,
    atomic_write,
    ending_under_way,
    is_ended,
)
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.resume import RestoreError, restore

_CAUGHT = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_FROM_TERMINAL = (signal.SIGINT, signal.SIGHUP)
NOT_FOUND_EXIT = 127
RESUME_FAILED = 75  # EX_TEMPFAIL: the recovered attempt could not restore the last push


def exit_status(returncode: int) -> int:
    """Shell convention: killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def terminal_delivers_to_job() -> bool:
    """True when we are the foreground process group of our terminal (the job shares the group)."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            return os.tcgetpgrp(fd) == os.getpgrp()
    return False


class SignalRelay:
    def __init__(self, log: PodLog, *, terminal_delivers: bool) -> None:
        self.log = log
        self.terminal_delivers = terminal_delivers
        self.proc: subprocess.Popen[bytes] | None = None
        self.received: list[int] = []  # while the job ran
        self.after_exit: list[int] = []  # during the ending and the reminders
        self.hup_seen = False
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for sig in _CAUGHT:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._previous.clear()

    @property
    def stop_requested(self) -> bool:
        """Ctrl-C or SIGTERM after the job ended: stop the reminders (the ending itself always completes)."""
        return any(s in (signal.SIGTERM, signal.SIGINT) for s in self.after_exit)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            if self.hup_seen:
                return
            self.hup_seen = True
        proc = self.proc
        if proc is None or proc.returncode is not None:
            self.after_exit.append(signum)
            return  # the job is over: the ending runs to completion regardless
        self.received.append(signum)
        if self.terminal_delivers and signum in _FROM_TERMINAL:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)


def job_environ(base: Mapping[str, str], secrets: Mapping[str, str], pod_id: str) -> dict[str, str]:
    """The job gets the user's secrets the laptop let through (core.podsecrets: HF_TOKEN, the results
    keys, what GPUC_POD_SECRETS names) and the pod's environment, never what must not reach a pod (an
    account key, the admin token, the notification channels, the deploy keys) nor the pod's heartbeat
    token, from either. The process environment wins over the file, as it does on the laptop."""
    # The image's PYTHONPATH: gpuc's site (its pynvml) never shadows what the job imports.
    env = image_environ(never_on_pod({**secrets, **base}))
    env[POD_ID_ENV] = pod_id  # the local sandbox counts a pod's python processes by this
    # Its output goes to a pipe (the log), where python would buffer it by the 8 KB block: a live view
    # (`gpuc logs -f`, `--wait`) would lag, and a killed job would lose its last lines.
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def agent_alive(paths: PodPaths) -> bool | None:
    """Whether an agent holds agent.lock (it does for its whole life: podfiles.hold_agent_lock). None: no
    agent ever ran on this pod (there is nothing to restart), or the lock cannot be probed."""
    try:
        fd = os.open(paths.agent_lock, os.O_RDWR)
    except FileNotFoundError:
        return None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing releases the probe's own lock, if it got it
    return False


def start_agent(paths: PodPaths) -> int | None:
    """`python -m gpuc.instance_side agent`, detached in a session of its own (as `up` starts it): it
    outlives this wrapper, and a kill of the dead agent's process group does not reach it."""
    return spawn_detached(paths, [sys.executable, "-m", "gpuc.instance_side", "agent"], "agent")


def spawn_detached(paths: PodPaths, argv: Sequence[str], role: str, env: Mapping[str, str] | None = None) -> int | None:
    """Start `argv` as `up` starts the agent and the job over ssh (client/onpod/ssh.py SshAccess.start): in a
    session of its own, in the workspace, its output appended to `<state>/<role>.out`, its pid written to
    `<state>/<role>.pid`. None when it could not be started."""
    cwd = paths.workspace if paths.workspace.is_dir() else None
    try:
        with (paths.state / f"{role}.out").open("ab") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=cwd,
                env=None if env is None else dict(env),
            )
    except OSError:
        return None
    with contextlib.suppress(OSError):
        atomic_write(paths.state / f"{role}.pid", f"{proc.pid}\n", 0o644)
    return proc.pid


def record_command(paths: PodPaths, argv: Sequence[str], job_id: str | None) -> None:
    """What runs, for a container restart to run it again (instance_side/boot.py --again). Mode 600: a
    command line may name things its owner would not show."""
    with contextlib.suppress(OSError):
        atomic_write(paths.job_command, json.dumps({"argv": list(argv), "job_id": job_id}) + "\n", 0o600)


class AgentGuard:
    """The wrapper keeps the pod's agent alive while the job runs. The agent is what heartbeats
    and pushes results; when it dies (the OOM killer picks it, a stray kill) the watchdog hears silence and
    destroys the pod with the job still running. So every `every_s` the wrapper looks at agent.lock, and an
    agent that is gone is started again; it carries on from the state its predecessor left on disk (the
    idle window, the deadline, the lease, the push schedule: agent.py; the seq: heartbeat.py).

    Why the wrapper and not a supervisor of its own: the wrapper is already there exactly while a job is at
    stake, in a session of its own (a kill of the agent's process group, which is how a supervisor beside
    the agent would die with it, does not reach it), and it costs no process more. Only a dead agent is
    started: never a second one (the lock says), never on a pod that ended or is ending."""

    def __init__(
        self,
        paths: PodPaths,
        cfg: AgentConfig,
        log: PodLog,
        *,
        every_s: float | None = None,
        alive: Callable[[PodPaths], bool | None] = agent_alive,
        start: Callable[[PodPaths], int | None] = start_agent,
    ) -> None:
        self.paths = paths
        self.cfg = cfg
        self.log = log
        # Within a minute, and well inside the watchdog's silence window (several heartbeat intervals).
        self.every_s = every_s if every_s is not None else max(1.0, min(15.0, cfg.heartbeat_interval_s / 4))
        self.alive = alive
        self.start_agent = start
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wait_until = 0.0  # after a restart: give the new agent time to take its lock

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="agent-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.check()
            except Exception as exc:  # the guard must never take the wrapper (and its ending) down
                self.log.line(f"agent guard: {type(exc).__name__}: {self.log.scrub(str(exc))}")

    def check(self, now: float | None = None) -> bool:
        """One look; True when it started an agent."""
        now = time.monotonic() if now is None else now
        if now < self._wait_until or self.alive(self.paths) is not False:
            return False
        try:
            if is_ended(self.paths, self.cfg.pod_id) or ending_under_way(self.paths):
                return False
        except OSError:
            return False
        pid = self.start_agent(self.paths)
        if pid is None:
            self.log.line("the pod's agent is not running and could not be restarted; the next look tries again")
            return False
        self.restarts += 1
        # A crash loop (an agent that dies at start) is retried ever less often, never given up on.
        self._wait_until = now + min(300.0, 10.0 * 2 ** min(self.restarts - 1, 5))
        self.log.line(f"the pod's agent was not running (killed? out of memory?): restarted it, pid {pid}")
        return True


class JobWrapper:
    def __init__(
        self,
        cfg: AgentConfig,
        paths: PodPaths,
        *,
        ender: Ender,
        clock: Clock,
        log: PodLog,
        env: Mapping[str, str],
        dry_run: bool = False,
        terminal_delivers: bool | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        job_id: str | None = None,
        output_echo: int | None = None,
        guard: AgentGuard | None = None,
    ) -> None:
        self.cfg = cfg
        self.paths = paths
        self.ender = ender
        self.clock = clock
        self.log = log
        self.env = env
        self.dry_run = dry_run
        self.relay = SignalRelay(
            log,
            terminal_delivers=terminal_delivers_to_job() if terminal_delivers is None else terminal_delivers,
        )
        self.should_stop = should_stop
        self.job_id = job_id
        self.output_echo = output_echo  # joblog.echo_fd() from the CLI: where the job's output is also shown
        self.log_truncated = False
        self.job_record: dict[str, object] = {}
        self.exited_at: float | None = None
        self.guard = guard  # restarts a dead agent while the job runs

    def run(self, argv: Sequence[str]) -> int:
        self.relay.install()
        try:
            if not self.dry_run:
                clear_outcome(self.paths)
                record_command(self.paths, argv, self.job_id)
            started = self.clock.now()
            self.job_record = {
                "job_id": self.job_id,
                "pod_id": self.cfg.pod_id,
                "run_id": self.cfg.run_id,
                "experiment": self.cfg.experiment,
                "started_at": started,
                "exit_code": None,
            }
            self.exited_at = None
            code = self._run_job(argv)
            # The job's own end, not the wait for a daemon it left holding its output.
            ended = self.exited_at if self.exited_at is not None else self.clock.now()
            duration = max(0.0, ended - started)
            self._record(code)
            outcome = {
                **self.job_record,
                "exit_code": code,
                "ended_at": ended,
                "duration_s": round(duration, 3),
                "log_truncated": self.log_truncated,
            }
            if not self.dry_run:
                write_outcome(self.paths, outcome)
            said = f"job exited with code {code} after {duration:.0f}s"
            if code != 0 and (last := last_line(self.paths.job_log)) is not None:
                said += f"; last line: {last}"  # what a FAILED job's push shows first
            ending = Ending(
                kind="job_exit",
                message=said,
                exit_code=code,
                duration_s=round(duration, 3),
            )
            result = self.ender.end(ending)
            if not self.dry_run and result in KEPT_ENDINGS:
                # What the laptop, still waiting, reads on the pod: why it is still there. (Being ended by
                # another process, the pod goes away soon: the laptop waits for that.)
                write_outcome(self.paths, {**outcome, "ending": result})
            if result == "kept_sync_failed":
                self._nag()
            return code
        finally:
            self.relay.restore()

    def _run_job(self, argv: Sequence[str]) -> int:
        if not self.dry_run and not self._resume():
            return RESUME_FAILED
        self.log.line(f"starting job in {self.paths.workspace}")
        own = job_files(self.paths, self.job_id)
        tee = JobLogTee(self.paths.job_log, echo=self.output_echo, keep_as=None if own is None else own[0])
        if not self.dry_run:
            tee.open()
            # Running, under this id: a laptop waiting for this job reads its log only from now on (the
            # log of a job before it, on a kept pod, is not this one's).
            write_outcome(self.paths, self.job_record)
        try:
            proc = subprocess.Popen(
                list(argv),
                cwd=self.paths.workspace,
                env=dict(self.env),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            # A job that cannot start has ended too: the pod must not sit there billing.
            reason = f"job could not start: {exc.strerror or exc}"
            self.log.line(reason)
            tee.note(f"gpuc: {self.log.scrub(reason)}\n")
            tee.finish(0)
            return NOT_FOUND_EXIT
        assert proc.stdout is not None
        tee.start(proc.stdout)
        self.relay.proc = proc
        self._write_job_pid(proc.pid)
        if self.guard is not None:
            self.guard.start()
        try:
            returncode = proc.wait()
            self.exited_at = self.clock.now()
        finally:
            if self.guard is not None:
                self.guard.stop()
            with contextlib.suppress(OSError):
                self.paths.job.unlink()
            if not tee.finish():
                self.log.line("the job exited but a process it started still holds its output; going on")
            self.log_truncated = tee.truncated
        if self.relay.received:
            names = ", ".join(signal.Signals(s).name for s in self.relay.received)
            self.log.line(f"wrapper received {names} while the job ran")
        return exit_status(returncode)

    def _resume(self) -> bool:
        """A recovered attempt: the last push into results/ BEFORE the job starts, so that it
        resumes from its newest checkpoint. A restore that fails starts no job (it would start over,
        billing hours to redo work): the pod ends with RESUME_FAILED, the pushed results untouched."""
        source = self.env.get(RESUME_ENV)
        if not source:
            return True
        try:
            names = restore(source, self.paths.results, objects=run_objects(self.ender.sync), paths=self.paths)
        except (RestoreError, OSError) as exc:
            self.log.line(f"could not restore the last push into results/: {exc}; the job is not started")
            return False
        self.log.line(f"restored {len(names)} files of the last push into results/ (recovered attempt)")
        return True

    def _write_job_pid(self, pid: int) -> None:
        # The idle watch follows this pid's process tree: its CPU time and I/O are the job's progress.
        with contextlib.suppress(OSError):
            atomic_write(self.paths.job, job_stamp(pid), 0o644)

    def _record(self, code: int) -> None:
        if self.dry_run:
            self.log.line(f"DRY_RUN: would record exit code {code} in {self.paths.exit_code}")
            return
        try:
            atomic_write(self.paths.exit_code, f"{code}\n", 0o644)
            self.log.line(f"job exit code {code} recorded")
        except OSError as exc:
            self.log.line(f"could not record the exit code ({exc.strerror or exc}); going on")

    def _nag(self) -> None:
        """Kept because the sync failed: hold the kept pod (kept.py) until it ends, syncs or stops at the
        end of its kept window (F8, F16). Ctrl-C hands it to the agent, which holds it from its next check."""
        watch = KeptWatch(self.ender, self.cfg, self.paths, self.clock)
        interval, window = self.cfg.nag_interval_s, self.cfg.kept_window_s
        self.log.line(
            f"the pod stays up; retrying the sync every {interval / 60:.0f} min, stopping it (disk kept) after "
            f"{window / 60:.0f} min (Ctrl-C stops the reminders here; the agent goes on with them)"
        )
        try:
            while not (self.relay.stop_requested or self.should_stop() or is_ended(self.paths, self.cfg.pod_id)):
                now = self.clock.now()
                outcome = watch.tick(now)
                if outcome is None or outcome in ENDS_THE_WATCH:
                    self.log.line(f"kept pod: {outcome or 'no longer kept'}")
                    return
                now = self.clock.now()
                wait = 1.0 if outcome == "in_progress" else watch.next_due(now) - now
                self.clock.sleep(min(1.0, max(0.01, wait)))
        finally:
            watch.release()
