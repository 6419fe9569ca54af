"""`gpuc down` on a recovering run (`up --recover`): the recovery is stopped at the watchdog BEFORE any destroy
(else the watchdog may rent the next attempt while the user ends this one), the pod destroyed is the run's
latest attempt (its first pod is gone after the outbid), it says so, and the run's one ledger row closes with
the watchdog's figures. A watchdog and a provider answering from memory, each call written to one shared log."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from gpuc.client.context import Ctx
from gpuc.client.pods.down import down
from gpuc.client.runs import RunStore
from gpuc.core.api import Ack, AttemptRecord, EndRequest, PodRecord, RunRecovery, StatusResponse
from gpuc.core.clock import FakeClock, iso
from gpuc.core.errors import GpucError, WatchdogError
from gpuc.core.ledger.intake import run_note
from gpuc.core.pod import Pod
from gpuc.core.providers.base import DestroyResult, PodAccess, Provider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

T0 = 1_780_000_000.0
RUN = "r1234abcd"
FIRST, SECOND = "31000000", "31000001"


def recovering(*, done: bool = False) -> RunRecovery:
    attempts = [
        AttemptRecord(pod_id=FIRST, start=T0, price_per_hour=0.25, disk_per_hour=0.01, end=T0 + 1800, cost_usd=0.13),
        AttemptRecord(
            pod_id=SECOND,
            start=T0 + 2400,
            price_per_hour=0.25,
            disk_per_hour=0.01,
            end=T0 + 4000 if done else None,
            cost_usd=0.11,
        ),
    ]
    return RunRecovery(
        run_id=RUN,
        experiment="exp1",
        provider="vast",
        recover=2,
        attempts=attempts,
        envelope_usd=3.0,
        deadline_at=T0 + 7200,
        spent_usd=0.24,
        as_of=T0 + 4000,
        done=done,
        stop_asked=done,
        stopped_why="stopped by gpuc down" if done else None,
    )


class Watchdog:
    def __init__(self, log: list[str], run: RunRecovery | Exception | None, busy: int = 0) -> None:
        self.log, self.answer = log, run
        self.stopped = self.ended = False
        self.busy = busy  # reads after the stop that still find a pass inside a re-rent

    def run(self, run_id: str) -> RunRecovery | None:
        self.log.append(f"run {run_id}")
        if isinstance(self.answer, Exception):
            raise self.answer
        if self.answer is not None and self.ended:
            return recovering(done=True)
        if self.answer is not None and self.stopped and self.busy:
            self.busy -= 1
            return self.answer.model_copy(update={"busy": "renting attempt 3 (pod 31000002)", "stop_asked": True})
        return self.answer

    def stop_run(self, run_id: str) -> Ack:
        self.log.append(f"stop_run {run_id}")
        self.stopped = True
        return Ack()

    def status(self) -> StatusResponse:
        pods = [
            PodRecord(
                pod_id=SECOND,
                provider="local",
                name=f"gpuc-{RUN}-a2",
                experiment="exp1",
                registered_at=T0 + 2400,
                run_id=RUN,
                attempt=2,
            )
        ]
        return StatusResponse(server_time=T0 + 4000, reaper_period_s=300, pods=pods)

    def end(self, pod_id: str, request: EndRequest) -> Ack:
        self.log.append(f"end {pod_id}")
        self.ended = True
        return Ack()

    def notify(self, title: str, message: str) -> Ack:
        return Ack()

    def close(self) -> None:
        pass


class Vast(Provider):
    """The run's pods: the first is gone (destroyed after its outbid), the second runs."""

    name = "local"

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.pods = {SECOND: Pod(id=SECOND, provider="local", name=f"gpuc-{RUN}-a2", status="running", managed=True)}

    def get(self, pod_id: str) -> Pod | None:
        return self.pods.get(pod_id)

    def list_pods(self) -> list[Pod]:
        return list(self.pods.values())

    def destroy(self, pod_id: str) -> DestroyResult:
        self.log.append(f"destroy {pod_id}")
        self.pods.pop(pod_id, None)
        return "destroyed"

    def create(self, spec: object) -> Pod:
        raise AssertionError("never")

    def stop(self, pod_id: str) -> None:
        raise AssertionError("never")

    def balance(self) -> object:  # type: ignore[override]
        raise AssertionError("never")


