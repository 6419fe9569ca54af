"""Through the real handlers: two pods registered with a watchdog that derives their tokens get different ones,
and a ping for one pod signed with the other's token is refused (401) and changes nothing, on the registered
path and on the claim path of a store that lost them."""

from __future__ import annotations

from pathlib import Path

from fakes.claims import KEY, ClaimedPod, ping_as
from fakes.watchdog import make_world

from gpuc.core.clock import FakeClock
from gpuc.functions.store import SqliteStore


def test_a_pod_cannot_sign_for_another(home: Path, clock: FakeClock, tmp_path: Path) -> None:
    world = make_world(home, clock, watchdog_key=KEY)
    a, b = (ClaimedPod(world, pod_id, tmp_path / "pods") for pod_id in ("pod-a", "pod-b"))
    assert a.token != b.token
    before = world.pod("pod-b")
    assert ping_as(world, "pod-b", a.token) == 401
    assert world.pod("pod-b") == before  # nothing recorded for it
    assert ping_as(world, "pod-b", b.token) == 200  # its own token: the control

    world.store.close()  # lost: the claim path (the store knows neither)
    world.store = world.deps.store = SqliteStore(tmp_path / "new.db")
    world.reap()  # both still listed: strays to the new store until their claims prove them
    assert ping_as(world, "pod-b", a.token, claim=b.first_claim, seq=60) == 401
    assert world.pod("pod-b").origin == "adopted"  # not re-created by another pod's signature
    assert ping_as(world, "pod-b", b.token, claim=b.first_claim, seq=61) == 200
