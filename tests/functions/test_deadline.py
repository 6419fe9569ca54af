"""The watchdog's half of the deadline (F15): a pod past its deadline is ended whatever its pings and
GPU say, warned one period ahead, destroyed at the first pass at or after it; nothing but an uncertain
reading (blind, "unknown", not gpuc's) or the pass-wide holds keeps it. And the route that moves it, held
to the user's cap at the watchdog."""

from __future__ import annotations

from fakes.watchdog import ADMIN, World, outage

from gpuc.core import api
from gpuc.functions.deadline import alert_key
from gpuc.functions.store import StoredPod

HOUR = 3600.0


def busy_pod(world: World, pod_id: str = "p1", hours: float = 1.0) -> float:
    """A pod registered now with a deadline `hours` ahead, its GPU 100 % busy at the provider. Returns the
    deadline."""
    deadline = world.now + hours * HOUR
    world.register(pod_id, deadline_at=deadline)
    world.provider.set(pod_id, gpu_util_pct=100.0)
    return deadline


def marks(world: World, pod_id: str) -> list[str]:
    return [n.title for n in world.store.recent_notifications(1000) if n.pod_id == pod_id and n.kind == "mark"]


def pass_and_ping(world: World, pod_id: str) -> None:
    """One reaper period: the pod pings (its agent, or a host faking it), then a pass."""
    world.clock.advance(world.settings.reaper_period_s)
    world.ping(pod_id, gpus=[{"index": 0, "utilization_pct": 100.0}], job_running=True)
    world.reap()


def deadline_req(**fields: object) -> api.DeadlineRequest:
    return api.DeadlineRequest.model_validate(fields)


# -- the reaper's rule ---------------------------------------------------------------------------------------


def test_a_busy_pinging_pod_is_warned_one_period_ahead_and_destroyed_at_its_deadline(world: World) -> None:
    deadline = busy_pod(world)
    period = world.settings.reaper_period_s
    while world.now + period < deadline - period:
        pass_and_ping(world, "p1")
        assert marks(world, "p1") == [] and world.provider.alive("p1")
    while world.provider.alive("p1"):
        pass_and_ping(world, "p1")
        assert world.now <= deadline + period, "destroyed later than the deadline + one period"
    gone_at = world.provider.destroyed_at["p1"]
    assert deadline <= gone_at <= deadline + period
    assert len(marks(world, "p1")) == 1
    rec = world.pod("p1")
    assert (rec.state, rec.ended_by) == ("destroyed", "reaper")
    assert rec.end_at is not None and rec.end_at >= deadline


def test_pings_cannot_cancel_a_deadline_mark_nor_repeat_its_warning(world: World) -> None:
    period = world.settings.reaper_period_s
    deadline = busy_pod(world, hours=2 * period / HOUR)  # the first pass already warns
    pass_and_ping(world, "p1")
    assert world.pod("p1").state == "down"
    for _ in range(3):
        world.ping("p1")  # a ping resets a late/down state to ok ...
        assert world.pod("p1").state == "ok"
        world.clock.advance(period / 4)
        world.reap()  # ... and the next pass puts the mark back, silently
        assert world.pod("p1").state in ("down", "destroyed")
    world.run(2 * period, keep_alive=("p1",))
    assert not world.provider.alive("p1") and world.provider.destroyed_at["p1"] <= deadline + period
    assert len(marks(world, "p1")) == 1, marks(world, "p1")


def test_a_ping_racing_the_claim_cannot_save_a_pod_past_its_deadline(world: World) -> None:
    """The records are read before the provider is; a pod pinging meanwhile (every second, on a hostile
    host) moves its seq under the reaper's feet. The deadline's claim is not conditioned on the seq."""
    deadline = busy_pod(world, hours=0.1)
    world.clock.advance(deadline - world.now + 1)
    world.provider.on_list = lambda: pinged(world, "p1")
    world.reap()
    assert not world.provider.alive("p1")


def test_a_busy_gpu_at_the_provider_does_not_veto_it(world: World) -> None:
    deadline = busy_pod(world, hours=0.5)
    world.run(deadline - world.now + world.settings.reaper_period_s, keep_alive=("p1",))
    assert not world.provider.alive("p1")
    assert "busy" not in " ".join(n.message for n in world.store.recent_notifications(100))


def test_a_lease_does_not_hold_the_deadline(world: World) -> None:
    deadline = busy_pod(world, hours=0.5)
    assert world.admin("POST", "/v1/pods/p1/keep", api.KeepRequest(until=deadline + 6 * HOUR)).status == 200
    world.run(deadline - world.now + world.settings.reaper_period_s, keep_alive=("p1",))
    assert not world.provider.alive("p1")


