"""A recovering run (`up --recover`) is ONE ledger row, its first pod's: the pods the watchdog rents after an
outbid never make rows of their own, the row stays open while the run goes on (its first pod ended at the
outbid), and closes when the run is done with the last attempt's end, the run's cost across every attempt
(the watchdog's RunRecovery.spent_usd: GPU time x price plus disks while paused) and the attempts in its note.
While it runs, `gpuc ledger`'s "running, so far" counts what the run spent, not the first pod's price x time.
Through `gpuc ls`'s own intake (client/pods/survey.py) with a watchdog answering from memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuc.client.context import Ctx
from gpuc.client.pods.survey import survey
from gpuc.client.runs import RunStore
from gpuc.core.api import AttemptRecord, PodRecord, RunRecovery, StatusResponse
from gpuc.core.budget import ledger_burns, month_spend
from gpuc.core.clock import FakeClock, iso
from gpuc.core.errors import WatchdogError
from gpuc.core.ledger.rows import LedgerRow
from gpuc.core.ledger.store import Ledger
from gpuc.core.pod import Pod
from gpuc.core.providers.base import DestroyResult, Provider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

T0 = 1_780_000_000.0  # 2026-05-28
RUN = "r1234abcd"
FIRST, SECOND, THIRD = "31000000", "31000001", "31000002"


def record(pod_id: str, attempt: int, *, end: float | None = None, state: str = "ok") -> PodRecord:
    return PodRecord(
        pod_id=pod_id,
        provider="vast",
        name=f"gpuc-{RUN}" if attempt == 1 else f"gpuc-{RUN}-a{attempt}",
        experiment="exp1",
        gpu="RTX 4090",
        price_per_hour=0.25,
        started_at=T0 + (attempt - 1) * 3600,
        registered_at=T0 + (attempt - 1) * 3600,
        state=state if end is None else "destroyed",
        end_at=end,
        run_id=RUN,
        attempt=attempt,
    )


def run_view(*, done: bool, spent: float = 0.23, stopped: str | None = None) -> RunRecovery:
    ends = [T0 + 1800, T0 + 5400, T0 + 9000 if done else None]
    attempts = [
        AttemptRecord(pod_id=p, start=T0 + i * 3600, price_per_hour=0.25, disk_per_hour=0.01, end=ends[i], cost_usd=c)
        for i, (p, c) in enumerate(((FIRST, 0.07), (SECOND, 0.11), (THIRD, 0.05)))
    ]
    return RunRecovery(
        run_id=RUN,
        experiment="exp1",
        provider="vast",
        recover=2,
        attempts=attempts,
        envelope_usd=3.0,
        deadline_at=T0 + 6 * 3600,
        spent_usd=spent,
        as_of=T0 + 9000,
        done=done,
        stopped_why=stopped,
    )


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "gpu-ledger.csv")
    ledger.start(FIRST, provider="vast", experiment="exp1", gpu="RTX 4090", price_per_hour=0.25, start_ts=T0)
    ledger.note(FIRST, "lr 3e-4")  # the user's `up --note`: kept beside the attempts
    return ledger


def live_records() -> list[PodRecord]:
    return [record(FIRST, 1, end=T0 + 1800), record(SECOND, 2, end=T0 + 5400), record(THIRD, 3)]


def only_row(book: Ledger) -> LedgerRow:
    [row] = book.rows()
    return row


def test_a_live_run_keeps_one_open_row_whatever_its_attempts(book: Ledger) -> None:
    """The first pod ended at its outbid and two more were rented: still one row, open."""
    report = book.sync_from_functions(live_records(), {RUN: run_view(done=False)})
    row = only_row(book)
    assert (row.end, row.cost_usd, report.closed) == ("", "", 0)


def test_a_run_not_read_keeps_its_row_open_at_its_first_pods_end(book: Ledger) -> None:
    """No word on the run (the watchdog did not answer for it): never closed at one attempt's end."""
    book.sync_from_functions(live_records(), {})
    assert only_row(book).end == ""
    book.sync_from_functions(live_records())
    assert only_row(book).end == ""


def test_a_done_run_closes_its_one_row_with_the_runs_cost_and_attempts(book: Ledger) -> None:
    records = [record(FIRST, 1, end=T0 + 1800), record(SECOND, 2, end=T0 + 5400), record(THIRD, 3, end=T0 + 9000)]
    report = book.sync_from_functions(records, {RUN: run_view(done=True, stopped="outbid 2 times (--recover 2)")})
    row = only_row(book)
    assert report.closed == 1
    assert row.end == iso(T0 + 9000)  # the last attempt's end, not the first pod's
    assert row.cost_usd == "0.2300"  # the run's spent across attempts, not $0.25/h x 2.5 h
    assert row.note.startswith("lr 3e-4; interruptible, 3 attempts (2 outbids): ")
    assert f"{FIRST} $0.07, {SECOND} $0.11, {THIRD} $0.05" in row.note
    assert "recovery stopped: outbid 2 times" in row.note


def test_a_run_the_watchdog_does_not_hold_is_a_pod_like_any_other(book: Ledger) -> None:
    book.sync_from_functions([record(FIRST, 1, end=T0 + 1800)], {RUN: None})
    assert only_row(book).end == iso(T0 + 1800)


def test_a_later_attempt_never_makes_a_row_even_when_the_first_is_unknown(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "gpu-ledger.csv")  # the laptop died before the start row
    ledger.sync_from_functions(live_records(), {RUN: run_view(done=False)})
    [row] = ledger.rows()
    assert row.start == iso(T0) and row.end == ""


