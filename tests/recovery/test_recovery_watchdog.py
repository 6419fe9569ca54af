"""The watchdog runs recovery for a run registered with `recovery` (functions/recovery/rerent.py), on the Vast
emulator through the real VastProvider, on a FakeClock: what it re-rents, and every way it must not."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from fakes import recovery as rec_fixtures

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.pod import RESUME_ENV
from gpuc.core.signing import derive_key
from gpuc.functions.actions import verbs
from gpuc.functions.recovery import claim, rerent, runs, watch
from gpuc.functions.store import Store
from gpuc.testkit.spot_world import ADMIN, BID, PLANTED_SECRET, RUN_ID, WAIT_S, RecWorld, make_rec_world

# The recovering run's worlds (tests/fakes/recovery.py), on SQLite and on both stores
world, any_world = rec_fixtures.world, rec_fixtures.any_world

# -- register -------------------------------------------------------------------------------------


def test_register_keeps_the_run_once_and_marks_the_first_attempt(any_world: RecWorld) -> None:
    world = any_world
    first = world.up()
    rec = world.store.get_pod(first.id)
    assert rec is not None and (rec.run_id, rec.attempt) == (RUN_ID, 1)
    meta = world.store.get_meta(runs.run_key(RUN_ID))
    assert meta is not None and runs.live_ids(world.store) == [RUN_ID]
    again = world.admin("POST", "/v1/pods", world.register_body(first.id).model_dump_json().encode())
    assert again.status == 200
    assert runs.live_ids(world.store) == [RUN_ID]  # a retried register duplicates nothing
    assert world.store.get_meta(runs.run_key(RUN_ID)) == meta  # nor rewrites the run


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"provider": "runpod"}, "recovery is for interruptible Vast pods only, not runpod"),
        ({"name": "gpuc-other-run"}, "recovery.spec does not match the pod registered (run id, provider, experiment)"),
    ],
    ids=["runpod", "run-id-disagrees"],
)
def test_register_refuses_what_recovery_cannot_do_and_stores_nothing(
    world: RecWorld, changes: dict[str, Any], error: str
) -> None:
    world.deps.providers.known = world.deps.providers.known | {"runpod"}
    body = world.register_body("123", **changes)
    answer = world.admin("POST", "/v1/pods", body.model_dump_json().encode())
    assert (answer.status, answer.body) == (400, {"error": error})
    assert world.store.list_pods() == [] and world.store.get_meta(runs.run_key(RUN_ID)) is None
    assert runs.live_ids(world.store) == []


# -- the pass -------------------------------------------------------------------------------------


def test_a_re_rent_on_both_stores_boots_once_with_the_kit(any_world: RecWorld) -> None:
    world = any_world
    first = world.up()
    world.outbid_and_wait()
    world.reap()
    run = world.run()
    assert run.attempts[0].pod_id == first.id and len(run.attempts) == 2
    new = run.latest.pod_id
    rec = world.store.get_pod(new)
    assert rec is not None and (rec.run_id, rec.attempt, rec.price_per_hour) == (RUN_ID, 2, BID)
    assert rec.deadline_at == run.envelope.deadline and rec.state == "ok"
    inst = world.emu.instances[int(new)]
    assert inst.bid == BID and inst.label == "gpuc-spot-r1-a2"  # its own name; never above the bid
    assert inst.env[RESUME_ENV] == run.request.results_at and inst.env["GPUC_RUN_ID"] == RUN_ID
    ticket = world.ticket_of(new)
    assert run.tickets[new].sha256 == hashlib.sha256(ticket.encode()).hexdigest()
    assert ticket not in world.store.get_meta(runs.run_key(RUN_ID)).model_dump_json()  # type: ignore[union-attr]
    assert [i.id for i in world.emu.alive()] == [int(new)]  # the paused one is gone
    answer = world.boot(new, ticket)
    assert answer.status == 200, answer.body
    booted = api.BootAnswer.model_validate(answer.body)
    assert booted.kit.config["pod_id"] == new and booted.kit.config["deadline_at"] == run.envelope.deadline
    assert booted.kit.secrets == {"HF_TOKEN": PLANTED_SECRET} and booted.resume_from == run.request.results_at
    assert derive_key(booted.token) == rec.key  # its heartbeats verify with the token it got
    # Spent: a second boot with the same ticket is refused, and changes nothing.
    before = world.store.get_meta(runs.run_key(RUN_ID))
    assert (world.boot(new, ticket).status, world.boot(new, ticket).body) == (
        403,
        {"error": "bad or spent boot ticket"},
    )
    assert world.store.get_meta(runs.run_key(RUN_ID)) == before


def test_one_reading_of_paused_rents_nothing(world: RecWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    first = world.up()
    world.outbid_and_wait()
    real = world.vast.get
    calls = iter(range(1000))
    # Every other read says "gone": the two reads of a pass never agree.
    monkeypatch.setattr(world.vast, "get", lambda pod_id: None if next(calls) % 2 else real(pod_id))
    for _ in range(3):
        world.reap()
        world.clock.advance(60)
    assert world.creates() == 1 and not world.emu.ops("destroy")
    assert world.run().latest.pod_id == first.id


def test_recovery_waits_for_the_bid_to_win_again_before_re_renting(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT_S - 5)
    world.reap()
    assert world.creates() == 1 and not world.emu.ops("destroy")
    world.clock.advance(10)
    world.reap()
    assert world.creates() == 2


def test_a_destroy_that_does_not_confirm_rents_nothing(world: RecWorld) -> None:
    first = world.up()
    world.outbid_and_wait()
    world.emu.destroy_lag_polls = 500  # still listed after the destroy
    world.reap()
    assert world.creates() == 1 and world.run().latest.pod_id == first.id
    assert world.run().acting is None  # the claim is released: the next pass decides again


def test_the_jobs_own_end_is_never_re_rented(home: Path, clock: FakeClock) -> None:
    # The job ended (its wrapper recorded the end) and the pod is outbid before its own destroy: the reaper's
    # ended rule waits its grace, recovery never takes the pause for an outbid job.
    world = make_rec_world(home, clock, destroy_grace_s=2 * WAIT_S)
    try:
        first = world.up()
        end = api.EndRequest.model_validate({"end_at": world.now, "by": "wrapper"})
        assert world.admin("POST", f"/v1/pods/{first.id}/end", end.model_dump_json().encode()).status == 200
        world.outbid_and_wait()
        world.reap()
        assert world.creates() == 1 and world.run().done and runs.live_ids(world.store) == []
    finally:
        world.close()


def test_after_n_recoveries_it_stops_destroys_and_says_why(world: RecWorld) -> None:
    world.up(recover=1)
    world.outbid_and_wait()
    world.reap()
    assert world.creates() == 2
    world.outbid_and_wait()
    world.reap()
    run = world.run()
    assert world.creates() == 2 and world.emu.alive() == []
    assert run.done and run.stopped_why == "outbid again after 1 of 1 recoveries"
    assert runs.live_ids(world.store) == []
    told = [m for m in world.outbox() if m.kind == "recovery_stopped"]
    assert len(told) == 1 and "kept at file:///bucket/spot/spot-r1" in told[0].message


def test_a_re_rented_pod_booting_is_not_taken_for_silent_before_the_unregistered_grace(
    home: Path, clock: FakeClock
) -> None:
    world = make_rec_world(home, clock, silence_limit_s=300.0, destroy_grace_s=240.0, unregistered_grace_s=1200.0)
    try:
        first = world.up()
        world.deps.store.update_if(first.id, {}, {"last_seen": world.now})  # the first attempt pinged
        world.outbid_and_wait()
        world.reap()
        new = world.latest()
        for _ in range(16):  # 16 min with no ping: it boots (installs gpuc) before its agent starts
            world.clock.advance(60)
            world.reap()
        assert world.store.get_pod(new).state == "ok" and not world.emu.ops("destroy")[1:]  # type: ignore[union-attr]
        for _ in range(12):  # past the grace and the destroy grace: silent, then reaped as usual
            world.clock.advance(60)
            world.reap()
        assert world.store.get_pod(new).state in ("destroying", "destroyed")  # type: ignore[union-attr]
    finally:
        world.close()


def test_a_re_rent_that_would_cross_the_months_budget_stops(home: Path, clock: FakeClock) -> None:
    # The next attempt's worst case to the run's deadline is about $0.45: a budget with less left stops it.
    world = make_rec_world(home, clock, monthly_budget=0.40)
    try:
        world.up()
        world.outbid_and_wait()
        world.reap()
        run = world.run()
        assert world.creates() == 1 and run.done and "would cross the budget" in (run.stopped_why or "")
        assert world.emu.alive() == []
    finally:
        world.close()


def test_the_phones_stop_tap_stops_the_recovery(world: RecWorld) -> None:
    world.up(recover=3)
    world.outbid_and_wait()
    world.reap()
    [note] = [m for m in world.outbox() if m.kind == "recovering"]
    assert "attempt 2 of 4" in note.message
    [button] = note.actions
    assert button.label == "stop recovery" and button.safe
    acted = verbs.act(world.deps, button.token, world.now, "ntfy")
    assert "stopped from the phone" in acted.sentence and world.run().stop_asked
    world.outbid()
    world.reap()  # no wait: the user said stop
    run = world.run()
    assert run.done and run.stopped_why == "you stopped the recovery" and world.emu.alive() == []
    assert world.creates() == 2


def test_two_passes_racing_rent_once(world: RecWorld) -> None:
    world.up()
    world.outbid_and_wait()
    store = world.store
    real_put = store.put_meta
    raced: list[bool] = []

    def racing_put(key: str, value: Any, expected_version: int | None) -> bool:
        if key == runs.run_key(RUN_ID) and not raced:
            raced.append(True)  # a second pass runs in full between this pass's read and its claim
            world.reap()
        return real_put(key, value, expected_version)

    store.put_meta = racing_put  # type: ignore[method-assign]
    world.reap()
    store.put_meta = real_put  # type: ignore[method-assign]
    assert raced and world.creates() == 2 and len(world.run().attempts) == 2
    assert len(world.emu.alive()) == 1


def test_a_paused_pod_of_a_live_run_is_not_reaped_by_the_paused_rule(home: Path, clock: FakeClock) -> None:
    world = make_rec_world(home, clock, paused_limit_s=60.0, destroy_grace_s=30.0, recover_wait_s=3 * 3600.0)
    try:
        first = world.up()
        world.outbid()
        for _ in range(10):
            world.reap()
            world.clock.advance(60)
        assert not world.emu.ops("destroy") and world.store.get_pod(first.id).state != "destroying"  # type: ignore[union-attr]
        # Once the run is done, the usual rules apply: the paused pod is reaped.
        runs.update(world.store, RUN_ID, lambda r: r.model_copy(update={"done": True}))
        for _ in range(4):
            world.reap()
            world.clock.advance(60)
        assert world.emu.alive() == []
    finally:
        world.close()


def test_the_previous_attempt_still_listed_is_never_taken_for_the_new_one(
    world: RecWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = world.up()
    world.outbid_and_wait()
    # Vast's show says gone while its list still shows the instance, unchanged, for a while.
    world.emu.destroy_lag_polls = 50
    monkeypatch.setattr(world.vast, "gone_for_sure", lambda pod_id: True)
    world.reap()
    new = world.run().latest.pod_id
    assert new != first.id and world.creates() == 2
    assert world.emu.instances[int(new)].label == "gpuc-spot-r1-a2"


def test_a_pass_that_died_after_its_create_is_taken_over_without_a_second_create(
    world: RecWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    world.up()
    world.outbid_and_wait()
    monkeypatch.setattr(rerent, "_register", _die)
    with pytest.raises(RuntimeError):
        watch.recover_one(_pass(world), RUN_ID)
    monkeypatch.undo()
    world.reap()
    assert world.creates() == 2 and len(world.run().attempts) == 1  # inside its claim: left alone
    world.clock.advance(claim.ACT_LEASE_S + 1)
    world.reap()
    run = world.run()
    assert world.creates() == 2 and len(run.attempts) == 2
    new = run.latest.pod_id
    assert world.boot(new, world.ticket_of(new)).status == 200  # the same ticket, derived again


def _die(*args: object) -> None:
    raise RuntimeError("the pass died here")


def test_a_run_whose_pass_fails_is_reported_on_its_own_provider(
    world: RecWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's row for a run the pass could not handle names the run's provider, read from its record."""
    world.up()
    world.outbid_and_wait()
    stored = world.run()
    runs.update(world.deps.store, RUN_ID, lambda r: r.model_copy(update={"provider": "elsewhere"}))
    monkeypatch.setattr(watch, "recover_one", _die)
    sweep = _pass(world)
    watch.recover_runs(sweep)
    [row] = [a for a in sweep.report.actions if a.action == "skip"]
    assert (row.pod_id, row.provider) == (RUN_ID, "elsewhere") and stored.provider == "vast"


