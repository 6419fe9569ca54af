"""On the claim path (a store that lost the pod), a ping outside the 300 s window is refused like any other and
re-creates nothing: a captured ping replayed later must not revive a pod. The pod's next ping, on time, does."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.claims import KEY, ClaimedPod, ping_as
from fakes.watchdog import make_world

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.signing import derive_key, sign
from gpuc.functions.store import SqliteStore


@pytest.mark.parametrize("off_s", [-(api.SIGNATURE_WINDOW_S + 60), api.SIGNATURE_WINDOW_S + 60], ids=["old", "ahead"])
def test_a_claimed_ping_outside_the_window_re_creates_nothing(
    off_s: float, home: Path, clock: FakeClock, tmp_path: Path
) -> None:
    world = make_world(home, clock, watchdog_key=KEY)
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    world.store.close()
    world.store = world.deps.store = SqliteStore(tmp_path / "new.db")
    world.reap()  # the new store is born and lists the pod: a stray until its claim proves it
    clock.advance(api.SIGNATURE_WINDOW_S + 120)  # a ping captured now, signed after the store's birth...
    body = world.heartbeat_body("pod-1", 70)
    ts = int(world.now + off_s)  # ...sent far from its time (captured and replayed, or forged ahead)
    headers = {
        api.H_POD: "pod-1", api.H_TIMESTAMP: str(ts), api.H_SEQ: "70",
        api.H_SIGNATURE: sign(derive_key(pod.token), ts, 70, body), api.H_CLAIM: pod.first_claim,
    }  # fmt: skip
    answer = world.call("POST", "/v1/heartbeat", body, headers)
    assert answer.status == 401 and "window" in str(answer.body.get("error"))
    rec = world.pod("pod-1")
    assert (rec.origin, rec.key, rec.last_seen) == ("adopted", "", None)  # not re-created
    assert ping_as(world, "pod-1", pod.token, claim=pod.first_claim, seq=71) == 200  # on time: it is
    assert world.pod("pod-1").origin == "registered"
