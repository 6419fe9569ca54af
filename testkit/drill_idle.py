"""Drill rows for the idle rule on REAL processes: the agent's own rule, never a fake of it.

Each row starts a real process in the drill pod's sandbox (its environment names the pod, as the job
wrapper's does), under the wrapper (its pid file written as JobWrapper writes it) or by hand, and swaps the
pod's process probes for the real ones: JobTreeProbe and ProcScanner(only_pod=...) reading the real /proc.
The clock stays the drill's FakeClock. That is sound because a blocked process's counters truly do not
grow, however much virtual time passes; a busy one's grow only in real time, so the busy row gives each
check a fixed slice of real CPU (more than the floor) and waits for it, whatever the machine's load.

Every process is started with `python`'s start-up done before the clock runs ("ready" is printed after the
imports, right before it blocks), is killed when its row ends, and exits on its own if the drill dies (it
watches its stdin, a pipe only the drill holds open).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from gpuc.core.atomicfile import atomic_write
from gpuc.instance_side.jobtree import JobTree, JobTreeProbe, job_stamp
from gpuc.instance_side.observe import Probes
from gpuc.instance_side.procfs import CLK_TCK
from gpuc.instance_side.procs import ProcScanner
from gpuc.instance_side.wrapper import job_environ
from gpuc.testkit.drill_stage import MIN, DrillPod, RowResult, Stage, job_end_row, pod_row

# Blocks for ever on a lock at zero CPU and zero I/O; a thread reading stdin ends it once the drill's end
# of the pipe closes (the drill killed or gone): never a leftover.
HUNG_PYTHON = (
    "import os, sys, threading\n"
    "threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()\n"
    "lock = threading.Lock()\n"
    "lock.acquire()\n"
    "print('ready', flush=True)\n"
    "lock.acquire()\n"
)
HUNG_SHELL = "echo ready; read x"  # `read` is the shell's own: nothing runs, nothing grows
# A CPU loop: each line on stdin asks for that many seconds of its own CPU time, then it says "done".
BUSY_PYTHON = (
    "import sys, time\n"
    "print('ready', flush=True)\n"
    "for line in sys.stdin:\n"
    "    until = time.process_time() + float(line)\n"
    "    while time.process_time() < until:\n"
    "        pass\n"
    "    print('done', flush=True)\n"
)
# The busy loop's CPU per check: the floor and three clock ticks more (/proc truncates utime and stime to
# whole ticks, each: a reading may show up to two ticks less than the CPU really spent).
BURN_OVER_FLOOR_S = 3 / CLK_TCK


@dataclass
class RealProcess:
    proc: subprocess.Popen[bytes]

    def ask(self, line: str) -> str:
        """One line to the process, one line back (blocking: the answer is the point)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().decode().strip()


@contextmanager
def real_process(pod: DrillPod, argv: Sequence[str], *, under_wrapper: bool) -> Iterator[RealProcess]:
    env = job_environ(os.environ, {}, pod.pod_id)  # the wrapper's own: GPUC_POD_ID, no pod token
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready != b"ready\n":
            raise RuntimeError(f"drill setup: {argv[0]} did not start ({ready!r})")
        if under_wrapper:
            atomic_write(pod.paths.job, job_stamp(proc.pid), 0o644)  # what JobWrapper writes
        yield RealProcess(proc)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: it and anything it started
        proc.communicate()
        pod.paths.job.unlink(missing_ok=True)  # as the wrapper does once its job is gone


class PacedJobProbe:
    """The real JobTreeProbe, after the busy job has done one check's worth of real CPU work."""

    def __init__(self, inner: JobTreeProbe, job: RealProcess, burn_s: float) -> None:
        self.inner = inner
        self.job = job
        self.burn_s = burn_s

    def sample(self) -> JobTree | None:
        if self.job.ask(f"{self.burn_s:.3f}") != "done":
            raise RuntimeError("drill: the busy job stopped answering")
        return self.inner.sample()


