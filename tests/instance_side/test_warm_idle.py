"""A warm pod's idle watch (`up --warm`) on a virtual clock: between jobs its warm time, counted from the last
job's end and warned late in it; while a job runs the usual idle times, so a quiet job is never warned about
("hung?") by the warm timer, and a hung one is still ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fakes.pod import MINUTE, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.idle import Thresholds, warm_limits
from gpuc.instance_side.podfiles import AgentConfig


def warm_pod(tmp_path: Path, clock: FakeClock, warm_s: float, **cfg: Any) -> Pod:
    return wire(tmp_path / "pod", clock, warm_s=warm_s, **cfg)  # idle warn 15 min, destroy 20 min (the defaults)


def tick(pod: Pod, agent: Agent, seconds: float, step: float) -> list[tuple[float, str]]:
    """Tick every `step` for `seconds`; the calls made, each with the time since the start."""
    start, seen = pod.clock.now(), []
    for _ in range(round(seconds / step)):
        before = len(pod.calls)
        agent.tick(pod.clock.now())
        seen += [(pod.clock.now() - start, call) for call in pod.calls[before:]]
        pod.clock.advance(step)
    return seen


def when(seen: list[tuple[float, str]], call: str) -> list[float]:
    return [at for at, c in seen if c == call]


def test_a_4_second_job_on_warm_1m_gets_no_warning_then_the_warm_time_counts_from_its_end(
    tmp_path: Path, clock: FakeClock
) -> None:
    pod = warm_pod(tmp_path, clock, 60.0, idle_check_interval_s=1.0, heartbeat_interval_s=1.0)
    agent = pod.agent()
    pod.job.start(worker="python")  # quiet: sleeping, no CPU, no I/O (the issue's `time.sleep(4)` job)
    during = tick(pod, agent, 4, 1.0)
    assert when(during, "notify:idle_warning") == [], "no idle warning while the job runs"
    pod.job.stop()
    after = tick(pod, agent, 90, 1.0)
    assert when(after, "notify:idle_warning") == [30.0], "warned halfway through the warm time, not at its start"
    assert when(after, "destroy") == [60.0], "ended a warm time after the job's end"
    warning, end = pod.functions.events[0], pod.functions.events[-1]
    assert warning.message.startswith("warm pod, no job for 30 s (--warm 1 min): it syncs results/ and ends itself")
    assert "gpuc run lp-abc123 --sync --wait -- CMD" in warning.message and "hung?" not in warning.message
    assert end.kind == "idle_destroy" and end.message.startswith("warm pod, no job for 1 min (--warm 1 min); results: ")


def test_a_quiet_job_does_not_use_up_the_warm_time(tmp_path: Path, clock: FakeClock) -> None:
    pod = warm_pod(tmp_path, clock, 30 * MINUTE)
    agent = pod.agent()
    pod.job.start(worker="python")  # quiet for 10 min (waiting on a download, a barrier)
    during = tick(pod, agent, 10 * MINUTE, MINUTE)
    pod.job.stop()
    after = tick(pod, agent, 40 * MINUTE, MINUTE)
    assert when(during, "notify:idle_warning") == [] and when(during, "destroy") == []
    assert when(after, "notify:idle_warning") == [25 * MINUTE], "the usual 5 min ahead of the warm time's end"
    assert when(after, "destroy") == [30 * MINUTE], "the whole warm time after the job's end"


def test_a_hung_job_on_a_warm_pod_is_still_ended_at_the_usual_idle_times(tmp_path: Path, clock: FakeClock) -> None:
    pod = warm_pod(tmp_path, clock, 60.0)
    agent = pod.agent()
    pod.job.start(worker="python")  # hung for good: no CPU, no I/O
    seen = tick(pod, agent, 30 * MINUTE, MINUTE)
    assert when(seen, "notify:idle_warning") == [16 * MINUTE], "GPUC_IDLE_WARN_S after its first reading"
    assert when(seen, "destroy") == [21 * MINUTE]
    assert "hung?" in pod.functions.events[0].message


@pytest.mark.parametrize(
    ("warm_s", "limits"),
    [(60.0, (60.0, 30.0)), (30 * MINUTE, (30 * MINUTE, 25 * MINUTE)), (4 * 3600.0, (4 * 3600.0, 4 * 3600.0 - 300))],
)
def test_the_warm_warning_comes_the_usual_lead_ahead_but_never_in_the_first_half(
    warm_s: float, limits: tuple[float, float]
) -> None:
    fields = {"pod_id": "p", "provider": "local", "experiment": "e", "run_id": "r", "watchdog_url": "http://f"}
    cfg = AgentConfig.from_mapping({**fields, "warm_s": warm_s})
    assert warm_limits(cfg) == limits
    waiting, running = Thresholds.from_config(cfg), Thresholds.from_config(cfg, job=True)
    assert (waiting.destroy_s, waiting.warn_s) == limits
    assert running.destroy_s == max(20 * MINUTE, warm_s) and running.destroy_s - running.warn_s == 5 * MINUTE
