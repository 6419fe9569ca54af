"""Zero false kills, zero lost watches: the watchdog against a lost or new store, a sleeping or stepped
clock, one blind provider among several, a transient "not found", and a destroy the provider has not
confirmed. Each scenario runs on both stores (SqliteStore, and DynamoStore on moto's in-process DynamoDB)
where the store holds the evidence."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.watchdog import World, make_world

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.functions.store import META_STORE, SqliteStore
from gpuc.testkit.fakes import FakeProvider, outage

MIN = 60.0


def reap_until_destroyed(world: World, pod_id: str, within_s: float, provider: FakeProvider | None = None) -> float:
    """Passes every period; the clock time of the destroy call (fails the test if none within_s)."""
    provider = provider or world.provider
    end = world.now + within_s
    while world.now <= end:
        world.reap()
        if pod_id in provider.destroyed:
            return world.now
        world.clock.advance(world.settings.reaper_period_s)
    raise AssertionError(f"{pod_id} not destroyed within {within_s / MIN:.0f} min: {world.kinds(pod_id)}")


def f5_bound_s(world: World) -> float:
    s = world.settings
    return s.silence_limit_s + s.reaper_period_s + s.destroy_grace_s + s.reaper_period_s


# -- item 2: a lost or new store ------------------------------------------------------------------


def test_a_stray_gets_its_whole_window_from_first_sight_not_from_its_creation(any_world: World) -> None:
    world = any_world
    # Six hours old when this store first sees it (a new GPUC_HOME, a second watchdog on the account)
    world.provider.add("old-pod", created_at=world.now - 6 * 3600)
    first_seen = world.now
    report = world.reap()
    assert [a.action for a in report.actions] == []
    assert world.provider.destroyed == []
    grace, warn = world.settings.unregistered_grace_s, world.settings.destroy_grace_s
    world.run(grace - warn - MIN)
    assert world.provider.destroyed == []
    assert world.kinds("old-pod") == []
    destroyed_at = reap_until_destroyed(world, "old-pod", within_s=3600)
    assert first_seen + grace <= destroyed_at <= first_seen + grace + world.settings.reaper_period_s
    assert world.kinds("old-pod") == ["mark", "destroying", "destroyed"]


def lose_the_store(world: World, home: Path) -> SqliteStore:
    """watchdog.db deleted: the watchdog comes back on an empty store (made old enough here, so what is
    tested is the unverified pings alone, not the young-store hold)."""
    fresh = SqliteStore(home / "lost" / "watchdog.db")
    fresh.put_meta(META_STORE, {"created_at": world.now - 86400}, None)
    world.store.close()
    world.store = fresh
    world.deps.store = fresh
    return fresh


def test_pods_that_ping_a_store_that_lost_them_are_warned_once_and_live_only_if_kept(
    home: Path, clock: FakeClock
) -> None:
    """Pings this store cannot verify prove nothing (anyone can send them): they delay a stray's destroy
    once, by at most the grace, and the warning says how to keep a pod that is really yours."""
    world = make_world(home, clock)
    for pod_id in ("pod-a", "pod-b"):
        world.register(pod_id)
        assert world.ping(pod_id).status == 200
    lose_the_store(world, home)
    grace, period = world.settings.unregistered_grace_s, world.settings.reaper_period_s
    first_seen: float | None = None
    kept = False
    for _ in range(24):  # two hours: the pods ping every minute, the reaper passes every five
        for _ in range(5):
            world.clock.advance(MIN)
            for pod_id in ("pod-a", "pod-b"):
                if world.provider.alive(pod_id):
                    assert world.ping(pod_id).status == 401  # this store cannot verify them
        world.reap()
        first_seen = first_seen if first_seen is not None else world.now
        warned = [n for n in world.store.recent_notifications(100) if n.pod_id == "pod-a"]
        if warned and not kept:  # the user answers the first warning: pod-a is theirs
            assert "gpuc keep pod-a --for 2h" in warned[0].message
            until = world.now + 2 * 3600
            assert world.admin("POST", "/v1/pods/pod-a/keep", api.KeepRequest(until=until)).status == 200
            kept = True
    assert first_seen is not None
    assert world.provider.alive("pod-a")  # kept by the user's lease
    assert world.provider.destroyed == ["pod-b"]  # nobody answered for it
    destroyed_at = world.provider.destroyed_at["pod-b"]
    assert first_seen + grace < destroyed_at <= first_seen + 2 * grace + period  # delayed once, no more
    warnings = [n for n in world.store.recent_notifications(100) if n.pod_id == "pod-b"]
    assert [n.kind for n in warnings][:2] == ["alert", "mark"]
    assert "token this watchdog cannot verify" in warnings[0].message
    assert all("gpuc keep pod-b --for 2h" in n.message for n in warnings[:2])
    world.store.close()


def test_a_young_store_holds_its_strays_but_not_the_pods_registered_with_it(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock, store_age_s=None)  # a brand-new watchdog (a lost watchdog.db)
    born = world.now
    world.provider.add("stray", created_at=born - 6 * 3600)  # alive for hours, registered elsewhere
    world.register("p1")
    world.ping("p1")
    silent_from = world.now
    # The pod registered here goes silent: F5 holds from minute one, a young store or not.
    destroyed_at = reap_until_destroyed(world, "p1", within_s=3600)
    assert destroyed_at <= silent_from + f5_bound_s(world)
    assert "stray" not in world.provider.destroyed
    # The stray it never registered: warned, never destroyed before the store is as old as the grace.
    stray_destroyed_at = reap_until_destroyed(world, "stray", within_s=3600)
    grace = world.settings.unregistered_grace_s
    assert born + grace <= stray_destroyed_at <= born + grace + world.settings.reaper_period_s
    world.store.close()


def test_unverified_pings_are_noted_only_for_a_stray_the_reaper_found(any_world: World) -> None:
    world = any_world
    world.provider.add("stray")
    world.reap()  # the reaper lists it: an adopted record, with no key
    assert world.pod("stray").origin == "adopted"
    body = b'{"pod_id":"x","seq":1,"sent_at":1800000000}'
    headers = {api.H_TIMESTAMP: str(int(world.now)), api.H_SEQ: "1", api.H_SIGNATURE: "0" * 64}
    for pod_id in ("ghost-1", "../../etc", "a" * 100, "ok_id", "stray"):
        assert world.call("POST", "/v1/heartbeat", body, {**headers, api.H_POD: pod_id}).status == 401
    assert [p.pod_id for p in world.store.list_pods()] == ["stray"]  # invented ids: nothing stored
    assert world.pod("stray").unverified_ping_at == world.now
    assert world.store.get_meta("unverified_pings") is None
    stale = {**headers, api.H_POD: "stray", api.H_TIMESTAMP: str(int(world.now) - 3600)}
    world.clock.advance(MIN)
    assert world.call("POST", "/v1/heartbeat", body, stale).status == 401
    assert world.pod("stray").unverified_ping_at == world.now - MIN  # an old timestamp is not noted


def test_a_flood_of_invented_ids_evicts_nothing_and_moves_no_deadline(any_world: World) -> None:
    """A flood of well-shaped made-up ids once pushed a real stray's entry out of a shared
    list, and its destroy came early. Now each costs one read: the stray's own record is untouched, its
    one delay stands."""
    world = any_world
    world.provider.add("stray")
    world.reap()
    world.clock.advance(10 * MIN)
    body = b'{"pod_id":"x","seq":1,"sent_at":1800000000}'
    ping = {api.H_POD: "stray", api.H_TIMESTAMP: str(int(world.now)), api.H_SEQ: "1", api.H_SIGNATURE: "0" * 64}
    assert world.call("POST", "/v1/heartbeat", body, ping).status == 401  # the stray's own evidence
    heard = world.now
    before = world.pod("stray")
    for i in range(500):
        headers = {
            api.H_POD: f"f{i:05d}abcdefgh",
            api.H_TIMESTAMP: str(int(world.now)),
            api.H_SEQ: "1",
            api.H_SIGNATURE: f"{i:064x}",
        }
        assert world.call("POST", "/v1/heartbeat", body, headers).status == 401
    assert world.pod("stray") == before
    assert len(world.store.list_pods()) == 1
    grace = world.settings.unregistered_grace_s
    destroyed_at = reap_until_destroyed(world, "stray", within_s=3600)
    assert heard + grace <= destroyed_at <= before.registered_at + 2 * grace + world.settings.reaper_period_s


def test_an_old_stores_list_of_unverified_pings_delays_nothing(any_world: World) -> None:
    """An upgrade: the meta record an older gpuc kept (ids -> latest ping) is ignored, not obeyed."""
    world = any_world
    assert world.store.put_meta("unverified_pings", {"pings": {"stray": world.now + 3600}}, None)
    world.provider.add("stray")
    world.reap()
    first_seen = world.now
    destroyed_at = reap_until_destroyed(world, "stray", within_s=3600)
    grace = world.settings.unregistered_grace_s
    assert first_seen + grace <= destroyed_at <= first_seen + grace + world.settings.reaper_period_s


def test_a_carried_pod_is_silent_here_without_being_destroyed_until_it_pings_here(world: World) -> None:
    world.register("p1", carried=True)
    assert world.pod("p1").origin == "carried"
    world.run(2 * 3600)
    assert world.provider.destroyed == []
    assert world.kinds("p1") == ["alert", "alert"]
    assert "carried over" in (world.pod("p1").reason or "")
    world.ping("p1")  # it pings here now: an ordinary pod from then on
    last = world.now
    destroyed_at = reap_until_destroyed(world, "p1", within_s=3600)
    assert destroyed_at - last <= f5_bound_s(world)


# -- item 5: the reaper's clock -------------------------------------------------------------------


def test_a_pass_after_a_long_sleep_destroys_nothing_and_restarts_every_deadline(any_world: World) -> None:
    world = any_world
    for pod_id in ("alive", "dying"):
        world.register(pod_id)
        world.ping(pod_id)
    world.run(5 * MIN, keep_alive=("alive",))
    assert world.pod("dying").state == "down"
    world.clock.advance(3 * 3600)  # the laptop sleeps: no pass, no ping reaches the watchdog
    wake = world.now
    report = world.reap()
    assert [a.action for a in report.actions if a.action in ("destroy", "mark")] == []
    assert world.provider.destroyed == []
    assert world.pod("dying").destroy_at == wake + world.settings.destroy_grace_s  # a fresh window
    assert world.pod("alive").state == "ok"  # not marked for the watchdog's own absence
    assert "clock" in world.kinds()
    world.ping("alive")
    destroyed_at = reap_until_destroyed(world, "dying", within_s=3600)
    assert destroyed_at - wake <= f5_bound_s(world)
    world.run(2 * 3600, keep_alive=("alive",))
    assert world.provider.destroyed == ["dying"]


def test_a_clock_that_went_back_restarts_deadlines_from_that_pass(any_world: World) -> None:
    world = any_world
    world.register("p1")
    world.ping("p1")
    world.run(10 * MIN, keep_alive=("p1",))
    world.clock.advance(-2 * 3600)  # NTP steps the clock back two hours; the agent dies meanwhile
    step = world.now
    report = world.reap()
    assert [a.action for a in report.actions if a.action == "destroy"] == []
    assert "clock" in world.kinds()
    assert world.pod("p1").last_seen == step  # no longer in the future
    destroyed_at = reap_until_destroyed(world, "p1", within_s=3 * 3600)
    assert destroyed_at - step <= f5_bound_s(world)


def test_a_reaper_on_time_is_not_taken_for_a_clock_jump(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    for _ in range(4):
        world.clock.advance(world.settings.reaper_period_s * 2)  # one pass missed now and then
        world.ping("p1")
        world.reap()
    assert "clock" not in world.kinds()


# -- item 6: blindness is per provider ------------------------------------------------------------


def two_provider_world(home: Path, clock: FakeClock) -> tuple[World, FakeProvider]:
    vast = FakeProvider(clock, name="vast")
    return make_world(home, clock, providers=(vast,)), vast


def test_a_blind_provider_blocks_actions_on_its_own_pods_only(home: Path, clock: FakeClock) -> None:
    world, vast = two_provider_world(home, clock)
    world.register("p1")
    world.register("v1", provider=vast)
    world.ping("p1")
    world.ping("v1")
    vast.fail = outage("vast")  # the Vast key was revoked
    died = world.now
    destroyed_at = reap_until_destroyed(world, "p1", within_s=3600)
    assert destroyed_at - died <= f5_bound_s(world)
    assert vast.destroyed == []
    assert world.pod("v1").state == "ok"  # nothing marked on what cannot be seen
    report = world.reap()
    assert report.blind and report.blind_providers == ["vast"]
    world.store.close()


def test_a_provider_blind_for_an_hour_escalates_hourly_and_status_shows_since_when(
    home: Path, clock: FakeClock
) -> None:
    world, vast = two_provider_world(home, clock)
    world.register("v1", provider=vast)
    vast.fail = outage("vast")
    since = world.now
    world.reap()
    world.run(3.5 * 3600)
    blind = [n for n in world.store.recent_notifications(1000) if n.kind == "blind"]
    assert [n.level for n in blind] == ["warning", "error", "error", "error"]
    assert "vast" in blind[0].title and "for 60 min" in blind[1].title
    status = api.StatusResponse.model_validate(world.admin("GET", "/v1/status").body)
    assert [(b.provider, b.since) for b in status.reaper_blind_since] == [("vast", since)]
    assert "503" in status.reaper_blind_since[0].why
    vast.fail = None
    world.run(world.settings.reaper_period_s)
    blind = [n for n in world.store.recent_notifications(1000) if n.kind == "blind"]
    assert (blind[-1].title, blind[-1].level) == ("gpuc: the reaper can read vast again", "info")
    status = api.StatusResponse.model_validate(world.admin("GET", "/v1/status").body)
    assert status.reaper_blind_since == []
    world.store.close()


def test_a_destroy_error_at_one_provider_does_not_stop_destroys_at_another(home: Path, clock: FakeClock) -> None:
    world, vast = two_provider_world(home, clock)
    world.register("a-vast-pod", provider=vast)  # first in the pass's order
    world.register("p1")
    world.ping("a-vast-pod")
    world.ping("p1")
    vast.fail_destroy = outage("vast")
    world.run(5 * MIN + world.settings.destroy_grace_s + MIN)
    assert world.pod("a-vast-pod").state == "destroying"  # refused: retried next pass
    assert world.provider.destroyed == ["p1"]
    world.store.close()


# -- item 7: "gone" needs two passes --------------------------------------------------------------


def test_one_transient_not_found_does_not_stop_the_watch(any_world: World) -> None:
    world = any_world
    world.register("p1")
    world.ping("p1")
    world.provider.lose("p1", 1)  # one pass: absent from the list AND `get` says not found
    world.reap()
    assert world.pod("p1").state == "ok"
    assert world.pod("p1").gone_seen_at == world.now
    world.clock.advance(MIN)
    world.ping("p1")
    died = world.now
    destroyed_at = reap_until_destroyed(world, "p1", within_s=3600)
    assert destroyed_at - died <= f5_bound_s(world)
    assert world.pod("p1").gone_seen_at is None


def test_a_pod_the_provider_cannot_find_but_that_pings_is_not_taken_for_gone(any_world: World) -> None:
    world = any_world
    world.register("pod-1")
    world.ping("pod-1")
    world.provider.lose("pod-1", 6)  # the provider's API cannot find it for six passes; it pings
    world.run(6 * world.settings.reaper_period_s, keep_alive=("pod-1",))
    assert world.pod("pod-1").state == "ok"
    assert world.kinds("pod-1") == []


def test_a_pod_taken_for_gone_that_pings_is_watched_again(any_world: World) -> None:
    world = any_world
    world.register("pod-1")
    world.ping("pod-1")
    world.provider.lose("pod-1", 2)
    world.reap()
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()
    assert world.pod("pod-1").state == "destroyed"  # two passes agreed: gone
    assert world.ping("pod-1").status == 200  # yet it pings
    assert world.pod("pod-1").state == "ok"
    assert world.kinds("pod-1")[-1] == "revived"
    pinged = world.now
    destroyed_at = reap_until_destroyed(world, "pod-1", within_s=3600)  # and the watch works again
    assert destroyed_at - pinged <= f5_bound_s(world)


def test_a_pod_taken_for_gone_that_is_listed_again_is_watched_again(any_world: World) -> None:
    world = any_world
    world.register("pod-1")
    world.ping("pod-1")
    world.provider.lose("pod-1", 2)
    world.reap()
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()
    assert world.pod("pod-1").state == "destroyed"
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()  # listed again
    assert world.pod("pod-1").state == "ok"
    assert "revived" in world.kinds("pod-1")
    reap_until_destroyed(world, "pod-1", within_s=3600)


def test_a_pod_destroyed_by_the_reaper_that_comes_back_is_destroyed_again(world: World) -> None:
    world.register("pod-1")
    world.ping("pod-1")
    reap_until_destroyed(world, "pod-1", within_s=3600)
    assert world.pod("pod-1").state == "destroyed"
    world.provider.add("pod-1")  # the provider had not really let it go
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()
    assert world.pod("pod-1").state == "ended"  # its end is on record: it must go, after a fresh grace
    assert world.kinds("pod-1")[-1] == "revived"
    world.run(world.settings.destroy_grace_s + world.settings.reaper_period_s)
    assert world.provider.destroyed == ["pod-1", "pod-1"]
    assert world.pod("pod-1").state == "destroyed"


# -- item 8: a destroy is done only when the provider confirms it ---------------------------------


def test_a_destroy_is_done_only_once_the_provider_no_longer_shows_the_pod(any_world: World) -> None:
    world = any_world
    world.register("p1")
    world.ping("p1")
    world.provider.linger("p1", 4)  # accepted, but still listed for 4 more calls (3 are confirm's)
    reap_until_destroyed(world, "p1", within_s=3600)
    assert world.pod("p1").state == "destroying"  # not confirmed: still watched
    assert "destroyed" not in world.kinds("p1")
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()
    world.clock.advance(world.settings.reaper_period_s)
    world.reap()
    assert world.pod("p1").state == "destroyed"
    assert world.kinds("p1") == ["mark", "destroying", "destroyed"]


@pytest.mark.parametrize("how", ["hidden", "short-page"])
def test_a_pod_missing_from_the_list_is_not_gone_while_get_finds_it(world: World, how: str) -> None:
    world.register("p0")
    world.register("p1")
    if how == "hidden":
        world.provider.hide("p1")
    else:
        world.provider.page_size = 1  # the list shows p0 only
    world.run(2 * 3600, keep_alive=("p0", "p1"))
    assert world.pod("p1").state == "ok"
    assert world.pod("p1").gone_seen_at is None
    assert world.provider.destroyed == []
    died = world.now
    destroyed_at = reap_until_destroyed(world, "p1", within_s=3600)  # found through `get`
    assert destroyed_at - died <= f5_bound_s(world)


def test_a_mark_racing_a_ping_loses_to_the_ping(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.clock.advance(5 * MIN)

    def ping_during_the_listing() -> None:  # lands after the reaper read the records
        world.ping("p1")

    world.provider.on_list = ping_during_the_listing
    report = world.reap()
    world.provider.on_list = None
    assert "mark" not in [a.action for a in report.actions]
    assert world.pod("p1").state == "ok"
    assert world.kinds("p1") == []


def test_an_unknown_status_at_destroy_time_cancels_the_mark(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.run(5 * MIN)
    assert world.pod("p1").state == "down"
    world.provider.set("p1", status="unknown", raw_status="offline")
    world.run(3 * 3600)
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    assert "unknown" in (world.pod("p1").reason or "")
