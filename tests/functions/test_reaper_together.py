"""The reaper reads its providers at once, under a deadline for the pass: one provider that hangs is blind
for that pass (nothing is done on its pods) and never delays the judgement of another provider's pods."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.watchdog import World, make_world

from gpuc.core.clock import FakeClock
from gpuc.testkit.fakes import FakeProvider

MIN = 60.0
# The pass's read deadline: long enough that the provider that answers is read on a loaded machine too, far
# enough below the stuck one's 30 s that the bound below tells them apart.
READ_S = 1.0


@pytest.fixture
def released() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # the stuck read ends with the test


def stuck_world(home: Path, clock: FakeClock, released: threading.Event) -> tuple[World, FakeProvider]:
    stuck = FakeProvider(clock, name="stuck")
    world = make_world(home, clock, providers=(stuck,), provider_timeout_s=READ_S)
    stuck.on_list = lambda: (released.wait(120.0), None)[1]  # a provider that never answers in time
    return world, stuck


def test_a_stuck_provider_is_blind_and_does_not_delay_the_others_judgement(
    home: Path, clock: FakeClock, released: threading.Event
) -> None:
    world, stuck = stuck_world(home, clock, released)
    world.register("p1")  # at the provider that answers
    world.ping("p1")
    world.register("s1", provider=stuck)
    world.ping("s1")
    world.clock.advance(5 * MIN)
    start = time.monotonic()
    report = world.reap()
    elapsed = time.monotonic() - start
    assert elapsed < 2 * READ_S + 30.0, elapsed  # the pass's read deadline, not the stuck provider's 120 s
    assert report.blind_providers == ["stuck"]
    assert any("no answer within" in m.message for m in world.outbox() if m.kind == "blind")
    assert world.pod("p1").state == "down"  # judged on time: marked for the destroy
    assert world.pod("s1").state == "ok"  # nothing is done on a blind provider's pods
    world.clock.advance(world.settings.destroy_grace_s)
    world.reap()
    assert world.provider.destroyed == ["p1"] and stuck.destroyed == []
    world.store.close()


def test_providers_are_read_at_once(home: Path, clock: FakeClock) -> None:
    slow = FakeProvider(clock, name="slow")
    world = make_world(home, clock, providers=(slow,))
    # Each list answers only once both have begun: read one after the other, the first would wait alone until
    # the pass's read deadline and be blind. No wall-clock margin for a loaded machine to break.
    together = threading.Barrier(2, timeout=30.0)
    for provider in (world.provider, slow):
        provider.on_list = lambda: (together.wait(), None)[1]
    report = world.reap()
    assert not report.blind and not together.broken
    world.store.close()
