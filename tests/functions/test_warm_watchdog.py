"""A warm pod (`up --warm`) in the watchdog's words: the status page says it is kept between jobs and, with no
job, when its warm time ends it (not "idle at ... (now)" from the idle times of a pod that ends with its job);
the phone's pushes say the pod stays warm and how to run the next job."""

from __future__ import annotations

from fakes.watchdog import World

from gpuc.core.api import DeadlineRequest
from gpuc.core.titles import clock
from gpuc.core.warm import warm_lead
from gpuc.functions.actions.status_page import next_step, outcome, pod_card
from gpuc.functions.reaper.record import ReaperMeta

WARM_S = 1800.0


def test_the_page_says_a_warm_pod_waits_for_its_next_job_until_its_warm_time_ends(world: World) -> None:
    world.register("warm", warm_s=WARM_S)
    world.ping("warm", job_running=True)
    card = pod_card(world.deps, world.pod("warm"), ReaperMeta(last_run=world.now), world.now)
    assert "a job is running; kept 30 min after each job, for the next `gpuc run`" in card
    world.ping("warm", idle_minutes=2.0)  # the job ended two minutes ago: its agent counts from then
    said = next_step(world.settings, world.pod("warm"), ReaperMeta(last_run=world.now), world.now)
    ends = world.now + WARM_S - 120
    assert said == f"warm, no job: ends itself at {clock(ends)} (in 28 min) (results synced first), unless a job starts"
    card = pod_card(world.deps, world.pod("warm"), ReaperMeta(last_run=world.now), world.now)
    assert "kept 30 min after each job" in card and "a job is running" not in card


def test_a_pod_that_is_not_warm_reads_as_before(world: World) -> None:
    world.register("plain")
    world.ping("plain", idle_minutes=2.0)
    said = next_step(world.settings, world.pod("plain"), ReaperMeta(last_run=world.now), world.now)
    assert said.startswith("ends itself idle at ") and "warm" not in said
    assert "Warm" not in pod_card(world.deps, world.pod("plain"), ReaperMeta(last_run=world.now), world.now)


def test_the_phone_says_a_warm_pod_stays_for_the_next_job(world: World) -> None:
    world.register("warm", warm_s=WARM_S)
    world.event("warm", "job_exit", "job exited with code 0 after 4s; results: 1 file", exit_code=0, duration_s=4.0)
    world.event("warm", "job_exit", "job exited with code 1 after 4s; last line: boom", exit_code=1, duration_s=4.0)
    world.event("warm", "idle_warning", "warm pod, no job for 25 min (--warm 30 min): it syncs results/ and ends ...")
    world.event("warm", "idle_destroy", "warm pod, no job for 30 min (--warm 30 min); results: 1", end_at=world.now)
    ok, failed, warning, end = world.store.recent_notifications(4)
    assert ok.message.splitlines()[0] == (
        "Results synced; the pod stays warm for the next job: `gpuc run warm --sync --wait -- CMD`."
    )
    assert failed.message.splitlines()[0] == (
        "See why: `gpuc logs warm`; it stays warm for the next job: `gpuc run warm --sync --wait -- CMD`."
    )
    lead = warm_lead(WARM_S, world.settings.idle_destroy_s, world.settings.idle_warn_s)
    assert warning.title == f"exp warm, no job: ends at {clock(world.now + lead)}"
    assert warning.message.splitlines()[0].startswith("Run the next job: `gpuc run warm --sync --wait -- CMD`")
    assert end.title.startswith("exp warm time over: results saved, destroying")


def test_a_hung_job_on_a_warm_pod_is_warned_as_on_any_pod(world: World) -> None:
    world.register("warm", warm_s=WARM_S)
    world.event("warm", "idle_warning", "idle for 15 min (the job, pid 7, made no CPU or I/O progress: hung?): ...")
    (warning,) = world.store.recent_notifications(1)
    assert warning.title.startswith("exp idle: destroys at ")


def test_a_warm_pods_first_line_fits_a_lock_screen_with_a_real_pods_id(world: World) -> None:
    pod_id = "x7kq2m9d4rwz1p"  # a RunPod id's length; local and Vast ids are shorter
    world.register(pod_id, warm_s=WARM_S)
    for code in (0, 1):
        world.event(pod_id, "job_exit", "job exited", exit_code=code, duration_s=4.0)
    world.event(pod_id, "idle_warning", "warm pod, no job for 25 min (--warm 30 min): ...")
    for sent in world.store.recent_notifications(3):
        assert len(sent.message.splitlines()[0]) <= 120, sent.message


def test_an_ended_warm_pod_reads_as_its_warm_time_over(world: World) -> None:
    world.register("warm", warm_s=WARM_S)
    world.event("warm", "idle_destroy", "warm pod, no job for 30 min (--warm 30 min); results: 1", end_at=world.now)
    world.store.update_if("warm", {}, {"state": "ended", "ended_by": "idle", "end_at": world.now})
    assert outcome(world.pod("warm"), world.now).startswith("ended itself: warm, no job for 30 min, ")


def test_a_warm_pods_deadline_moved_for_its_next_job_is_recorded_without_a_push(world: World) -> None:
    """`gpuc run` moves a warm pod's deadline with each job: the phone hears the job's end, not five moves."""
    world.register("warm", warm_s=WARM_S, deadline_at=world.now + 3600)
    before = len(world.store.recent_notifications(100))
    quiet = DeadlineRequest(deadline_at=world.now + 7200, at_least=True, quiet=True)
    moved = world.admin("POST", "/v1/pods/warm/deadline", quiet)
    assert moved.status == 200 and world.pod("warm").deadline_at == world.now + 7200
    assert len(world.store.recent_notifications(100)) == before
    loud = DeadlineRequest(extend_s=3600)  # `gpuc extend`: said, as always
    assert world.admin("POST", "/v1/pods/warm/deadline", loud).status == 200
    assert world.store.recent_notifications(1)[0].title.startswith("exp deadline moved: destroys at")
