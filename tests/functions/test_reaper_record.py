"""The reaper's own record (ReaperMeta), as /v1/status and the next pass read it: what a pass writes reads
back the same, and a value an older gpuc wrote, or a damaged one, reads as far as it makes sense: never
a 500 on `gpuc ls`, never a failed pass."""

from __future__ import annotations

from typing import Any

import pytest
from fakes.watchdog import World

from gpuc.core.api import StatusResponse
from gpuc.functions.reaper import reap_safely
from gpuc.functions.reaper.record import META_REAPER, ReaperMeta, read_meta

MIN = 60.0


def status(world: World) -> StatusResponse:
    answer = world.admin("GET", "/v1/status")
    assert answer.status == 200, answer.body
    return StatusResponse.model_validate(answer.body)


def test_what_a_pass_writes_reads_back_the_same() -> None:
    meta = ReaperMeta(
        last_run=100.0,
        blind=("vast",),
        blind_since={"vast": 40.0},
        blind_why={"vast": "401 unauthorized"},
        epoch=90.0,
        actions=3,
    )
    assert ReaperMeta.of(meta.value()) == meta
    assert "last_error" not in meta.value()  # a pass that finished clears the last failure


def test_status_reads_a_pass_of_this_store(world: World) -> None:
    world.reap()
    got = status(world)
    assert got.reaper_last_run == world.now and got.reaper_blind == [] and got.reaper_blind_since == []


@pytest.mark.parametrize(
    ("value", "last_run", "blind", "since"),
    [
        ({"last_run": 5.0}, 5.0, [], []),  # the first gpuc's record: no blindness fields at all
        ({"last_run": "yesterday", "blind": "vast", "blind_since": ["vast"]}, None, [], []),
        ({"last_run": 5, "blind": ["vast"], "blind_since": {"vast": 2, "runpod": "?"}}, 5.0, ["vast"], [("vast", 2.0)]),
        ({"last_run": float("nan"), "epoch": float("inf")}, None, [], []),
    ],
    ids=["old", "wrong-shapes", "partly-damaged", "non-finite"],
)
def test_status_reads_an_old_or_damaged_record_without_failing(
    world: World, value: dict[str, Any], last_run: float | None, blind: list[str], since: list[tuple[str, float]]
) -> None:
    world.store.put_meta(META_REAPER, value, None)
    got = status(world)
    assert got.reaper_last_run == last_run and got.reaper_blind == blind
    assert [(b.provider, b.since) for b in got.reaper_blind_since] == since


def test_a_pass_after_a_damaged_record_runs_and_rewrites_it(world: World) -> None:
    world.store.put_meta(META_REAPER, {"last_run": "x", "epoch": "y", "blind_since": 3}, None)
    world.reap()
    meta = read_meta(world.store)
    assert meta.last_run == world.now and meta.epoch is None


def test_a_failed_pass_keeps_the_blindness_it_knew(world: World) -> None:
    """A pass that crashes records its error beside what the last good pass saw: `gpuc ls` still says
    which provider is blind, and since when."""
    good = ReaperMeta(last_run=world.now - 5 * MIN, blind=("vast",), blind_since={"vast": world.now - 9 * MIN})
    world.store.put_meta(META_REAPER, good.value(), None)

    def boom(*args: object) -> list[object]:
        raise OSError("disk full")

    world.store.list_pods = boom  # type: ignore[method-assign, assignment]
    assert reap_safely(world.deps) is None
    meta = read_meta(world.store)
    assert (meta.last_run, meta.blind, meta.blind_since) == (good.last_run, good.blind, good.blind_since)
    assert meta.last_error is not None and "OSError" in meta.last_error and meta.last_attempt == world.now