def _pass(world: RecWorld) -> Any:
    from gpuc.functions.reaper.state import Pass

    return Pass(world.deps, world.now, False, api.ReapReport(ran_at=world.now))


# -- the routes ------------------------------------------------------------------------------------


def test_a_bad_or_unknown_ticket_is_403_and_stores_nothing(world: RecWorld) -> None:
    first = world.up()
    world.outbid_and_wait()
    world.reap()
    new = world.latest()
    before = world.store.get_meta(runs.run_key(RUN_ID))
    for pod_id, ticket in [(new, "x" * 43), (first.id, world.ticket_of(new)), ("999", world.ticket_of(new))]:
        answer = world.boot(pod_id, ticket)
        assert (answer.status, answer.body) == (403, {"error": "bad or spent boot ticket"})
    assert world.store.get_meta(runs.run_key(RUN_ID)) == before
    end = api.EndRequest.model_validate({"end_at": world.now, "by": "down"})
    assert world.admin("POST", f"/v1/pods/{new}/end", end.model_dump_json().encode()).status == 200
    assert world.boot(new, world.ticket_of(new)).status == 403  # an ended pod boots nothing, ticket or not


def test_the_run_route_says_the_run_and_no_secret_and_stop_asks_the_next_pass(world: RecWorld) -> None:
    world.up()
    world.outbid_and_wait()
    world.reap()
    answer = world.admin("GET", f"/v1/runs/{RUN_ID}")
    assert answer.status == 200
    view = api.RunRecovery.model_validate(answer.body)
    assert len(view.attempts) == 2 and view.spent_usd > 0 and not view.done
    text = str(answer.body)
    assert PLANTED_SECRET not in text and world.ticket_of(world.latest()) not in text
    assert world.call("GET", f"/v1/runs/{RUN_ID}").status == 401
    assert world.admin("GET", "/v1/runs/nope").status == 404
    assert world.admin("POST", f"/v1/runs/{RUN_ID}/stop").status == 200
    assert world.run().stop_asked
    world.outbid()
    world.reap()
    assert world.run().done and world.emu.alive() == []


