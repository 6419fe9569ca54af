"""A pod that could only stop itself (its key refused, or a "not found" it saw through: F9, F9n) says its end
again with that word: when its end notification was lost (the watchdog unreachable for those seconds), the
watchdog still records the end and its reaper destroys the pod after the grace, not after a stopped pod's 24 h
(F7's rule for a pod it was told nothing about). Through the real Ender, handlers and reaper (the drill's stage)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.providers.outcome import StoppedInstead
from gpuc.testkit.drill_stage import MIN, SYNC_S, DrillPod, FaultPlan, FaultTally, Stage


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    s = Stage(tmp_path, FaultPlan(0, on=False, tally=FaultTally()))
    yield s
    s.close()


def stopped_only(stage: Stage, pod: DrillPod) -> None:
    """The self-destroy only stops the pod; the watchdog can be reached again by then."""

    def stop() -> str:
        pod.transport.down = False
        stage.provider.set(pod.pod_id, status="stopped", gpu_util_pct=None)
        return StoppedInstead("pod not found to terminate, but it lives: stopped pod instead")

    pod.destroyer.target = stop


def test_a_lost_end_notification_is_made_good_by_the_stopped_word(stage: Stage) -> None:
    pod = stage.launch_busy("stopped-pod", 20 * MIN)
    stopped_only(stage, pod)
    pod.transport.down = True  # the end notification cannot get out
    exit_at = stage.now
    assert pod.job_exit(0, 20 * MIN) == "destroy_failed"
    rec = stage.real_store.get_pod(pod.pod_id)
    assert rec is not None and rec.state == "ended"
    assert rec.end_at == exit_at + SYNC_S  # when it ended (after its sync), not when the word got through
    stage.run_until_gone(pod.pod_id, 2 * 3600)
    billed = stage.billed_min(pod.pod_id, exit_at)
    assert billed is not None, "the stopped pod was left to the stopped limit (24 h)"
    assert billed <= stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
