"""The agent's loop on a virtual clock: F3, F4, keep/lease, failing NVML, outages, errors, the job's progress."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.pod import MINUTE, POD_ID, FakeGpu, FakeProcTree, Pod, settled, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.gpu import GpuSample
from gpuc.instance_side.jobtree import JobTreeProbe, job_stamp
from gpuc.instance_side.podfiles import mark_ended
from gpuc.instance_side.procfs import CLK_TCK
from gpuc.instance_side.procs import ProcScanner
from gpuc.instance_side.sshscan import SshSession


@pytest.fixture
def pod(tmp_path: Path, clock: FakeClock) -> Pod:
    return wire(tmp_path / "pod", clock)


def run(pod: Pod, minutes: int, each: Any = None, agent: Agent | None = None) -> dict[str, list[int]]:
    """Tick once a minute; return, per call kind, the minutes at which it happened."""
    agent = agent or pod.agent()
    seen: dict[str, list[int]] = {}
    start = len(pod.calls)
    for minute in range(minutes):
        if each is not None:
            each(minute)
        agent.tick(pod.clock.now())
        for call in pod.calls[start:]:
            seen.setdefault(call, []).append(minute)
        start = len(pod.calls)
        pod.clock.advance(MINUTE)
    return seen


def test_f3_it_warns_at_minute_15_and_ends_the_pod_at_minute_20(pod: Pod) -> None:
    seen = run(pod, 30)
    assert seen["notify:idle_warning"] == [15]
    assert seen["destroy"] == [20]
    assert seen["sync"] == [20]
    assert pod.calls.index("sync") < pod.calls.index("notify:idle_destroy") < pod.calls.index("destroy")
    end_event = pod.functions.events[-1]
    assert end_event.kind == "idle_destroy" and end_event.end_at is not None


def test_f3_idle_time_starts_when_the_last_python_process_ends(pod: Pod) -> None:
    pod.procs.pids = [4242]

    def job_ends_at_minute_5(minute: int) -> None:
        if minute == 5:
            pod.procs.pids = []

    seen = run(pod, 30, job_ends_at_minute_5)
    assert seen["notify:idle_warning"] == [20]
    assert seen["destroy"] == [25]


def test_it_stops_heartbeating_once_the_pod_has_ended(pod: Pod) -> None:
    agent = pod.agent()
    seen = run(pod, 40, agent=agent)
    assert max(seen["heartbeat"]) == 20
    assert agent.stopped


def test_f4_an_open_but_quiet_ssh_session_stops_counting_after_the_window(pod: Pod) -> None:
    pod.ssh.sessions_ = [SshSession("pts/0", last_input=pod.clock.now())]
    seen = run(pod, 40)
    # 10 min of input window, then the normal 15/20: the F4 bound is 20 min + N.
    assert seen["notify:idle_warning"] == [25]
    assert seen["destroy"] == [30]


def test_f4_a_session_that_sees_input_keeps_the_pod(pod: Pod) -> None:
    def typing(minute: int) -> None:
        pod.ssh.sessions_ = [SshSession("pts/1", last_input=pod.clock.now() - 5)]

    seen = run(pod, 90, typing)
    assert "destroy" not in seen and "notify:idle_warning" not in seen
    assert pod.functions.heartbeats[-1].active_ssh == 1
    assert pod.functions.heartbeats[-1].busy_reason == "ssh pts/1 active"


def test_the_keep_file_suspends_the_destroy_and_its_removal_restarts_the_window(pod: Pod) -> None:
    pod.paths.keep_file.touch()

    def remove_keep(minute: int) -> None:
        if minute == 60:
            pod.paths.keep_file.unlink()

    seen = run(pod, 90, remove_keep)
    assert seen["notify:idle_warning"] == [75]
    assert seen["destroy"] == [80]
    assert any(hb.keep_file for hb in pod.functions.heartbeats)


def test_a_lease_from_the_heartbeat_answer_suspends_the_destroy(pod: Pod) -> None:
    pod.functions.lease_until = pod.clock.now() + 2 * 3600 + 30  # gpuc keep POD --for 2h
    seen = run(pod, 160)
    assert seen["notify:idle_warning"] == [136]
    assert seen["destroy"] == [141]


def test_a_lease_that_arrives_at_the_destroy_minute_still_wins(pod: Pod) -> None:
    def keep_at_20(minute: int) -> None:
        if minute == 20:
            pod.functions.lease_until = pod.clock.now() + 3600

    seen = run(pod, 30, keep_at_20)
    assert seen["notify:idle_warning"] == [15]
    assert "destroy" not in seen and "sync" not in seen


@pytest.mark.parametrize(
    "gpu",
    [
        FakeGpu(error="NVML init failed: Unknown Error"),
        FakeGpu(device_error="GPU is lost"),
        FakeGpu(util=None),
    ],
    ids=["reading-fails", "gpu-lost", "utilisation-unknown"],
)
def test_a_failing_nvml_never_triggers_a_destroy(pod: Pod, gpu: FakeGpu) -> None:
    pod.gpu = gpu
    seen = run(pod, 120)
    assert "destroy" not in seen and "notify:idle_warning" not in seen
    assert len(seen["heartbeat"]) == 120  # and the pod still proves it is alive every minute
    last = pod.functions.heartbeats[-1]
    assert last.busy_reason is not None and "counted as busy" in last.busy_reason


def test_no_gpu_library_still_heartbeats_and_says_so(pod: Pod) -> None:
    class NoNvml:
        note = "no GPU data: NVML Shared Library Not Found"

        def read(self) -> list[GpuSample]:
            return []

    pod.gpu = NoNvml()  # type: ignore[assignment]
    run(pod, 3)
    assert len(pod.functions.heartbeats) == 3
    assert pod.functions.heartbeats[0].gpu_error == "no GPU data: NVML Shared Library Not Found"
    assert pod.functions.heartbeats[0].gpus == []


def test_heartbeats_carry_the_readings_and_the_idle_state(pod: Pod) -> None:
    pod.gpu.util = 2.0
    run(pod, 4)
    hb = pod.functions.heartbeats[-1]
    assert hb.pod_id == POD_ID
    assert hb.gpus[0].name == "RTX 4090" and hb.gpus[0].utilization_pct == 2.0
    assert hb.idle_minutes == 3.0 and hb.busy_reason is None
    assert hb.python_procs == 0 and not hb.job_running and not hb.keep_file


def test_it_survives_a_functions_outage_and_the_idle_watch_goes_on(pod: Pod) -> None:
    pod.functions.down = True

    def back_at_25(minute: int) -> None:
        if minute == 25:
            pod.functions.down = False

    agent = pod.agent()
    agent.start()
    pod.procs.pids = [7]

    def scenario(minute: int) -> None:
        back_at_25(minute)
        if minute == 10:
            pod.procs.pids = []

    seen = run(pod, 40, scenario, agent=agent)
    assert pod.functions.attempts < 40  # backed off, not one attempt per queued message per minute
    assert "heartbeat" in seen and min(seen["heartbeat"]) == 25
    # the events queued during the outage arrive in order once it is over
    assert pod.functions.kinds()[:2] == ["idle_warning", "idle_destroy"]
    assert seen["destroy"] == [30]


@pytest.mark.parametrize("asked", [False, True])
def test_agent_start_reaches_the_phone_only_when_asked(tmp_path: Path, clock: FakeClock, asked: bool) -> None:
    pod = wire(tmp_path / "pod", clock, notify_start=asked)
    agent = pod.agent()
    agent.start()
    agent.client.flush(clock.now())
    assert ("agent_start" in pod.functions.kinds()) is asked
    assert "agent started" in pod.log_text()  # always in the pod's own log


def test_a_destroy_goes_ahead_while_the_functions_are_down(pod: Pod) -> None:
    pod.functions.down = True
    seen = run(pod, 25)
    assert seen["destroy"] == [20]
    assert "notify:idle_destroy" not in pod.calls


def test_it_survives_an_exception_in_one_check(pod: Pod) -> None:
    class Flaky:
        note = None
        calls = 0

        def read(self) -> list[Any]:
            self.calls += 1
            return [object()] if self.calls == 3 else [GpuSample(index=0, utilization_pct=0.0)]

    pod.gpu = Flaky()  # type: ignore[assignment]
    agent = pod.agent()
    ticks = 0

    def stop_after_30_minutes() -> bool:
        return pod.clock.now() >= start + 30 * MINUTE or ticks > 10_000

    start = pod.clock.now()
    agent.run_forever(stop_after_30_minutes)
    assert "check failed, going on: AttributeError" in pod.log_text()
    assert "destroy" in pod.calls  # the watch went on and ended the idle pod


def test_run_forever_returns_when_the_pod_ends(pod: Pod) -> None:
    agent = pod.agent()
    mark_ended(pod.paths, POD_ID)
    agent.run_forever(lambda: False)
    assert agent.stopped
    assert pod.functions.heartbeats == []


def test_a_stale_ended_marker_from_another_pod_is_ignored(pod: Pod) -> None:
    mark_ended(pod.paths, "lp-someone-else")
    run(pod, 2)
    assert len(pod.functions.heartbeats) == 2


def test_an_idle_end_kept_by_a_failed_sync_retries_and_nags_at_the_nag_interval(
    tmp_path: Path, clock: FakeClock
) -> None:
    pod = wire(tmp_path / "pod", clock, nag_interval_s=30 * MINUTE)
    pod.sync.fail = "No space left on device"
    seen = run(pod, 90)
    assert seen["notify:sync_failed"] == [20, 50, 80]
    assert "destroy" not in seen
    assert pod.functions.events[-1].message.startswith("kept alive: sync failed")
    assert len(seen["heartbeat"]) == 90  # the kept pod is still alive and still watched


def test_periodic_push_runs_at_the_sync_interval_without_destroying(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, sync_interval_s=10 * MINUTE)
    pod.paths.results.mkdir()
    pod.procs.pids = [99]  # a long job keeps the pod busy
    seen = run(pod, 35)
    assert seen["sync"] == [10, 20, 30]
    assert "destroy" not in seen


def test_one_log_line_per_check_and_no_secrets_in_it(pod: Pod) -> None:
    run(pod, 5)
    lines = [line for line in pod.log_text().splitlines() if " check " in line]
    assert len(lines) == 5
    assert "s3cr3t" not in pod.log_text() and "hf_abcdefghijklmnop" not in pod.log_text()


# -- the job under the wrapper: progress keeps the pod, a hung job does not ------------------------
def test_a_non_python_job_making_progress_is_never_destroyed(pod: Pod) -> None:
    """The incident: a download under the wrapper, GPU idle, no python: destroyed at minute 20, result lost."""
    pod.job.start(worker="curl", cpu_per_s=0.02, io_per_s=2_000_000)
    seen = run(pod, 90)
    assert "destroy" not in seen and "notify:idle_warning" not in seen
    hb = pod.functions.heartbeats[-1]
    assert hb.job_running and hb.busy_reason is not None and hb.busy_reason.startswith("job pid 4242 making progress")


@pytest.mark.parametrize(("cpu", "io"), [(0.5, 0.0), (0.0, 100_000.0)], ids=["cpu-only", "io-only"])
def test_cpu_or_io_alone_is_progress(pod: Pod, cpu: float, io: float) -> None:
    pod.job.start(worker="make", cpu_per_s=cpu, io_per_s=io)
    seen = run(pod, 40)
    assert "destroy" not in seen and "notify:idle_warning" not in seen


def test_a_hung_job_is_idle_warned_and_destroyed_within_the_window(pod: Pod) -> None:
    pod.job.start(worker="curl", cpu_per_s=0.02, io_per_s=1_000_000)

    def hangs_at_30(minute: int) -> None:
        if minute == 30:
            pod.job.hang()  # stuck on a dead socket: no CPU, no I/O from here on

    seen = run(pod, 60, hangs_at_30)
    # The check at minute 30 still sees the growth up to the hang; idle time counts from the next one:
    # destroyed within the idle limit plus one check of the hang.
    assert seen["notify:idle_warning"] == [46]
    assert seen["destroy"] == [51]
    assert pod.calls.index("sync") < pod.calls.index("notify:idle_destroy") < pod.calls.index("destroy")
    warning = next(e for e in pod.functions.events if e.kind == "idle_warning")
    assert "pid 4242" in warning.message and "no CPU or I/O progress" in warning.message
    assert all(hb.job_running for hb in pod.functions.heartbeats)


def test_a_job_scan_that_fails_counts_as_busy(pod: Pod) -> None:
    pod.job.start(worker="curl")
    pod.job.error = "cannot list /proc: Permission denied"
    seen = run(pod, 60)
    assert "destroy" not in seen and "notify:idle_warning" not in seen
    reason = pod.functions.heartbeats[-1].busy_reason
    assert reason == "job scan failed (cannot list /proc: Permission denied): counted as busy"


def test_the_idle_window_starts_when_the_job_ends(pod: Pod) -> None:
    pod.job.start(worker="rsync", io_per_s=50_000)

    def ends_at_10(minute: int) -> None:
        if minute == 10:
            pod.job.stop()

    seen = run(pod, 40, ends_at_10)
    assert seen["notify:idle_warning"] == [25]
    assert seen["destroy"] == [30]


def wait_for_cpu(probe: JobTreeProbe, since: int, above: int, deadline_s: float = 20.0) -> int:
    """Real time for the real job to be charged more than `above` clock ticks since `since` (the CPU floor:
    a check sees progress); the total when it was."""
    deadline = time.monotonic() + deadline_s
    while True:
        tree = probe.sample()
        total = sum(c.cpu_ticks for c in tree.procs.values()) if tree else 0
        if total > since + above or time.monotonic() > deadline:
            return total
        time.sleep(0.01)


@pytest.fixture
def real_job(pod: Pod) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start a REAL shell job, its pid file written as the wrapper writes it, read from the real /proc."""
    started: list[subprocess.Popen[bytes]] = []

    def start(script: str) -> subprocess.Popen[bytes]:
        job = subprocess.Popen(["sh", "-c", script], start_new_session=True)
        started.append(job)
        pod.paths.job.write_text(job_stamp(job.pid))
        pod.job = JobTreeProbe(pod.paths.job)  # type: ignore[assignment]
        return job

    yield start
    for job in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # the job's own group: everything it started
        job.wait()


