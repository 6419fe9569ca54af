"""The watchdog's warning and destroy notifications say what a destroy from outside costs: when
results were last pushed, how many, where (the pod's word, defanged), and that the job was still running if
the last heartbeat said so."""

from __future__ import annotations

from fakes.watchdog import World

MIN = 60.0


def test_the_warning_and_the_destroy_name_the_last_push_and_the_running_job(world: World) -> None:
    world.register("p1")
    # The pod's last word: its job runs, 41 files pushed 6 min before this ping.
    world.ping("p1", job_running=True, pushed_ago_s=6 * MIN, pushed_files=41, pushed_to="s3://results/runs/exp/run01/")
    world.clock.advance(5 * MIN)
    world.reap()
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    assert world.provider.destroyed == ["p1"]
    texts = {m.kind: m.message for m in world.outbox()}
    assert set(texts) >= {"mark", "destroying", "destroyed"}
    for kind in ("mark", "destroying", "destroyed"):
        assert "the job was still running" in texts[kind]
        assert "to s3[:]//results/runs/exp/run01/: 41 files" in texts[kind]
    # 6 min before the ping, then 5 min of silence: 11 min ago when marked, later by the grace when destroyed.
    assert "Results pushed 11 min ago" in texts["mark"]
    destroyed_ago = round((6 * MIN + 5 * MIN + world.settings.destroy_grace_s) / 60)
    assert f"Results pushed {destroyed_ago} min ago" in texts["destroyed"]


def test_a_pod_that_never_reported_a_push_is_said_to_lose_its_results(world: World) -> None:
    world.register("p1")
    world.ping("p1", job_running=False)
    world.clock.advance(5 * MIN)
    world.reap()
    [mark] = [m for m in world.outbox() if m.kind == "mark"]
    assert "No results push was reported" in mark.message and "still running" not in mark.message