def test_the_fleet_veto_does_not_hold_it(world: World) -> None:
    """Most pods silent at once suspects the watchdog (no silence kill); a pod at its deadline is not
    judged on its silence."""
    settings = world.settings
    deadline = busy_pod(world, hours=0.5)
    for i in range(4):
        world.register(f"q{i}")
    world.run(deadline - world.now + settings.reaper_period_s)  # nobody pings: the fleet looks silent
    assert not world.provider.alive("p1")
    assert all(world.provider.alive(f"q{i}") for i in range(4))


def test_a_blind_provider_holds_it_until_it_can_see(world: World) -> None:
    deadline = busy_pod(world, hours=0.5)
    world.provider.fail = outage()
    world.run(deadline - world.now + 3 * world.settings.reaper_period_s, keep_alive=("p1",))
    assert world.provider.alive("p1"), "destroyed on a reading it could not make"
    world.provider.fail = None
    world.run(world.settings.reaper_period_s, keep_alive=("p1",))
    assert not world.provider.alive("p1")


def test_an_unknown_provider_status_holds_it_with_an_alert(world: World) -> None:
    deadline = busy_pod(world, hours=0.5)
    world.provider.set("p1", status="unknown")
    world.run(deadline - world.now + 3 * world.settings.reaper_period_s, keep_alive=("p1",))
    assert world.provider.alive("p1")
    assert "alert" in world.kinds("p1")
    world.provider.set("p1", status="running")
    world.run(world.settings.reaper_period_s, keep_alive=("p1",))
    assert not world.provider.alive("p1")


def test_a_pod_the_provider_does_not_mark_as_gpucs_is_never_touched(world: World) -> None:
    deadline = busy_pod(world, hours=0.5)
    world.provider.set("p1", managed=False)
    world.run(deadline - world.now + 3 * world.settings.reaper_period_s, keep_alive=("p1",))
    assert world.provider.alive("p1") and world.provider.destroyed == []


def test_the_destroy_cap_holds_deadline_destroys_too(world: World) -> None:
    cap = world.settings.max_destroys_per_run
    deadline = world.now + HOUR
    for i in range(cap + 2):
        busy_pod(world, f"p{i}", hours=1.0)
    world.clock.advance(deadline - world.now + 1)
    world.reap()
    assert len(world.provider.destroyed) == cap
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()
    assert len(world.provider.destroyed) == cap + 2


def test_stopped_and_paused_pods_are_left_to_their_own_rules(world: World) -> None:
    """They bill no GPU: the stopped rule (24 h) holds a stopped pod, kept for its disk."""
    deadline = busy_pod(world, hours=0.5)
    world.provider.set("p1", status="stopped", gpu_util_pct=None)
    world.run(deadline - world.now + 3 * world.settings.reaper_period_s)
    assert world.provider.alive("p1")


def test_a_pod_registered_without_a_deadline_gets_its_start_plus_max_hours(world: World) -> None:
    started = world.now
    world.register("old")  # an older gpuc's `up`: no deadline sent
    world.provider.set("old", gpu_util_pct=100.0)
    bound = started + world.settings.max_hours * HOUR + world.settings.reaper_period_s
    world.run(world.settings.max_hours * HOUR - 2 * world.settings.reaper_period_s, keep_alive=("old",))
    assert world.provider.alive("old")
    world.run(3 * world.settings.reaper_period_s, keep_alive=("old",))
    assert not world.provider.alive("old") and world.provider.destroyed_at["old"] <= bound


def test_an_adopted_strays_deadline_counts_from_first_sight(world: World) -> None:
    world.provider.add("stray", created_at=world.now - 100 * HOUR)
    world.reap()
    rec = world.pod("stray")
    assert rec.origin == "adopted" and rec.deadline_at == world.now + world.settings.max_hours * HOUR


def test_a_pod_ended_by_its_wrapper_but_still_busy_is_destroyed_by_its_deadline(world: World) -> None:
    """A host that records an end and then keeps the GPU busy defeats the "ended" rule's busy veto: not
    the deadline."""
    deadline = busy_pod(world, hours=0.5)
    world.clock.advance(60)
    assert world.event("p1", "job_exit", "done", end_at=world.now).status == 200
    world.run(deadline - world.now + world.settings.reaper_period_s)
    assert not world.provider.alive("p1")


# -- the heartbeat answer and registration ---------------------------------------------------------------


def test_the_heartbeat_answer_carries_the_records_deadline(world: World) -> None:
    deadline = busy_pod(world, hours=3.0)
    answer = world.ping("p1")
    assert answer.status == 200 and answer.body["deadline_at"] == deadline


def test_a_registered_deadline_past_the_cap_is_pulled_in_to_it(world: World) -> None:
    cap = world.settings.max_lifetime_hours
    busy_pod(world, hours=cap + 5)
    assert world.pod("p1").deadline_at == world.pod("p1").started_at + cap * HOUR  # type: ignore[operator]