def test_running_so_far_counts_the_runs_spend_not_the_first_pods_time(book: Ledger) -> None:
    from gpuc.core.ledger.intake import live_pod_ids, runs_spent

    records = live_records()
    runs = {RUN: run_view(done=False, spent=0.21)}
    book.sync_from_functions(records, runs)
    now = T0 + 9000
    summary = book.summary(None, now=now, live=live_pod_ids(records), runs_spent=runs_spent(records, runs))
    [running] = summary.running
    assert running.pod_id == FIRST and running.cost_usd == pytest.approx(0.21)  # not 0.25 x 2.5 h = 0.625


def test_the_budget_counts_a_done_runs_later_pods_once(book: Ledger) -> None:
    records = [record(FIRST, 1, end=T0 + 1800), record(SECOND, 2, end=T0 + 5400), record(THIRD, 3, end=T0 + 9000)]
    book.sync_from_functions(records, {RUN: run_view(done=True)})
    view = ledger_burns(book.entries(), records)
    assert month_spend(view.burns, T0 + 9000).total_usd == pytest.approx(0.23)


# -- through `gpuc ls`: the intake, the attempt shown, what is asked of the watchdog ---------------------------
class Answering:
    """The watchdog as `gpuc ls` reads it: its status, and each run it is asked for."""

    def __init__(self, status: StatusResponse, runs: dict[str, RunRecovery | None]) -> None:
        self.answer, self.runs = status, runs
        self.asked: list[str] = []

    def status(self) -> StatusResponse:
        return self.answer

    def run(self, run_id: str) -> RunRecovery | None:
        self.asked.append(run_id)
        if run_id not in self.runs:
            raise WatchdogError("cannot reach the watchdog")
        return self.runs[run_id]

    def close(self) -> None:
        pass


class OnePod(Provider):
    name = "local"

    def __init__(self, pods: list[Pod]) -> None:
        self.pods = pods

    def list_pods(self) -> list[Pod]:
        return list(self.pods)

    def get(self, pod_id: str) -> Pod | None:
        return next((p for p in self.pods if p.id == pod_id), None)

    def create(self, spec: object) -> Pod:
        raise AssertionError("never")

    def stop(self, pod_id: str) -> None:
        raise AssertionError("never")

    def destroy(self, pod_id: str) -> DestroyResult:
        raise AssertionError("never")

    def balance(self) -> object:  # type: ignore[override]
        raise AssertionError("never")


def ls_ctx(tmp_path: Path, watchdog: Answering, clock: FakeClock) -> Ctx:
    settings = Settings(
        home=tmp_path / "home",
        env_file=tmp_path / "none.env",
        admin_token=SecretStr("a"),
        results_bucket=(tmp_path / "bucket").as_uri(),
    )
    pod = Pod(id=THIRD, provider="local", name=f"gpuc-{RUN}-a3", status="running", managed=True)
    return Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=clock,
        echo=lambda _l: None,
        watchdog=watchdog,  # type: ignore[arg-type]
        providers={"local": OnePod([pod])},
    )


def test_ls_takes_in_a_live_run_as_one_row_and_shows_its_attempt(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 9000)
    status = StatusResponse(server_time=T0 + 9000, reaper_last_run=T0 + 9000, reaper_period_s=300, pods=live_records())
    watchdog = Answering(status, {RUN: run_view(done=False)})
    ctx = ls_ctx(tmp_path, watchdog, clock)
    kit = tmp_path / "bucket" / ".gpuc-kits" / RUN
    kit.mkdir(parents=True)
    listing = survey(ctx)
    assert kit.is_dir()  # the next attempt may still boot from it
    [row] = listing.rows
    assert row["attempt"] == "attempt 3/3"
    [ledger_row] = ctx.ledger().rows()
    assert ledger_row.end == "" and ledger_row.start == iso(T0)
    assert watchdog.asked == [RUN]  # one request for the one run


def test_ls_asks_nothing_more_when_no_run_recovers(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    plain = record(FIRST, 1).model_copy(update={"run_id": None, "attempt": None})
    status = StatusResponse(server_time=T0, reaper_last_run=T0, reaper_period_s=300, pods=[plain])
    watchdog = Answering(status, {})
    survey(ls_ctx(tmp_path, watchdog, clock))
    assert watchdog.asked == []


def test_ls_closes_a_done_runs_row_once_and_stops_asking(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 9000)
    records = [record(FIRST, 1, end=T0 + 1800), record(SECOND, 2, end=T0 + 5400), record(THIRD, 3, end=T0 + 9000)]
    status = StatusResponse(server_time=T0 + 9000, reaper_last_run=T0 + 9000, reaper_period_s=300, pods=records)
    watchdog = Answering(status, {RUN: run_view(done=True)})
    ctx = ls_ctx(tmp_path, watchdog, clock)
    kit = tmp_path / "bucket" / ".gpuc-kits" / RUN
    kit.mkdir(parents=True)
    (kit / "project.tar.gz").write_bytes(b"the user's code")
    survey(ctx)
    assert not kit.exists()  # the run is done: nothing rents from its kit any more
    [row] = ctx.ledger().rows()
    assert row.end == iso(T0 + 9000) and row.cost_usd == "0.2300"
    survey(ctx)
    assert watchdog.asked == [RUN]  # its row is closed: not asked again