@pytest.fixture
def world(tmp_path: Path) -> tuple[Ctx, list[str], list[str]]:
    settings = Settings(home=tmp_path / "home", env_file=tmp_path / "none.env", admin_token=SecretStr("a"))
    log: list[str] = []
    said: list[str] = []
    ctx = Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=FakeClock(T0 + 4000),
        echo=said.append,
        watchdog=Watchdog(log, recovering()),  # type: ignore[arg-type]
        providers={"local": Vast(log)},
    )
    ctx.runs.record_intent(RUN, f"gpuc-{RUN}", "local", "exp1", T0)
    ctx.runs.set_pod_id(RUN, FIRST)
    ctx.ledger().start(FIRST, provider="vast", experiment="exp1", gpu="RTX 4090", price_per_hour=0.25, start_ts=T0)
    return ctx, log, said


@pytest.mark.parametrize("ref", ["exp1", RUN, SECOND], ids=["experiment", "run-id", "later-pod-id"])
def test_down_stops_the_recovery_then_destroys_the_latest_attempt(
    world: tuple[Ctx, list[str], list[str]], ref: str, tmp_path: Path
) -> None:
    ctx, log, said = world
    down(ref, ctx, copied_to=tmp_path)  # results copied and verified: no sync gate here
    assert log.index(f"stop_run {RUN}") < log.index(f"destroy {SECOND}")
    assert f"end {SECOND}" in log and f"destroy {FIRST}" not in log
    assert any("recovery of run" in line and "stopped" in line for line in said)
    [row] = ctx.ledger().rows()
    assert row.end == iso(T0 + 4000) and row.cost_usd == "0.2400"  # the run's figures, both attempts
    assert "interruptible, 2 attempts (1 outbid)" in row.note


def test_down_of_a_run_that_does_not_recover_asks_once_and_stops_nothing(
    world: tuple[Ctx, list[str], list[str]], tmp_path: Path
) -> None:
    ctx, log, _said = world
    ctx.watchdog.answer = None  # type: ignore[attr-defined]
    ctx.runs.set_pod_id(RUN, SECOND)
    down(SECOND, ctx, copied_to=tmp_path)
    assert log == [f"run {RUN}", f"end {SECOND}", f"destroy {SECOND}"]


def test_a_watchdog_that_cannot_be_asked_does_not_keep_the_pod_billing(
    world: tuple[Ctx, list[str], list[str]], tmp_path: Path
) -> None:
    ctx, log, said = world
    ctx.watchdog.answer = WatchdogError("cannot reach the watchdog")  # type: ignore[attr-defined]
    ctx.runs.set_pod_id(RUN, SECOND)
    down(SECOND, ctx, copied_to=tmp_path)
    assert f"destroy {SECOND}" in log
    assert any("destroying anyway" in line and "again once the watchdog answers" in line for line in said)


def test_down_waits_while_a_watchdog_pass_is_inside_a_re_rent_then_ends_the_run(
    world: tuple[Ctx, list[str], list[str]], tmp_path: Path
) -> None:
    """The stop landed while a pass was renting: `down` reads the run again until the pass is over (it destroys
    what it rented after the stop), and only then ends the run's pod."""
    ctx, log, said = world
    ctx.watchdog.busy = 3  # type: ignore[attr-defined]
    down(RUN, ctx, copied_to=tmp_path)
    reads = [i for i, line in enumerate(log) if line == f"run {RUN}"]
    assert len(reads) >= 1 + 4 and reads[4] < log.index(f"destroy {SECOND}")  # 3 busy reads, a settled one
    assert any("no further attempt is rented" in line for line in said)


def test_down_says_plainly_what_the_watchdog_is_still_doing_and_claims_nothing(
    world: tuple[Ctx, list[str], list[str]], tmp_path: Path
) -> None:
    ctx, log, said = world
    ctx.watchdog.busy = 10_000  # type: ignore[attr-defined]  # a pass that does not finish while down waits
    with pytest.raises(GpucError) as refused:
        down(RUN, ctx, copied_to=tmp_path)
    assert "still renting attempt 3 (pod 31000002)" in refused.value.message
    assert f"gpuc down {RUN}" in (refused.value.hint or "")
    assert not any("no further attempt is rented" in line for line in said)
    assert not [line for line in log if line.startswith("destroy")]


