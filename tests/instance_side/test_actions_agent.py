"""The phone's intents as the real agent hears them: "destroy now" is the agent's own ending (sync
-> notify -> destroy, kept on a failed sync), "retry sync" is its kept loop's retry, now. The real agent, the
real handlers and reaper, on the drill's stage (virtual time)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.functions.buttons import OfferKind, offer
from gpuc.functions.links import Verb
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.testkit.drill_actions import tap
from gpuc.testkit.drill_stage import EXPERIMENT, MIN, FaultPlan, FaultTally, Stage


@pytest.fixture
def stage(tmp_path: Path) -> Iterator[Stage]:
    s = Stage(tmp_path, FaultPlan(0, on=False, tally=FaultTally()))
    yield s
    s.close()


def tap_offer(stage: Stage, pod_id: str, kind: OfferKind, verb: Verb) -> int:
    rec = stage.real_store.get_pod(pod_id)
    token = next(o.token for o in offer(stage.deps.store, stage.deps.settings, rec, kind, stage.now) if o.verb == verb)
    return tap(stage, token).status


def test_destroy_now_is_the_pods_own_end_sync_first(stage: Stage) -> None:
    pod = stage.launch_busy("a1-pod", 10 * MIN)
    assert tap_offer(stage, "a1-pod", "pending_destroy", "destroy") == 200
    stage.run(5 * MIN, until=lambda: not stage.provider.alive("a1-pod"))
    assert pod.self_destroys == 1 and stage.reaper_destroys["a1-pod"] == 0
    assert (pod.bucket_dir / "metrics.json").read_text() == '{"loss": 0.125}\n'  # synced before the destroy
    assert pod.sync.calls[-2:] == ["sync", "verify"]
    rec = stage.real_store.get_pod("a1-pod")
    assert rec is not None and rec.ended_by == "phone"


def test_destroy_now_with_a_failing_sync_keeps_the_pod(stage: Stage) -> None:
    pod = stage.launch_busy("a2-pod", 10 * MIN, sync_broken=True)
    assert tap_offer(stage, "a2-pod", "pending_destroy", "destroy") == 200
    stage.run(30 * MIN)
    assert stage.provider.alive("a2-pod") and pod.self_destroys == 0 and not stage.provider.destroyed
    rec = stage.real_store.get_pod("a2-pod")
    assert rec is not None and rec.kept_at is not None and rec.intent is None


def test_retry_sync_from_the_phone_retries_now(stage: Stage) -> None:
    pod = stage.launch_busy("a3-pod", 10 * MIN, sync_broken=True)
    assert pod.job_exit(0, 600) == "kept_sync_failed"
    stage.run(2 * MIN)
    good = stage.root / "good-bucket"
    pod.sync.inner = FileBucketSync(good, EXPERIMENT, "a3-pod")  # the user fixed the bucket
    pod.bucket_dir = good / EXPERIMENT / "a3-pod"
    assert tap_offer(stage, "a3-pod", "kept", "retry") == 200
    stage.run(5 * MIN, until=lambda: not stage.provider.alive("a3-pod"))  # the next nag is an hour away
    assert pod.self_destroys == 1
    assert (pod.bucket_dir / "metrics.json").is_file()
