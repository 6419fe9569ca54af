"""The job wrapper (SPEC layer 1): run the job; on ANY exit record the exit code first, then
sync -> notify -> destroy through the Ender.

Signals: SIGTERM, SIGINT and SIGHUP are caught while the job runs and passed on to it, so the
wrapper itself outlives them and still ends the pod. After the first SIGHUP (a dropped ssh) further
ones are ignored. When the wrapper runs in the foreground of a terminal, the terminal already
delivers SIGINT and SIGHUP to the job (same process group): passing them on again would hit the job
twice and could cut short its own clean-up, so only signals sent to the wrapper alone are forwarded.
The job stays in the wrapper's process group so that whatever stops the pod stops both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from gpuc.core.clock import Clock
from gpuc.instance_side.ending import Ender, Ending
from gpuc.instance_side.podfiles import POD_ID_ENV, TOKEN_ENV, AgentConfig, PodPaths, atomic_write, is_ended
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.procs import job_stamp

_CAUGHT = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_FROM_TERMINAL = (signal.SIGINT, signal.SIGHUP)
NOT_FOUND_EXIT = 127


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
    """The job gets the user's secrets (HF_TOKEN...) but not the pod's heartbeat token. The process
    environment wins over the file, as it does on the laptop (core.settings)."""
    env = {**secrets, **base}
    env.pop(TOKEN_ENV, None)
    env[POD_ID_ENV] = pod_id  # the local sandbox counts a pod's python processes by this
    return env


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

    def run(self, argv: Sequence[str]) -> int:
        self.relay.install()
        try:
            started = self.clock.now()
            code = self._run_job(argv)
            duration = max(0.0, self.clock.now() - started)
            self._record(code)
            ending = Ending(
                kind="job_exit",
                message=f"job exited with code {code} after {duration:.0f}s",
                exit_code=code,
                duration_s=round(duration, 3),
            )
            if self.ender.end(ending) == "kept_sync_failed":
                self._nag()
            return code
        finally:
            self.relay.restore()

    def _run_job(self, argv: Sequence[str]) -> int:
        self.log.line(f"starting job in {self.paths.workspace}")
        try:
            proc = subprocess.Popen(list(argv), cwd=self.paths.workspace, env=dict(self.env))
        except OSError as exc:
            # A job that cannot start has ended too: the pod must not sit there billing.
            self.log.line(f"job could not start: {exc.strerror or exc}")
            return NOT_FOUND_EXIT
        self.relay.proc = proc
        self._write_job_pid(proc.pid)
        try:
            returncode = proc.wait()
        finally:
            with contextlib.suppress(OSError):
                self.paths.job.unlink()
        if self.relay.received:
            names = ", ".join(signal.Signals(s).name for s in self.relay.received)
            self.log.line(f"wrapper received {names} while the job ran")
        return exit_status(returncode)

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
        """Kept alive because the sync failed: repeat the alert until stopped or the pod ends (F8)."""
        interval = self.cfg.nag_interval_s
        next_nag = self.clock.now() + interval
        self.log.line(f"the pod stays up; reminding every {interval / 60:.0f} min (Ctrl-C stops the reminders)")
        while not (self.relay.stop_requested or self.should_stop() or is_ended(self.paths, self.cfg.pod_id)):
            now = self.clock.now()
            if now >= next_nag:
                self.ender.nag()
                next_nag = now + interval
                continue
            self.clock.sleep(min(1.0, next_nag - now))
