"""The pod's half of the deadline (F15): the agent warns 15 min ahead and, a lead before it, ends the pod
through the Ender (sync -> notify -> destroy; a failed sync keeps it), whatever the job, GPU, ssh, `.keep`
or a lease say. It adopts the watchdog's deadline from every answer, keeps the last one while the watchdog
is unreachable, never takes an absurd one, and compares on the watchdog's clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.pod import MINUTE, Pod, SkewedClock, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.sshscan import SshSession

HOUR = 3600.0


def busy(pod: Pod) -> None:
    """A job that looks alive in every way the idle watch knows."""
    pod.gpu.util, pod.procs.pids = 100.0, [4242]
    pod.ssh.sessions_ = [SshSession(tty="pts/0", last_input=pod.clock.now())]


def run(pod: Pod, minutes: int, agent: Agent | None = None) -> tuple[Agent, dict[str, list[int]]]:
    """Tick once a minute, busy throughout; per call kind, the minutes at which it happened."""
    agent = agent or pod.agent()
    seen: dict[str, list[int]] = {}
    start = len(pod.calls)
    for minute in range(minutes):
        busy(pod)
        agent.tick(pod.ctx.clock.now())  # on the pod's own clock (skewed in one test)
        for call in pod.calls[start:]:
            seen.setdefault(call, []).append(minute)
        start = len(pod.calls)
        pod.clock.advance(MINUTE)
    return agent, seen


def in_an_hour(tmp_path: Path, clock: FakeClock) -> Pod:
    return wire(tmp_path / "pod", clock, deadline_at=clock.now() + HOUR)


def test_it_warns_15_min_ahead_then_ends_through_the_ender_a_lead_before(tmp_path: Path, clock: FakeClock) -> None:
    pod = in_an_hour(tmp_path, clock)
    agent, seen = run(pod, 70)
    assert seen["notify:deadline_warning"] == [45]
    assert seen["destroy"] == [58]  # 60 min - the 2 min lead: the sync ends before the watchdog's backstop
    assert pod.calls.index("sync") < pod.calls.index("notify:deadline_destroy") < pod.calls.index("destroy")
    end = pod.functions.events[-1]
    assert end.kind == "deadline_destroy" and end.end_at is not None
    # Ended 2 min early: the words say so, never "deadline reached" before it is.
    assert "in 2 min: ending now, results/ first" in end.message and "reached" not in end.message
    assert agent.stopped and "heartbeat" not in pod.calls[pod.calls.index("destroy") :]


def test_a_failed_sync_at_the_deadline_keeps_the_pod_and_nags(tmp_path: Path, clock: FakeClock) -> None:
    pod = in_an_hour(tmp_path, clock)
    pod.sync.fail = "disk full"
    agent, seen = run(pod, 60 + 90)
    assert "destroy" not in seen, "destroyed after a failed sync"
    assert seen["notify:sync_failed"] == [58, 118]  # kept; retried at the nag interval
    assert not agent.stopped


def test_keep_lease_job_gpu_and_ssh_do_not_hold_it(tmp_path: Path, clock: FakeClock) -> None:
    pod = in_an_hour(tmp_path, clock)
    pod.paths.keep_file.parent.mkdir(parents=True, exist_ok=True)
    pod.paths.keep_file.write_text("")
    pod.functions.lease_until = clock.now() + 10 * HOUR
    pod.job.start(worker="python", cpu_per_s=1.0, io_per_s=1e6)
    _, seen = run(pod, 70)
    assert seen["destroy"] == [58]


def test_it_adopts_an_earlier_deadline_from_the_answer(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, deadline_at=clock.now() + 10 * HOUR)
    pod.functions.deadline_at = clock.now() + 30 * MINUTE  # a budget pulled it in
    _, seen = run(pod, 40)
    assert seen["destroy"] == [28]


def test_it_adopts_a_later_one_and_warns_again_for_it(tmp_path: Path, clock: FakeClock) -> None:
    pod = in_an_hour(tmp_path, clock)
    agent, seen = run(pod, 50)
    assert seen["notify:deadline_warning"] == [45]
    pod.functions.deadline_at = clock.now() - 50 * MINUTE + 2 * HOUR  # `gpuc extend POD 1h`
    _, later = run(pod, 80, agent)
    assert "destroy" not in seen and later["notify:deadline_warning"] == [55]  # minute 105 of its life
    assert later["destroy"] == [68]


def test_it_keeps_its_last_known_deadline_while_the_watchdog_is_unreachable(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, deadline_at=clock.now() + 10 * HOUR)
    pod.functions.deadline_at = clock.now() + HOUR
    agent, _ = run(pod, 5)
    pod.functions.down = True
    _, seen = run(pod, 60, agent)
    assert seen["destroy"] == [53]  # minute 58 of its life, with nobody to ask


@pytest.mark.parametrize("absurd", [0.0, 1e300, float("nan"), -1.0])
def test_an_absurd_deadline_in_an_answer_is_never_taken(tmp_path: Path, clock: FakeClock, absurd: float) -> None:
    pod = in_an_hour(tmp_path, clock)
    pod.functions.deadline_at = absurd
    _, seen = run(pod, 70)
    assert seen["destroy"] == [58]


def test_it_compares_on_the_watchdogs_clock(tmp_path: Path, clock: FakeClock) -> None:
    """The pod's clock is 6 min ahead: it learns the offset from the answers and ends at the watchdog's
    deadline minus the lead, not 6 minutes early."""
    pod = wire(tmp_path / "pod", clock, pod_clock=SkewedClock(clock, 6 * MINUTE), deadline_at=clock.now() + HOUR)
    _, seen = run(pod, 70)
    assert seen["destroy"] == [58]


def test_without_a_deadline_a_busy_pod_is_never_ended_by_it(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock)
    _, seen = run(pod, 24 * 60)
    assert "destroy" not in seen and "notify:deadline_warning" not in seen
