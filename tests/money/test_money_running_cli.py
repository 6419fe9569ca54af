"""The money that is going, where the user stands: `gpuc ledger` counts a running pod "running, so far", `gpuc ledger
note RUN TEXT` reaches a run that ended itself, `gpuc ledger reconcile` takes a live pod's open row for no
mismatch (exit 0), and `gpuc up --note` writes the note on the row."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result
from fakes.ctx import StatusView, answering
from fakes.money import T0

from gpuc.client.context import Ctx
from gpuc.client.money.commands import ledger
from gpuc.client.money.reconcile import SOURCE_FACTORIES, BillingRecord
from gpuc.client.runs import RunStore
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.errors import GpucError, WatchdogError
from gpuc.core.ledger.store import Ledger
from gpuc.core.settingsload import load_settings

HOUR = 3600.0
MONTH = "2026-09"
NOW = T0 + 3 * HOUR  # the open pod has run 3 h at $2/h: $6 so far


def hearing(*live: str) -> StatusResponse:
    pods = [
        PodRecord(pod_id=p, provider="runpod", name=p, experiment="hot", registered_at=T0, state="ok") for p in live
    ]
    return StatusResponse(server_time=NOW, reaper_period_s=300, pods=pods)


@pytest.fixture
def book() -> Ledger:
    book = Ledger(load_settings().ledger)
    book.start("done1", provider="runpod", experiment="sweep", gpu="H100", price_per_hour=1.0, start_ts=T0)
    book.end("done1", end_ts=T0 + HOUR)  # ended itself: $1, no note
    book.start("hot1", provider="runpod", experiment="hot", gpu="H100", price_per_hour=2.0, start_ts=T0)
    return book


def invoke(args: list[str], watchdog: StatusResponse | Exception) -> Result:
    ctx = Ctx(watchdog=answering(watchdog), clock=FakeClock(NOW))
    return CliRunner().invoke(ledger, args, obj=ctx)


def refusal(result: Result) -> tuple[int, str]:
    """The exit code and the words `gpuc` prints for the refusal (client/cli.py report_error)."""
    exc = result.exception
    assert isinstance(exc, GpucError), result.output
    return exc.exit_code, f"{exc.message} (fix: {exc.hint})"


# -- gpuc ledger: running, so far ----------------------------------------------------------------------
def test_the_ledger_shows_a_running_pod_and_the_month_with_it(book: Ledger) -> None:
    result = invoke(["--month", MONTH], hearing("hot1"))
    assert result.exit_code == 0, result.output
    assert "running, so far: $6.00 (1 pod(s), $2.00/h); with the closed rows $7.00" in result.output
    assert "hot  runpod  H100  3.00 h  $6.00" in result.output
    body = json.loads(invoke(["--month", MONTH, "--json"], hearing("hot1")).output)
    assert body["total_cost_usd"] == pytest.approx(1.0)  # the closed rows alone, as before
    assert body["running_usd"] == pytest.approx(6.0) and body["month_total_usd"] == pytest.approx(7.0)
    assert [(r["pod_id"], r["hours"]) for r in body["running"]] == [("hot1", pytest.approx(3.0))]
    documented = CliRunner().invoke(ledger, ["--help"]).output
    assert all(field in documented for field in ("running[]", "running_usd", "month_total_usd"))


def test_an_open_row_the_watchdog_does_not_hear_is_not_running(book: Ledger) -> None:
    result = invoke(["--month", MONTH], hearing())
    assert result.exit_code == 0, result.output
    assert "running, so far" not in result.output and "open rows" in result.output


def test_without_the_watchdog_the_open_row_counts_and_the_ledger_says_why(book: Ledger) -> None:
    result = invoke(["--month", MONTH], WatchdogError("connection refused"))
    assert result.exit_code == 0, result.output
    assert "running, so far: $6.00" in result.output
    assert "no word from the watchdog: 1 open row(s) counted as running, so far" in result.output


def test_an_unreachable_watchdog_is_asked_once(book: Ledger) -> None:
    asked: list[float] = []

    class Counting(StatusView):
        def status(self) -> StatusResponse:
            asked.append(NOW)
            raise WatchdogError("connection refused")

    ctx = Ctx(watchdog=Counting(), clock=FakeClock(NOW))  # type: ignore[arg-type]
    result = CliRunner().invoke(ledger, ["--month", MONTH], obj=ctx)
    assert result.exit_code == 0, result.output
    assert len(asked) == 1, "each ask of an unreachable watchdog may wait for a timeout"


# -- gpuc ledger note ---------------------------------------------------------------------------------
def test_a_note_reaches_a_run_that_ended_itself_by_its_experiment_name(book: Ledger) -> None:
    result = invoke(["note", "sweep", "lr 3e-4 wins"], hearing())
    assert result.exit_code == 0, result.output
    assert "note added to done1 (sweep" in result.output
    assert [r.note for r in book.rows()] == ["lr 3e-4 wins", ""]
    assert invoke(["note", "done1", "lr 3e-4 wins"], hearing()).exit_code == 0  # the same note: written once
    assert book.rows()[0].note == "lr 3e-4 wins"


def test_a_note_by_pod_name_or_run_id_goes_through_this_machines_runs(book: Ledger) -> None:
    settings = load_settings()
    RunStore(settings.home).record_intent("run-abc", "gpuc-hot", "runpod", "hot", T0)
    RunStore(settings.home).set_pod_id("run-abc", "hot1")
    assert invoke(["note", "run-abc", "still warming up"], hearing()).exit_code == 0
    assert invoke(["note", "gpuc-hot", "diverged at step 900"], hearing()).exit_code == 0
    assert book.rows()[1].note == "still warming up; diverged at step 900"


def test_an_experiment_with_two_runs_is_ambiguous_and_lists_them(book: Ledger) -> None:
    book.start("done2", provider="runpod", experiment="sweep", gpu="H100", price_per_hour=1.0, start_ts=T0 + HOUR)
    code, said = refusal(invoke(["note", "sweep", "x"], hearing()))
    assert code == 2 and "ambiguous: experiment 'sweep' has 2 runs in the ledger" in said
    assert "done1 (started" in said and "done2 (started 2026-09-01T23:00:00Z, running)" in said
    assert all(r.note == "" for r in book.rows())


@pytest.mark.parametrize(("text", "said"), [("  ", "the note is empty"), ("a\nb", "control character")])
def test_a_bad_note_or_an_unknown_run_is_refused_and_nothing_written(book: Ledger, text: str, said: str) -> None:
    code, words = refusal(invoke(["note", "done1", text], hearing()))
    assert code == 2 and said in words
    code, words = refusal(invoke(["note", "nosuch", "fine"], hearing()))
    assert code == 3 and "the ledger has no run 'nosuch'" in words
    assert all(r.note == "" for r in book.rows())


# -- gpuc ledger reconcile ----------------------------------------------------------------------------
class Billing:
    def billing(self, month: str) -> list[BillingRecord]:
        return [
            BillingRecord(provider="runpod", pod_id="done1", start=T0, end=T0 + HOUR, amount_usd=1.0, kind="gpu"),
            BillingRecord(provider="runpod", pod_id="hot1", start=T0, end=T0 + HOUR, amount_usd=2.0, kind="gpu"),
        ]


def test_reconcile_takes_a_live_pods_open_row_for_no_mismatch(book: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SOURCE_FACTORIES, "runpod", lambda settings: Billing())
    monkeypatch.setenv("RUNPOD_API_KEY", "rp_x")
    args = ["reconcile", "--month", MONTH, "--provider", "runpod"]
    live = invoke(args, hearing("hot1"))
    assert live.exit_code == 0, live.output
    assert "1/1 row(s) match" in live.output
    gone = invoke(args, hearing())  # billed, open, and no longer running: its end was never written
    assert gone.exit_code == 1 and "mismatch [open_row_billed] runpod hot1" in gone.output