def test_a_real_spinning_shell_job_keeps_the_pod_through_the_idle_window(
    pod: Pod, real_job: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    real_job("sh -c 'while :; do :; done'; :")  # the work is in a child of the job's shell
    probe = JobTreeProbe(pod.paths.job)
    agent = pod.agent()
    cpu, floor = 0, math.ceil(pod.ctx.cfg.idle_cpu_floor_s * CLK_TCK)
    for _minute in range(25):
        cpu = wait_for_cpu(probe, since=cpu, above=floor)  # the virtual minute holds real CPU work
        agent.tick(pod.clock.now())
        pod.clock.advance(MINUTE)
    assert "destroy" not in pod.calls and "notify:idle_warning" not in pod.calls
    assert agent.state.idle_s == 0
    assert pod.functions.heartbeats[-1].job_running


def test_a_real_sleeping_job_is_destroyed_after_the_window(
    pod: Pod, real_job: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    real_job("sleep 1000")
    settled(JobTreeProbe(pod.paths.job))  # past its start-up: from here it only sleeps
    seen = run(pod, 25)
    assert seen["notify:idle_warning"] == [16]  # minute 0 is the first sight: busy once
    assert seen["destroy"] == [21]
    assert all(hb.job_running for hb in pod.functions.heartbeats)


# -- the user's other processes: progress, not names ----------------------------------------------------
def scan_fake_proc(pod: Pod) -> FakeProcTree:
    """The pod's fake /proc (the one its job lives in), read by the real ProcScanner, with what a rented
    pod's image runs beside the user: init, sshd, nginx, jupyter, `sleep infinity`."""
    tree = pod.job.tree
    tree.add(1, "bash", ["/bin/bash", "/start.sh"], ppid=0)
    tree.add(7, "sshd", ["sshd: /usr/sbin/sshd -D [listener] 0 of 10-100 startups"])
    tree.add(8, "nginx", ["nginx: master process /usr/sbin/nginx"])
    tree.add(9, "jupyter-lab", ["/usr/bin/python3", "/usr/local/bin/jupyter-lab", "--allow-root"])
    tree.add(10, "sleep", ["sleep", "infinity"])
    for pid in (7, 8, 9):
        tree.set(pid, utime=500, rchar=10**6)  # they did work once; infrastructure is never the user's job
    pod.procs = ProcScanner(tree.root)  # type: ignore[assignment]
    return tree


def test_a_hung_python_started_by_hand_is_warned_and_destroyed_within_the_window(pod: Pod) -> None:
    """The incident: a python that printed a line and blocked for ever sat at zero CPU and I/O for 24 min
    with a 2-minute idle limit, every check saying `reason=1 python process`."""
    tree = scan_fake_proc(pod)
    tree.add(600, "python3", ["python3", "train.py"], ppid=601, start=9000)  # `nohup python train.py &`
    tree.set(600, utime=340, rchar=2_000_000)  # its start-up and imports, before the first check
    seen = run(pod, 30)
    assert seen["notify:idle_warning"] == [16]  # minute 0 is its first sight: busy once
    assert seen["destroy"] == [21]
    first = pod.functions.heartbeats[0]
    assert first.python_procs == 1
    assert first.busy_reason == "pid 600 python3 just seen: counted as busy until the next check"
    assert pod.functions.heartbeats[1].busy_reason is None


def test_a_non_python_process_started_by_hand_and_working_keeps_the_pod(pod: Pod) -> None:
    """`nohup ./train &` over ssh, GPU idle between phases: its CPU time grows, so the pod is busy."""
    tree = scan_fake_proc(pod)
    tree.add(700, "train", ["./train"], ppid=1, start=9100)

    def computes(minute: int) -> None:
        tree.set(700, utime=minute * 30 * CLK_TCK)  # half a core

    seen = run(pod, 60, computes)
    assert "destroy" not in seen and "notify:idle_warning" not in seen
    reason = pod.functions.heartbeats[-1].busy_reason
    assert reason is not None and reason.startswith("pid 700 train making progress (cpu +30.00s")


def test_a_daemon_ticking_under_the_floor_does_not_keep_the_pod(pod: Pod) -> None:
    """A user's own background helper that wakes once a second (0.01 s of CPU a minute, a few bytes)."""
    tree = scan_fake_proc(pod)
    tree.add(800, "node", ["node", "watcher.js"], ppid=1, start=9200)

    def heartbeat(minute: int) -> None:
        tree.set(800, utime=minute, wchar=minute * 200)

    seen = run(pod, 30, heartbeat)
    assert seen["notify:idle_warning"] == [16] and seen["destroy"] == [21]