# -- the route that moves it -----------------------------------------------------------------------------


def test_extend_moves_it_later_and_the_next_answer_says_so(world: World) -> None:
    deadline = busy_pod(world, hours=1.0)
    answer = world.admin("POST", "/v1/pods/p1/deadline", deadline_req(extend_s=2 * HOUR))
    assert answer.status == 200, answer.body
    assert (answer.body["deadline_at"], answer.body["previous"]) == (deadline + 2 * HOUR, deadline)
    assert world.ping("p1").body["deadline_at"] == deadline + 2 * HOUR
    assert "deadline" in world.kinds("p1")  # the phone hears the new end
    world.run(HOUR + world.settings.reaper_period_s, keep_alive=("p1",))
    assert world.provider.alive("p1"), "destroyed at the old deadline"


def test_the_cap_is_enforced_at_the_watchdog(world: World) -> None:
    busy_pod(world, hours=1.0)
    before = world.pod("p1")
    too_late = before.started_at + world.settings.max_lifetime_hours * HOUR + 60  # type: ignore[operator]
    answer = world.admin("POST", "/v1/pods/p1/deadline", deadline_req(deadline_at=too_late))
    assert answer.status == 400
    assert "max_lifetime_hours 48 h after the pod's start" in answer.body["error"]
    assert world.pod("p1").deadline_at == before.deadline_at, "stored what it refused"
    answer = world.admin("POST", "/v1/pods/p1/deadline", deadline_req(extend_s=48 * HOUR))
    assert answer.status == 400 and world.pod("p1").deadline_at == before.deadline_at


def test_at_least_never_shortens_and_is_capped_not_refused(world: World) -> None:
    deadline = busy_pod(world, hours=3.0)
    sooner = world.admin("POST", "/v1/pods/p1/deadline", deadline_req(deadline_at=world.now + HOUR, at_least=True))
    assert sooner.status == 200 and sooner.body["deadline_at"] == deadline
    far = world.now + 100 * HOUR
    capped = world.admin("POST", "/v1/pods/p1/deadline", deadline_req(deadline_at=far, at_least=True))
    assert capped.status == 200 and capped.body["capped"] is True
    assert capped.body["deadline_at"] == capped.body["limit_at"] == world.pod("p1").deadline_at


def test_moving_it_clears_a_deadline_mark(world: World) -> None:
    period = world.settings.reaper_period_s
    busy_pod(world, hours=period / HOUR)
    world.reap()
    assert world.pod("p1").state == "down" and world.pod("p1").alerted is not None
    assert world.admin("POST", "/v1/pods/p1/deadline", deadline_req(extend_s=HOUR)).status == 200
    rec = world.pod("p1")
    assert (rec.state, rec.destroy_at, rec.alerted) == ("ok", None, None)
    world.run(2 * period, keep_alive=("p1",))
    assert world.provider.alive("p1")


def test_the_route_refuses_bad_requests_and_stores_nothing(world: World) -> None:
    deadline = busy_pod(world, hours=1.0)
    for body in (deadline_req(), deadline_req(extend_s=60, deadline_at=world.now + HOUR)):
        assert world.admin("POST", "/v1/pods/p1/deadline", body).status == 400
    assert world.admin("POST", "/v1/pods/p1/deadline", deadline_req(deadline_at=world.now - 60)).status == 400
    assert world.admin("POST", "/v1/pods/nope/deadline", deadline_req(extend_s=60)).status == 404
    assert world.call("POST", "/v1/pods/p1/deadline", b'{"extend_s": 60}').status == 401
    bad = world.call("POST", "/v1/pods/p1/deadline", b'{"extend_s": -1}', {"Authorization": f"Bearer {ADMIN}"})
    assert bad.status == 400
    assert world.pod("p1").deadline_at == deadline
    world.store.update_if("p1", {}, {"state": "ended"})
    assert world.admin("POST", "/v1/pods/p1/deadline", deadline_req(extend_s=60)).status == 409


def test_a_deadline_mark_key_is_per_value() -> None:
    assert alert_key(1_790_000_000.4) == "deadline@1790000000" != alert_key(1_790_003_600.0)


def test_the_store_keeps_what_the_answer_reckons_from(world: World) -> None:
    """PodAuth carries what the answer's deadline is reckoned from (sqlite; tests/aws does DynamoDB)."""
    busy_pod(world, hours=2.0)
    auth = world.store.get_auth("p1")
    rec: StoredPod = world.pod("p1")
    assert auth is not None
    assert (auth.deadline_at, auth.started_at, auth.registered_at, auth.origin) == (
        rec.deadline_at,
        rec.started_at,
        rec.registered_at,
        "registered",
    )


def pinged(world: World, pod_id: str) -> None:
    assert world.ping(pod_id).status == 200
