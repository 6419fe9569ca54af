"""The agent pushes results while the job runs (at its interval, and once more when the pod is
warned), a restarted agent carries on from its predecessor's state, and the job wrapper restarts a dead
agent (a real agent process, SIGKILLed as the OOM killer does) while the job keeps running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from fakes.pod import MINUTE, Pod, recording_functions, serving, wire

from gpuc.core.clock import FakeClock
from gpuc.core.models import PodSpec
from gpuc.core.podconfig import PodConfig, render_env_file
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.wrapper import AgentGuard, agent_alive


def run(pod: Pod, agent: Agent, minutes: int) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    start = len(pod.calls)
    for minute in range(minutes):
        agent.tick(pod.clock.now())
        for call in pod.calls[start:]:
            seen.setdefault(call, []).append(minute)
        start = len(pod.calls)
        pod.clock.advance(MINUTE)
    return seen


# -- the push schedule -------------------------------------------------------------------------------
def test_the_default_interval_is_ten_minutes_and_0_turns_it_off(tmp_path: Path, clock: FakeClock) -> None:
    assert Settings(home=tmp_path).sync_interval_s == 600
    env = {"GPUC_HOME": str(tmp_path), "GPUC_ENV_FILE": str(tmp_path / "no.env")}
    assert load_settings({**env, "GPUC_SYNC_INTERVAL_S": "10m"}).sync_interval_s == 600
    assert load_settings({**env, "GPUC_SYNC_INTERVAL_S": "0"}).sync_interval_s == 0
    off = wire(tmp_path / "off", clock, sync_interval_s=0)
    off.paths.results.mkdir()
    off.procs.pids = [99]
    assert "sync" not in run(off, off.agent(), 35)


def test_a_warned_pod_pushes_once_more_and_the_heartbeat_names_the_push(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, sync_interval_s=12 * MINUTE)
    pod.paths.results.mkdir()
    seen = run(pod, pod.agent(), 17)
    assert seen["notify:idle_warning"] == [15]
    assert seen["sync"] == [12, 15], "pushed at the interval, and again when warned"
    hb = pod.functions.heartbeats[-1]
    assert hb.pushed_files == 1 and hb.pushed_to == "fake://bucket"
    assert hb.pushed_ago_s == pytest.approx(MINUTE, abs=1)


def test_an_earlier_deadline_in_the_answer_is_a_push_now(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, sync_interval_s=60 * MINUTE, deadline_at=clock.now() + 10 * 3600)
    pod.paths.results.mkdir()
    pod.procs.pids = [99]
    agent = pod.agent()
    run(pod, agent, 3)
    pod.functions.deadline_at = clock.now() + 3600  # the month's budget pulled it in
    seen = run(pod, agent, 3)
    assert seen["sync"] == [0], "pushed as soon as the answer said so, not at the hour"
    pod.functions.deadline_at = clock.now() + 5 * 3600  # `gpuc extend`: later, nothing to hurry
    assert "sync" not in run(pod, agent, 3)


# -- a restarted agent carries on --------------------------------------------------------------------
def test_a_restarted_agent_keeps_the_idle_window_the_deadline_and_the_seq(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock)
    first = pod.agent()
    later = clock.now() + 5 * 3600
    pod.functions.deadline_at = later  # `gpuc extend`: said in the heartbeat answers
    run(pod, first, 10)  # idle for 10 minutes
    assert first.deadline.deadline_at == later
    last_seq = pod.functions.heartbeats[-1].seq
    pod.functions.deadline_at = None  # the watchdog says nothing more: only what the first agent learnt

    second = pod.agent()  # the first died (SIGKILL): a new process, same pod
    second.start()
    assert second.state.idle_s == pytest.approx(first.state.idle_s)
    assert second.deadline.deadline_at == later
    seen = run(pod, second, 10)
    assert seen["notify:idle_warning"] == [5], "warned at minute 15 of the pod's idle time, not 15 after the restart"
    assert pod.functions.heartbeats[-1].seq > last_seq
    assert any(e.kind == "info" and "restarted" in e.message for e in pod.functions.events)


def test_the_guard_restarts_only_a_dead_agent_of_a_live_pod(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock)
    started: list[int] = []
    state = {"alive": True}

    def start(paths: object) -> int:
        started.append(1)
        return 4242

    guard = AgentGuard(pod.paths, pod.ctx.cfg, pod.ctx.log, alive=lambda paths: state["alive"], start=start)
    assert not guard.check(0.0)
    state["alive"] = False
    assert guard.check(1.0) and len(started) == 1
    assert not guard.check(2.0), "the new agent gets time to take its lock"
    pod.paths.ended.write_text(pod.ctx.cfg.pod_id)
    assert not guard.check(1000.0) and len(started) == 1, "an ended pod's agent stays dead"


# -- for real: a SIGKILLed agent, the wrapper, the job --------------------------------------------------
TOKEN = "sup-token-" + "x" * 30
Functions = recording_functions(TOKEN)


@pytest.fixture
def watchdog_url() -> Iterator[str]:
    Functions.reset()
    with serving(Functions, ThreadingHTTPServer) as url:
        yield url


def test_a_killed_agent_is_restarted_by_the_wrapper_and_the_job_runs_on(
    home: Path, tmp_path: Path, watchdog_url: str
) -> None:
    local = LocalProvider(home, settings=Settings(home=home, local_boot_s=0))
    pod = local.create(PodSpec(experiment="exp", run_id="run01", provider="local", gpu_type="sim"))
    paths = local.paths(pod.id)
    paths.state.mkdir(parents=True, exist_ok=True)
    settings = Settings(home=home, watchdog_url=watchdog_url)
    config = PodConfig.for_pod(
        settings, pod_id=pod.id, provider="local", experiment="exp", run_id="run01", local_home=str(home)
    )
    config = PodConfig.model_validate(
        {
            **config.model_dump(),
            "heartbeat_interval_s": 0.5,
            "idle_check_interval_s": 0.5,
            "simulated_gpu": True,
            "results_bucket": f"file://{tmp_path}/bucket",
            "sync_interval_s": 2.0,
        }
    )
    paths.config.write_text(config.model_dump_json())
    fd = os.open(paths.secrets, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, render_env_file({"GPUC_POD_TOKEN": TOKEN}).encode())
    os.close(fd)
    env = {**local.sandbox_env(pod.id), "PYTHONPATH": os.environ.get("PYTHONPATH", "")}

    agent = subprocess.Popen([sys.executable, "-m", "gpuc.instance_side", "agent"], env=env, start_new_session=True)
    job = (  # a checkpoint every half second until the test says stop (at most 2 min), then how many
        "import os, time\n"
        "os.makedirs('results', exist_ok=True)\n"
        "i = 0\n"
        "while not os.path.exists('stop') and i < 240:\n"
        "    open(f'results/step{i}.txt', 'w').write(str(i)); i += 1; time.sleep(0.5)\n"
        "open('results/count.txt', 'w').write(str(i))\n"
    )
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "gpuc.instance_side", "run", "--", sys.executable, "-c", job],
        env=env,
        cwd=paths.workspace,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    restarted = None
    try:
        until = time.monotonic() + 30
        while agent_alive(paths) is not True and time.monotonic() < until:
            time.sleep(0.1)
        time.sleep(2)
        os.killpg(agent.pid, signal.SIGKILL)  # the OOM killer: no clean-up, no goodbye
        agent.wait()
        killed_at = time.monotonic()
        while time.monotonic() < killed_at + 30:
            try:
                holder = paths.agent_lock.read_text().strip()
            except OSError:
                break  # the pod is gone
            if agent_alive(paths) and holder and int(holder) != agent.pid:
                restarted = int(holder)
                break
            time.sleep(0.2)
        assert restarted is not None, "nothing restarted the agent"
        assert time.monotonic() - killed_at < 60
        assert wrapper.poll() is None, "the job was not ended because its agent died"
        while "agent restarted: carrying on" not in paths.log.read_text() and time.monotonic() < killed_at + 30:
            time.sleep(0.2)
        time.sleep(3)  # a push or two by the new agent
        log = paths.log.read_text()  # read before the job's end destroys the pod (and its disk)
        (paths.workspace / "stop").write_text("")
        assert wrapper.wait(timeout=60) == 0
    finally:
        for proc in (agent, wrapper):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        if restarted is not None:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.killpg(restarted, signal.SIGKILL)
    assert "restarted it, pid" in log and "agent restarted: carrying on" in log
    # Pushes went on, as their own low-priority process, before and after the kill.
    pushes = [line for line in log.splitlines() if " push results push (nice 19" in line]
    assert pushes and all("changed files" in line for line in pushes), log
    assert any(e.kind == "info" and "restarted" in e.message for e in Functions.events)
    # Nothing lost: every file the job wrote is at the destination (pushed while it ran, then the final sync).
    bucket = tmp_path / "bucket" / "exp" / "run01"
    count = int((bucket / "count.txt").read_text())
    assert sorted(p.name for p in bucket.glob("step*.txt")) == sorted(f"step{i}.txt" for i in range(count))
    assert local.get(pod.id) is None, "the job's end ended the pod, as always"


def test_agent_alive_reads_the_agents_lock(tmp_path: Path, clock: FakeClock) -> None:
    from gpuc.instance_side.podfiles import hold_agent_lock

    pod = wire(tmp_path / "pod", clock)
    assert agent_alive(pod.paths) is None, "no agent ever ran here: nothing to restart"
    fd = hold_agent_lock(pod.paths)
    assert fd is not None
    try:
        assert agent_alive(pod.paths) is True
    finally:
        os.close(fd)  # the agent dies: the kernel drops its lock
    assert agent_alive(pod.paths) is False