def _real_probes(pod: DrillPod, job: JobTreeProbe | PacedJobProbe | None = None) -> None:
    pod.agent.observer.probes = Probes(
        gpu=pod.gpu,
        procs=ProcScanner(only_pod=pod.pod_id),  # the local sandbox's scanner: this pod's processes only
        ssh=pod.ssh,
        job=job or JobTreeProbe(pod.paths.job),
    )


def _pod_id(row: str) -> str:
    # Unique to this run: drills running side by side on one machine must not see each other's processes.
    return f"{row.lower()}-{os.getpid():x}"


# -- the rows ---------------------------------------------------------------------------------------
def f3h_python_job_hangs(stage: Stage) -> RowResult:
    return _hung_row(stage, "F3h", "python job under the wrapper hangs (a lock)", [sys.executable, "-c", HUNG_PYTHON])


def f3hs_shell_job_hangs(stage: Stage) -> RowResult:
    return _hung_row(stage, "F3hs", "shell job under the wrapper hangs (read)", ["sh", "-c", HUNG_SHELL])


def f3hn_hand_started_python_hangs(stage: Stage) -> RowResult:
    argv = [sys.executable, "-c", HUNG_PYTHON]
    return _hung_row(stage, "F3hn", "python started by hand (nohup) hangs", argv, under_wrapper=False)


def _hung_row(stage: Stage, row: str, failure: str, argv: list[str], *, under_wrapper: bool = True) -> RowResult:
    settings = stage.settings
    pod = stage.launch(_pod_id(row))
    with real_process(pod, argv, under_wrapper=under_wrapper):
        _real_probes(pod)
        hung_at = stage.now
        # Past the window, and past the reaper's bound if a fault refuses the self-destroy: a rule that never
        # ends the pod shows as a row over its bound, not as hours of real /proc scans.
        reaper_s = stage.passes_bound_min(settings.silence_limit_s, hung_at) * MIN
        stage.run_until_gone(pod.pod_id, 2 * settings.idle_destroy_s + reaper_s)
    # Its first check sees a process it never saw: busy once ("just seen"), one check more than F3.
    check = settings.idle_check_interval_s
    bound, text = (settings.idle_destroy_s + 2 * check) / MIN, "20 min + its first sight's check + 1 check"
    if stage.reaper_destroys[pod.pod_id]:
        # A fault refused the idle self-destroy: the pod reported its end, the reaper destroys it (F9).
        bound += stage.passes_bound_min(settings.silence_limit_s, hung_at)
        text += f", then as F9{stage.bound_note(hung_at)}"
    caught_by = "idle watch (real /proc, no progress)"
    return pod_row(stage, pod, row, failure, caught_by, stage.billed_min(pod.pod_id, hung_at), bound, text)


def f3b_busy_job_lives(stage: Stage) -> RowResult:
    """A real CPU loop under the wrapper, GPU idle, for longer than the idle window: never ended (0 false
    kills); then it ends and the wrapper ends the pod."""
    pod = stage.launch(_pod_id("F3b"))
    burn_s = stage.settings.idle_cpu_floor_s + BURN_OVER_FLOOR_S  # real CPU, so kept small: past the floor
    with real_process(pod, [sys.executable, "-c", BUSY_PYTHON], under_wrapper=True) as job:
        _real_probes(pod, PacedJobProbe(JobTreeProbe(pod.paths.job), job, burn_s))
        ran_s = stage.settings.idle_destroy_s + 2 * stage.settings.idle_check_interval_s  # past the destroy
        stage.run(ran_s)
    caught_by = "idle watch (real /proc, CPU growth); wrapper"
    return job_end_row(stage, pod, "F3b", "real CPU loop under the wrapper, GPU idle", caught_by, ran_s)


IDLE_ROWS = (f3h_python_job_hangs, f3hs_shell_job_hangs, f3hn_hand_started_python_hangs, f3b_busy_job_lives)
