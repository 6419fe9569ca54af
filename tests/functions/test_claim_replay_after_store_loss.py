"""After a store loss, a genuine heartbeat captured within its 300 s window and replayed re-creates nothing: not
for a pod the provider no longer lists (an ended pod would come back healthy, and the user be told a pass later
that it is "gone at the provider"), and not from a ping signed before the store was born (an ended pod still
listed, stopped, would be kept from the stray rule's destroy). A live pod's own next ping still re-creates it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.claims import KEY, ClaimedPod
from fakes.watchdog import World, make_world

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.signing import derive_key, sign
from gpuc.functions.edge import Response
from gpuc.functions.store import SqliteStore

MIN = 60.0


@pytest.fixture
def world(home: Path, clock: FakeClock) -> World:
    return make_world(home, clock, watchdog_key=KEY, reaper_period_s=MIN, destroy_grace_s=MIN)


def capture(world: World, pod: ClaimedPod, seq: int = 90) -> tuple[bytes, dict[str, str]]:
    """A genuine ping, signed now with the pod's own token and claim, that never reached the watchdog."""
    body = world.heartbeat_body(pod.pod_id, seq)
    ts = int(world.now)
    return body, {
        api.H_POD: pod.pod_id, api.H_TIMESTAMP: str(ts), api.H_SEQ: str(seq),
        api.H_SIGNATURE: sign(derive_key(pod.token), ts, seq, body), api.H_CLAIM: pod.first_claim,
    }  # fmt: skip


def replay(world: World, captured: tuple[bytes, dict[str, str]]) -> Response:
    body, headers = captured
    return world.call("POST", "/v1/heartbeat", body, headers)


def lose_store(world: World, tmp_path: Path) -> None:
    world.store.close()
    world.store = world.deps.store = SqliteStore(tmp_path / "new" / "watchdog.db")


def test_a_replayed_ping_of_a_pod_the_provider_no_longer_lists_re_creates_nothing(world: World, tmp_path: Path) -> None:
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    pod.ping()
    captured = capture(world, pod)  # within its window from here on
    world.clock.advance(30)
    world.provider.destroy("pod-1")  # its job ended, it destroyed itself
    world.clock.advance(30)
    lose_store(world, tmp_path)
    world.reap()  # the new store's first pass: nothing listed
    world.clock.advance(30)
    assert replay(world, captured).status == 401
    assert world.store.get_pod("pod-1") is None
    for _ in range(10):
        world.clock.advance(MIN)
        world.reap()
    assert [n for n in world.store.recent_notifications(100) if n.pod_id == "pod-1"] == []  # never "gone"


def test_a_ping_signed_after_the_loss_for_a_pod_the_provider_does_not_list_re_creates_nothing(
    world: World, tmp_path: Path
) -> None:
    """Deleted at the provider while its container still answers for a while (or a ping captured after the loss
    and replayed once it is gone): nothing the reaper could ever judge but "gone at the provider"."""
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    lose_store(world, tmp_path)
    world.provider.destroy("pod-1")
    world.clock.advance(MIN)
    world.reap()  # born now; the provider does not list it
    world.clock.advance(MIN)
    assert pod.ping() is None  # signed after the store's birth: refused all the same
    assert world.store.get_pod("pod-1") is None
    for _ in range(10):
        world.clock.advance(MIN)
        world.reap()
    assert [n for n in world.store.recent_notifications(100) if n.pod_id == "pod-1"] == []


def test_a_replayed_ping_signed_before_the_store_was_born_re_creates_nothing(world: World, tmp_path: Path) -> None:
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    pod.ping()
    captured = capture(world, pod)
    world.clock.advance(30)
    world.provider.set("pod-1", status="stopped")  # ended, but only stopped: still listed, billing its disk
    lose_store(world, tmp_path)
    world.clock.advance(30)
    world.reap()  # born now; lists it: a stray
    world.clock.advance(30)
    assert replay(world, captured).status == 401
    rec = world.pod("pod-1")
    assert (rec.origin, rec.key) == ("adopted", "")  # still the stray it is, not a healthy registered pod
    for _ in range(30):
        world.clock.advance(MIN)
        world.reap()
    assert not world.provider.alive("pod-1")  # the stray rule destroyed it


def test_a_live_pods_next_ping_re_creates_it(world: World, tmp_path: Path) -> None:
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    lose_store(world, tmp_path)
    world.clock.advance(MIN)
    world.reap()
    world.clock.advance(MIN)
    assert pod.ping() is not None
    rec = world.pod("pod-1")
    assert (rec.origin, rec.state, rec.key) == ("registered", "ok", derive_key(pod.token))