def test_nothing_logs_a_ticket_token_or_kit_secret(world: RecWorld, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    world.up()
    world.outbid_and_wait()
    world.reap()
    new = world.latest()
    ticket = world.ticket_of(new)
    booted = world.boot(new, ticket).body
    world.boot(new, ticket)
    said = caplog.text + "".join(m.title + m.message for m in world.outbox()) + str(_all_notes(world.store))
    for secret in (ticket, booted["token"], PLANTED_SECRET, ADMIN):
        assert secret not in said


def _all_notes(store: Store) -> list[api.NotificationRecord]:
    return store.recent_notifications(1000)


def test_the_boot_route_over_the_local_server_logs_no_planted_secret(
    world: RecWorld, caplog: pytest.LogCaptureFixture
) -> None:
    """The real loopback server (`gpuc watchdog serve`): a boot that gets the kit, one refused, one malformed;
    nothing it logs holds the ticket, the pod's token, the kit's planted secret or the admin token."""
    import httpx

    from gpuc.functions.server import start_in_thread

    caplog.set_level("DEBUG")
    world.up()
    world.outbid_and_wait()
    world.reap()
    new = world.latest()
    ticket = world.ticket_of(new)
    body = api.BootRequest(pod_id=new, ticket=ticket).model_dump_json()
    with start_in_thread(world.settings, deps=world.deps) as handle:
        first = httpx.post(f"{handle.url}/v1/boot", content=body, timeout=10)
        again = httpx.post(f"{handle.url}/v1/boot", content=body, timeout=10)
        broken = httpx.post(f"{handle.url}/v1/boot", content=body.replace(ticket, ticket[:10]), timeout=10)
    assert (first.status_code, again.status_code, broken.status_code) == (200, 403, 400)
    token = first.json()["token"]
    assert PLANTED_SECRET in first.text  # the search can find: the answer itself carries them
    said = caplog.text + again.text + broken.text
    for secret in (ticket, token, PLANTED_SECRET, ADMIN):
        assert secret not in said


# -- the user moves the deadline ------------------------------------------------------------------


def test_extending_a_recovering_runs_pod_moves_its_envelope_and_the_next_attempt_follows(world: RecWorld) -> None:
    """`gpuc extend` on a run that recovers: the run's deadline moves with its pod's, and its money cap by the
    same hours at the run's rate; a re-rent after an outbid is rented to the new deadline, not the old."""
    first = world.up()
    before = world.run().request
    asked = api.DeadlineRequest(extend_s=2 * 3600.0)
    answer = world.admin("POST", f"/v1/pods/{first.id}/deadline", asked.model_dump_json().encode())
    assert answer.status == 200, answer.body
    moved = api.DeadlineAnswer.model_validate(answer.body)
    run = world.run()
    assert run.envelope.deadline == pytest.approx(moved.deadline_at)
    assert run.request.max_hours == pytest.approx(before.max_hours + 2)
    assert run.request.envelope_usd == pytest.approx(before.envelope_usd * (before.max_hours + 2) / before.max_hours)
    view = api.RunRecovery.model_validate(world.admin("GET", f"/v1/runs/{RUN_ID}").body)
    assert (view.deadline_at, view.envelope_usd) == (run.envelope.deadline, run.request.envelope_usd)
    world.outbid_and_wait()
    world.reap()
    rec = world.store.get_pod(world.run().latest.pod_id)
    assert rec is not None and rec.attempt == 2 and rec.deadline_at == pytest.approx(moved.deadline_at)
