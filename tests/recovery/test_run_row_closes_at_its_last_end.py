"""A recovering run's one ledger row closes at its LAST attempt's end with what every attempt cost, never at its
first pod's end (the first outbid) and never while an attempt still bills; read again later, it says the same.

The run is told nothing when a pod ends on its own (the job's end, `gpuc down`, the reaper; the pod a stopped
recovery leaves running): its pod's record is. The watchdog's run route answers each attempt's end from that
record (functions/recovery/runs.py with_pod_ends), and the laptop closes the row only on the run's own ends
(core/ledger/intake.py run_end). And the first pod's record names its run even when a reaper pass took it for a stray
before `up` registered it (functions/store.py reregistration_changes): else it is a pod of its own to the
laptop, its row closed at the first outbid with one attempt's cost (seen end to end, under load).

Through the real handlers and reaper passes on the Vast emulator (testkit/spot_world.py) and the laptop's own
intake (`gpuc ls`: client/pods/survey.py) over the real watchdog client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuc.client.context import Ctx
from gpuc.client.pods.survey import ledger_intake, recovering_read
from gpuc.client.runs import RunStore
from gpuc.core.api import EndRequest, RunRecovery
from gpuc.core.clock import FakeClock, iso
from gpuc.core.ledger.rows import LedgerRow, row_cost
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.edge import Request, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.testkit.spot_world import ADMIN, BID, RUN_ID, WAIT_S, RecWorld, make_rec_world

PASS_S = 60.0


class Laptop:
    """`gpuc ls`'s intake against the world's watchdog, over the real client (its routes, its 404s)."""

    def __init__(self, world: RecWorld, home: Path) -> None:
        self.world = world
        settings = Settings(home=home, admin_token=SecretStr(ADMIN), watchdog_url="http://watchdog.test")
        client = WatchdogClient(settings, httpx.MockTransport(self._answer), sleep=lambda s: None)
        self.ctx = Ctx(settings=settings, runs=RunStore(home), clock=world.clock, echo=lambda _l: None, watchdog=client)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        asked = Request(request.method, request.url.path, dict(request.headers), request.content)
        answer = dispatch(asked, self.world.deps, self.world.now)
        return httpx.Response(answer.status, content=response_bytes(answer))

    def ls(self) -> LedgerRow:
        records = self.ctx.watchdog.status().pods
        assert ledger_intake(self.ctx, records, recovering_read(self.ctx, records)) is not None
        [row] = self.ctx.ledger().rows()
        return row

    def run(self) -> RunRecovery:
        found = self.ctx.watchdog.run(RUN_ID)
        assert found is not None
        return found


@pytest.fixture
def world(tmp_path: Path) -> Iterator[RecWorld]:
    w = make_rec_world(tmp_path / "watchdog", FakeClock(), reaper_period_s=PASS_S)
    yield w
    w.close()


def passes(world: RecWorld, n: int) -> None:
    for _ in range(n):
        world.clock.advance(PASS_S)
        world.reap()


def outbid_and_rerent(world: RecWorld, laptop: Laptop) -> float:
    """The first pod outbid, waited on, destroyed and replaced; the laptop looks at every pass meanwhile."""
    world.outbid()
    for _ in range(int(WAIT_S / PASS_S) + 3):
        passes(world, 1)
        assert laptop.ls().end == ""  # the run goes on: never closed at the first pod's end
    run = laptop.run()
    assert len(run.attempts) == 2 and run.attempts[0].end is not None
    return run.attempts[0].end


def job_ends(world: RecWorld, pod_id: str) -> float:
    """The latest attempt's job ends: its wrapper records the end, then its self-destroy (played)."""
    end = world.now
    body = EndRequest(end_at=end, by="wrapper", note="job exited 0").model_dump_json().encode()
    assert world.admin("POST", f"/v1/pods/{pod_id}/end", body).status == 200
    world.vast.destroy(pod_id)
    return end


@pytest.fixture(params=["registered", "adopted-first"])
def laptop(world: RecWorld, tmp_path: Path, request: pytest.FixtureRequest) -> Laptop:
    if request.param == "registered":
        first = world.up(recover=2)
    else:
        # A reaper pass lists the new pod between `up`'s create and its register, and takes it for a stray.
        first = world.first = world.vast.create(world.spec())
        world.reap()
        assert world.store.get_pod(first.id).origin == "adopted"  # type: ignore[union-attr]
        body = world.register_body(first.id, recover=2).model_dump_json().encode()
        assert world.admin("POST", "/v1/pods", body).status == 200
        rec = world.store.get_pod(first.id)
        assert rec is not None and (rec.origin, rec.run_id, rec.attempt) == ("registered", RUN_ID, 1)
    lap = Laptop(world, tmp_path / "laptop")
    lap.ctx.ledger().start(first.id, provider="vast", experiment="spot", gpu="RTX 4090", price_per_hour=BID,
                           start_ts=world.now)  # fmt: skip
    return lap


def test_the_row_closes_at_the_last_attempts_end_with_every_attempts_cost(world: RecWorld, laptop: Laptop) -> None:
    first_end = outbid_and_rerent(world, laptop)
    passes(world, 20)
    end = job_ends(world, world.latest())
    passes(world, 3)  # the run is done: its latest pod ended
    row = laptop.ls()
    run = laptop.run()
    assert run.done and [a.end for a in run.attempts] == [first_end, end]
    assert row.end == iso(end) != iso(first_end)
    cost = row_cost(row)
    assert cost is not None and cost == pytest.approx(sum(a.cost_usd for a in run.attempts), abs=1e-4)
    world.clock.advance(6 * 3600)  # read again hours later: the run's figures do not grow after its end
    assert laptop.run().spent_usd == pytest.approx(run.spent_usd)
    assert "2 attempts" in row.note


def test_a_stopped_recovery_leaves_the_row_open_while_its_pod_runs_on(world: RecWorld, laptop: Laptop) -> None:
    outbid_and_rerent(world, laptop)
    passes(world, 2)
    assert world.admin("POST", f"/v1/runs/{RUN_ID}/stop").status == 200
    passes(world, 2)
    assert laptop.run().done  # recovery is over, the pod runs on
    assert laptop.ls().end == ""  # and bills: the row stays open
    passes(world, 30)
    end = job_ends(world, world.latest())
    passes(world, 1)
    row = laptop.ls()
    assert row.end == iso(end)
    assert row_cost(row) == pytest.approx(laptop.run().spent_usd, abs=1e-4)