def test_down_during_an_outbid_destroys_the_paused_attempt_after_the_stop(
    world: tuple[Ctx, list[str], list[str]],
) -> None:
    """`gpuc down` while the recovery waits to re-rent (attempt 2 outbid): the stop first, then the paused attempt
    destroyed (the stopped recovery destroys it anyway: a refusal said "kept" while the watchdog destroyed it)."""
    ctx, log, said = world
    vast = ctx.providers["local"]
    assert isinstance(vast, Vast)
    vast.pods[SECOND] = Pod(id=SECOND, provider="local", name=f"gpuc-{RUN}-a2", status="paused", managed=True)
    down("exp1", ctx)  # no copied_to: the sync gate would refuse a paused pod
    assert log.index(f"stop_run {RUN}") < log.index(f"destroy {SECOND}")
    assert any("no further attempt is rented" in line for line in said), said
    assert any(f"{SECOND} is paused (outbid)" in line and "last push" in line for line in said), said


def test_down_keeps_a_paused_pod_of_a_run_that_does_not_recover(world: tuple[Ctx, list[str], list[str]]) -> None:
    """The same paused pod without a recovering run behind it: the sync gate refuses, with --force in its fix."""
    ctx, log, _ = world
    ctx.watchdog.answer = None  # type: ignore[attr-defined]
    vast = ctx.providers["local"]
    assert isinstance(vast, Vast)
    vast.pods[FIRST] = Pod(id=FIRST, provider="local", name=f"gpuc-{RUN}", status="paused", managed=True)
    with pytest.raises(GpucError, match="is paused: its results cannot be synced"):
        down("exp1", ctx)
    assert not any(line.startswith("destroy") for line in log), log


def test_a_stop_during_the_last_attempts_outbid_counts_that_outbid_too() -> None:
    """The run's one row names every outbid: attempt 2 outbid, then the stop (the rehearsal's `gpuc down` during
    the wait) is 2 attempts and 2 outbids, not 1."""
    run = recovering(done=True)
    assert run_note(run).startswith("interruptible, 2 attempts (1 outbid): ")
    paused = [run.attempts[0], run.attempts[1].model_copy(update={"paused_at": T0 + 3900})]
    assert run_note(run.model_copy(update={"attempts": paused})).startswith("interruptible, 2 attempts (2 outbids): ")


class Booting:
    """The pod's shell while a re-rented attempt boots: gpuc's python is not installed yet."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.ran: list[list[str]] = []

    def __call__(self, provider: Provider, pod: Pod, settings: Settings) -> PodAccess:
        return cast(PodAccess, self)

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        self.ran.append(argv)
        return self.code, "/bin/sh: 1: exec: /workspace/.gpuc/bin/python: not found"


def test_down_while_a_re_rented_attempt_boots_destroys_it_as_it_holds_no_results(
    world: tuple[Ctx, list[str], list[str]],
) -> None:
    """The recovery's wait ran out before `down` (a slow laptop): attempt 2 is renting and booting, gpuc not
    installed on it yet. No job ran there (the agent starts it after the install and the restore), so the pod
    is destroyed, not kept billing "for its results"."""
    ctx, log, said = world
    booting = ctx._access = Booting(127)
    down("exp1", ctx)
    assert booting.ran == [["python", "-m", "gpuc.instance_side", "sync"]]
    assert log.index(f"stop_run {RUN}") < log.index(f"destroy {SECOND}")
    assert any(f"{SECOND} is still booting" in line and "no job ran there" in line for line in said), said


@pytest.mark.parametrize("code", [1, 255])
def test_down_keeps_a_re_rented_attempt_whose_sync_failed_otherwise(
    world: tuple[Ctx, list[str], list[str]], code: int
) -> None:
    """Only the shell's "no such command" says gpuc never ran there: a sync that failed (1) or an ssh that did not
    connect (255) may leave results only on the pod, which stays."""
    ctx, log, _ = world
    ctx._access = Booting(code)
    with pytest.raises(GpucError, match="results sync failed"):
        down("exp1", ctx)
    assert not any(line.startswith("destroy") for line in log), log


def test_down_keeps_the_first_pod_of_a_run_whose_gpuc_is_missing(world: tuple[Ctx, list[str], list[str]]) -> None:
    """The first pod is `up`'s own: gpuc missing there is not a boot in progress (up installs it before the job)."""
    ctx, log, _ = world
    ctx.watchdog.answer = None  # type: ignore[attr-defined]
    vast = ctx.providers["local"]
    assert isinstance(vast, Vast)
    vast.pods[FIRST] = Pod(id=FIRST, provider="local", name=f"gpuc-{RUN}", status="running", managed=True)
    ctx._access = Booting(127)
    with pytest.raises(GpucError, match="results sync failed"):
        down("exp1", ctx)
    assert not any(line.startswith("destroy") for line in log), log
