"""Two boots racing with one ticket: only one gets the kit (its secrets and the pod's token). Both read the run
while the ticket is unspent; the spend is a compare-and-set, and the one that loses it must find the ticket spent
on its re-read and be refused, never spend it a second time. Through the real route on a real store, the two
boots released together at the write."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuc.core.clock import FakeClock
from gpuc.functions.edge import Response
from gpuc.functions.recovery import runs
from gpuc.functions.store import Store
from gpuc.testkit.spot_world import WAIT_S, RecWorld, make_rec_world


class Together:
    """The store, with each thread's first write of a run's record held until both threads are there."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self._meet = threading.Barrier(2, timeout=10)
        self._met: set[int] = set()

    def put_meta(self, key: str, value: Any, expected_version: int | None) -> bool:
        me = threading.get_ident()
        if key.startswith(runs.RUN_META) and me not in self._met:
            self._met.add(me)
            self._meet.wait()  # both read the ticket unspent, and write now
        return self._inner.put_meta(key, value, expected_version)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock)
    yield w
    w.close()


def test_of_two_boots_racing_with_one_ticket_one_gets_the_kit(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT_S + 1)
    world.reap()
    pod_id = world.latest()
    ticket = world.ticket_of(pod_id)
    inner = world.deps.store
    world.deps.store = Together(inner)
    answers: list[Response] = []

    def boot() -> None:
        answers.append(world.boot(pod_id, ticket))

    threads = [threading.Thread(target=boot) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    world.deps.store = inner
    assert sorted(a.status for a in answers) == [200, 403]
    loser = next(a for a in answers if a.status == 403)
    assert "token" not in loser.body and "kit" not in loser.body
    assert world.run().tickets[pod_id].spent_at is not None
