from __future__ import annotations

import csv
import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from fakes.money import T0, write_rows

from gpuc.core.api import PodRecord
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.rows import LEDGER_COLUMNS
from gpuc.core.ledger.store import Ledger


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "gpu-ledger.csv")


def start(book: Ledger, pod: str, ts: float = T0, price: float | None = 0.74, experiment: str = "kv-cache") -> None:
    book.start(pod, provider="runpod", experiment=experiment, gpu="RTX 4090", price_per_hour=price, start_ts=ts)


def csv_lines(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_start_writes_the_first_six_columns_under_the_spec_header(book: Ledger) -> None:
    row = book.start("pod1", provider="runpod", experiment="kv-cache", gpu="RTX 4090", price_per_hour=0.74, start_ts=T0)
    assert row.cells() == [
        "2026-09-01",
        "kv-cache",
        "runpod",
        "RTX 4090",
        "0.74",
        "2026-09-01T22:00:00Z",
        "",
        "",
        "",
    ]
    lines = csv_lines(book.path)
    assert (
        tuple(lines[0])
        == LEDGER_COLUMNS
        == ("date", "experiment", "provider", "gpu", "price_per_hour", "start", "end", "cost_usd", "note")
    )
    assert lines[1] == row.cells()
    index = json.loads(book.index_path.read_text())
    assert index["pods"]["pod1"]["committed"] is True and index["pods"]["pod1"]["row"] == 0


def test_end_fills_end_cost_and_note(book: Ledger) -> None:
    start(book, "pod1")
    row = book.end("pod1", end_ts=T0 + 5400, note="kv cache on: 1.9x; tok/s=74")
    assert row is not None
    assert (row.end, row.cost_usd, row.note) == (
        "2026-09-01T23:30:00Z",
        "1.1100",
        "kv cache on: 1.9x; tok/s=74",
    )
    assert csv_lines(book.path)[1][6:] == ["2026-09-01T23:30:00Z", "1.1100", "kv cache on: 1.9x; tok/s=74"]


def test_a_second_close_keeps_the_end_but_may_add_a_note(book: Ledger) -> None:
    start(book, "pod1")
    book.end("pod1", end_ts=T0 + 3600)
    again = book.end("pod1", end_ts=T0 + 7200, note="late conclusion")
    assert again is not None
    assert (again.end, again.cost_usd, again.note) == ("2026-09-01T23:00:00Z", "0.7400", "late conclusion")
    assert book.end("pod1", end_ts=T0 + 9000, note="late conclusion") == again  # no duplicate note
    third = book.end("pod1", end_ts=T0 + 9000, note="and more")
    assert third is not None and third.note == "late conclusion; and more"


def test_start_is_idempotent_and_unknown_pods_do_not_close(book: Ledger) -> None:
    start(book, "pod1")
    start(book, "pod1", ts=T0 + 99, price=9.0)
    assert len(book.rows()) == 1 and book.rows()[0].price_per_hour == "0.74"
    assert book.end("nope", end_ts=T0) is None


def test_a_row_without_a_price_closes_without_a_cost(book: Ledger) -> None:
    start(book, "pod1", price=None)
    row = book.end("pod1", end_ts=T0 + 60)
    assert row is not None and row.end and row.cost_usd == "" and row.price_per_hour == ""


def test_notes_with_commas_and_quotes_survive_the_csv(book: Ledger) -> None:
    start(book, "pod1")
    note = 'batch 8, seq 2048: "memory-bound", as expected'
    book.end("pod1", end_ts=T0 + 60, note=note)
    assert Ledger(book.path).rows()[0].note == note
    assert all(len(line) == 9 for line in csv_lines(book.path))


def test_sync_closes_rows_the_pod_or_reaper_ended_while_the_laptop_slept(book: Ledger) -> None:
    start(book, "pod1")
    start(book, "pod2", ts=T0 + 10)
    records = [
        PodRecord(
            pod_id="pod1",
            provider="runpod",
            name="gpuc-aaaa1",
            experiment="kv-cache",
            registered_at=T0,
            end_at=T0 + 1800,
            ended_by="reaper",
            note="destroyed: heartbeat silent",
        ),
        PodRecord(pod_id="pod2", provider="runpod", name="gpuc-aaaa2", experiment="kv-cache", registered_at=T0),
    ]
    assert book.sync_from_functions(records).closed == 1
    assert book.sync_from_functions(records).closed == 0
    rows = {r.start: r for r in book.rows()}
    assert rows["2026-09-01T22:00:00Z"].end == "2026-09-01T22:30:00Z"
    assert rows["2026-09-01T22:00:00Z"].cost_usd == "0.3700"
    assert rows["2026-09-01T22:00:00Z"].note == "destroyed: heartbeat silent"
    assert rows["2026-09-01T22:00:10Z"].end == ""


def test_sync_records_a_pod_the_ledger_never_saw(book: Ledger) -> None:
    # The laptop crashed between registering the pod and writing its start row: the money still counts.
    record = PodRecord(
        pod_id="lost",
        provider="vast",
        name="gpuc-bbbb1",
        experiment="quant",
        gpu="RTX 3090",
        price_per_hour=0.15,
        started_at=T0,
        registered_at=T0 + 5,
        end_at=T0 + 7200,
    )
    assert book.sync_from_functions([record]).closed == 1
    (row,) = book.rows()
    assert row.cells()[:8] == [
        "2026-09-01",
        "quant",
        "vast",
        "RTX 3090",
        "0.15",
        "2026-09-01T22:00:00Z",
        "2026-09-02T00:00:00Z",
        "0.3000",
    ]
    start(book, "lost")  # `up` resuming after the crash does not add a second row
    assert len(book.rows()) == 1


def test_entries_give_each_row_its_pod_id_even_after_hand_edits(book: Ledger) -> None:
    start(book, "pod1")
    start(book, "pod2", ts=T0 + 10)
    lines = csv_lines(book.path)
    # The user deletes pod1's row and adds one of their own by hand.
    with book.path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(
            [
                lines[0],
                ["2026-09-02", "manual", "vast", "L4", "0.3", "2026-09-02T10:00:00Z", "", "", ""],
                lines[2],
            ]
        )
    entries = book.entries()
    assert [(e.pod_id, e.row.experiment) for e in entries] == [(None, "manual"), ("pod2", "kv-cache")]
    assert book.end("pod1", end_ts=T0 + 60) is None  # its row is gone: never close another one
    closed = book.end("pod2", end_ts=T0 + 70)
    assert closed is not None and closed.start == "2026-09-01T22:00:10Z"
    assert book.rows()[0].end == ""


def test_a_broken_csv_line_is_an_error_not_a_silent_rewrite(book: Ledger) -> None:
    start(book, "pod1")
    with book.path.open("a", encoding="utf-8") as fh:
        fh.write("2026-09-02,oops\n")
    with pytest.raises(ConfigError) as err:
        start(book, "pod2")
    assert "line 3" in err.value.message and err.value.hint
    book.path.write_text("when,what\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        book.rows()


def test_a_broken_index_is_an_error_with_a_fix(book: Ledger) -> None:
    start(book, "pod1")
    book.index_path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        book.end("pod1", end_ts=T0)
    assert err.value.hint and "mv" in err.value.hint


# --- crashes -----------------------------------------------------------------------------------------------


def fail_replace_of(monkeypatch: pytest.MonkeyPatch, target: Path, on_call: int = 1) -> None:
    """Make the on_call-th os.replace onto `target` raise, as a crash at that instant would stop it."""
    real = os.replace
    calls = {"n": 0}

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == target:
            calls["n"] += 1
            if calls["n"] == on_call:
                raise OSError("simulated crash")
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)  # what the ledger's atomic write calls


def leftovers(book: Ledger) -> list[str]:
    return sorted(p.name for p in book.path.parent.glob("*.tmp"))


def test_a_crash_before_the_csv_write_leaves_the_old_file_and_the_next_writer_completes_it(
    book: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(book, "pod1")
    before = book.path.read_bytes()
    fail_replace_of(monkeypatch, book.path)
    with pytest.raises(OSError):
        start(book, "pod2", ts=T0 + 10)
    monkeypatch.undo()
    assert book.path.read_bytes() == before and leftovers(book) == []
    start(book, "pod3", ts=T0 + 20)
    assert [r.start[-3:] for r in book.rows()] == ["00Z", "10Z", "20Z"]
    closed = book.end("pod2", end_ts=T0 + 3610)
    assert closed is not None and closed.cost_usd == "0.7400"


def test_a_crash_after_the_csv_write_is_not_written_twice(book: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    fail_replace_of(monkeypatch, book.index_path, on_call=2)  # the intent lands, the commit does not
    with pytest.raises(OSError):
        start(book, "pod1")
    monkeypatch.undo()
    assert json.loads(book.index_path.read_text())["pods"]["pod1"]["committed"] is False
    assert len(book.rows()) == 1
    start(book, "pod2", ts=T0 + 10)
    assert len(book.rows()) == 2
    assert all(e["committed"] for e in json.loads(book.index_path.read_text())["pods"].values())


def test_a_crash_while_closing_keeps_the_row_open_not_broken(book: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    start(book, "pod1")
    fail_replace_of(monkeypatch, book.path)
    with pytest.raises(OSError):
        book.end("pod1", end_ts=T0 + 60)
    monkeypatch.undo()
    assert book.rows()[0].end == ""
    assert book.end("pod1", end_ts=T0 + 60) is not None


KILLER = """
import os, sys, time
from pathlib import Path
from gpuc.core.ledger import store as L
path, marker, freeze_at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
real_fsync, calls = os.fsync, [0]
def fsync(fd):
    calls[0] += 1
    if calls[0] == freeze_at:
        marker.write_text("frozen")
        time.sleep(60)
    real_fsync(fd)
L.os.fsync = fsync
L.Ledger(path).start("victim", provider="vast", experiment="e", gpu="L4", price_per_hour=0.3, start_ts=1.79e9)
"""


# A start fsyncs six times: index intent (file, dir), CSV (file, dir), index commit (file, dir).
@pytest.mark.parametrize(("freeze_at", "victim_rows"), [(1, 0), (3, 1), (5, 1)])
def test_a_writer_killed_mid_write_never_breaks_or_doubles_a_row(
    tmp_path: Path, freeze_at: int, victim_rows: int
) -> None:
    book = Ledger(tmp_path / "gpu-ledger.csv")
    start(book, "before")
    marker = tmp_path / "frozen"
    child = subprocess.Popen([sys.executable, "-c", KILLER, str(book.path), str(marker), str(freeze_at)])
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert child.poll() is None, "the writer exited before it froze"
            assert time.monotonic() < deadline, "the writer never froze"
            time.sleep(0.02)
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait()
    assert book.rows()[0].experiment == "kv-cache"  # readable, the finished row intact
    start(book, "after", ts=T0 + 10)
    experiments = [r.experiment for r in book.rows()]
    assert experiments.count("e") == victim_rows and experiments.count("kv-cache") == 2
    assert leftovers(book) == []
    assert all(len(line) == 9 for line in csv_lines(book.path))


# --- two writers -------------------------------------------------------------------------------------------


def test_threads_never_lose_a_row(book: Ledger) -> None:
    def worker(n: int) -> None:
        for i in range(10):
            pod = f"t{n}-{i}"
            start(book, pod, ts=T0 + n * 100 + i, experiment=f"exp{n}")
            book.end(pod, end_ts=T0 + n * 100 + i + 3600)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = book.rows()
    assert len(rows) == 60 and all(r.end and r.cost_usd == "0.7400" for r in rows)
    assert len({e.pod_id for e in book.entries()}) == 60


def test_processes_never_lose_a_row(tmp_path: Path) -> None:
    path = tmp_path / "gpu-ledger.csv"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=write_rows, args=(str(path), n, 8)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    rows = Ledger(path).rows()
    assert len(rows) == 32
    assert sorted(r.note for r in rows) == sorted(f"done {i}" for _ in range(4) for i in range(8))
    assert all(r.cost_usd == "0.4000" for r in rows)


# --- what comes in is checked, what is read is not trusted ----------------------------------------------------


def _record(pod: str, **kw: object) -> PodRecord:
    base: dict[str, object] = {
        "pod_id": pod,
        "provider": "runpod",
        "name": f"gpuc-{pod}0000",
        "experiment": "kv-cache",
        "registered_at": T0,
    }
    return PodRecord.model_validate({**base, **kw})


# Incident: a signed pod event with end_at = 1e300 was accepted; every `gpuc ls` / `gpuc ledger` then failed
# with OverflowError, for as long as the watchdog kept the record.
@pytest.mark.parametrize("end_at", [1e300, float("inf"), float("nan"), -1e12, 1e11])
def test_sync_refuses_an_absurd_end_with_a_warning_and_keeps_the_row_open(book: Ledger, end_at: float) -> None:
    start(book, "pod1")
    report = book.sync_from_functions([_record("pod1", end_at=end_at, note="reaper")])
    assert report.closed == 0
    (warning,) = report.warnings
    assert "pod1" in warning and "not a time" in warning
    (row,) = book.rows()
    assert row.end == "" and row.cost_usd == "" and row.note == ""
    assert book.summary().open_rows == [row]


def test_sync_adds_no_row_for_an_absurd_start_and_no_price_for_an_absurd_price(book: Ledger) -> None:
    report = book.sync_from_functions(
        [
            _record("lost1", started_at=1e300, end_at=T0 + 60),
            _record("lost2", started_at=T0, price_per_hour=float("inf")),
            _record("lost3", started_at=T0, price_per_hour=-0.5),
            _record("fine", started_at=T0, price_per_hour=0.5, end_at=T0 + 3600),
        ]
    )
    assert report.closed == 1 and len(report.warnings) == 3
    assert [r.price_per_hour for r in book.rows()] == ["", "", "0.5"]
    assert book.rows()[-1].cost_usd == "0.5000"


def test_start_and_end_refuse_absurd_numbers_with_a_clear_error(book: Ledger) -> None:
    with pytest.raises(ConfigError, match="not a time"):
        start(book, "pod1", ts=1e300)
    with pytest.raises(ConfigError, match="not an amount"):
        start(book, "pod1", price=float("nan"))
    start(book, "pod1")
    with pytest.raises(ConfigError, match="not a time"):
        book.end("pod1", end_ts=float("inf"))
    assert book.rows()[0].end == ""


def test_readers_leave_out_absurd_rows_with_a_warning(book: Ledger) -> None:
    start(book, "good")
    book.end("good", end_ts=T0 + 3600)
    bad = [
        ["2026-09-02", "far-end", "vast", "L4", "0.3", "2026-09-02T10:00:00Z", "9999-12-31T23:59:59Z", "", "x"],
        ["2026-09-03", "huge-cost", "vast", "L4", "0.3", "2026-09-03T10:00:00Z", "2026-09-03T11:00:00Z", "1e308", ""],
        ["2026-09-04", "inf-price", "vast", "L4", "inf", "2026-09-04T10:00:00Z", "2026-09-04T11:00:00Z", "", "x"],
        ["2026-09-05", "nan-cost", "vast", "L4", "0.3", "2026-09-05T10:00:00Z", "2026-09-05T11:00:00Z", "nan", "x"],
        ["someday", "bad-date", "vast", "L4", "0.3", "2026-09-06T10:00:00Z", "2026-09-06T11:00:00Z", "0.3", "x"],
    ]
    with book.path.open("a", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(bad)
    summary = book.summary()
    assert summary.total_cost_usd == pytest.approx(0.74) and summary.total_hours == pytest.approx(1.0)
    assert len(summary.warnings) == 5
    for cells, warning in zip(bad, summary.warnings, strict=True):
        assert cells[1] in warning and "left out of the totals" in warning
    json.dumps(asdict(summary), allow_nan=False)  # no Infinity / NaN in `gpuc ledger --json`


FORMULAS = ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)", "\tTAB", "\rCR", "'=quoted", "''@twice"]


@pytest.mark.parametrize("note", FORMULAS)
def test_a_note_a_spreadsheet_would_run_is_written_inert_and_reads_back_as_written(book: Ledger, note: str) -> None:
    start(book, "pod1")
    book.end("pod1", end_ts=T0 + 60, note=note)
    cell = csv_lines(book.path)[1][8]
    assert cell.startswith("'") and cell[1:] == note, "a spreadsheet would run this cell"
    assert Ledger(book.path).rows()[0].note == note
    assert all(len(line) == 9 for line in csv_lines(book.path))


def test_harmless_notes_are_written_as_they_are(book: Ledger) -> None:
    start(book, "pod1")
    book.end("pod1", end_ts=T0 + 60, note="'tis fine; a-b = c")
    assert csv_lines(book.path)[1][8] == "'tis fine; a-b = c" == book.rows()[0].note


# Incident: a ledger saved by a spreadsheet with a UTF-8 byte-order mark made every ledger command refuse.
def test_a_ledger_saved_with_a_bom_reads_and_is_written_back_as_plain_utf8(book: Ledger) -> None:
    start(book, "pod1")
    start(book, "pod2", ts=T0 + 10)
    book.end("pod1", end_ts=T0 + 60, note="café, ok")
    lines = csv_lines(book.path)
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_ALL).writerows(lines)  # as a spreadsheet saves
    book.path.write_bytes(b"\xef\xbb\xbf" + out.getvalue().encode("utf-8"))
    assert [r.note for r in book.rows()] == ["café, ok", ""]
    book.check()
    book.end("pod2", end_ts=T0 + 70)
    start(book, "pod3", ts=T0 + 20)
    raw = book.path.read_bytes()
    assert not raw.startswith(b"\xef\xbb\xbf") and b"\r\n" not in raw
    rows = book.rows()
    assert [r.start[-3:] for r in rows] == ["00Z", "10Z", "20Z"] and rows[1].end and rows[0].note == "café, ok"


def test_check_says_what_is_wrong_before_anything_is_spent(book: Ledger, tmp_path: Path) -> None:
    book.check()  # no ledger yet: fine, `up` will create it
    start(book, "pod1")
    book.path.write_bytes(book.path.read_bytes() + "2026-09-02,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="line 3 is not UTF-8") as err:
        book.check()
    assert err.value.hint and "UTF-8" in err.value.hint
    folder = tmp_path / "a-folder.csv"
    folder.mkdir()
    with pytest.raises(ConfigError, match="cannot read"):
        Ledger(folder).check()


def test_a_note_with_a_bare_carriage_return_keeps_its_row_whole(book: Ledger) -> None:
    start(book, "pod1")
    book.end("pod1", end_ts=T0 + 60, note="pasted from a terminal\rloss 0.12")
    start(book, "pod2", ts=T0 + 10)
    assert [r.note for r in Ledger(book.path).rows()] == ["pasted from a terminal\rloss 0.12", ""]
    assert all(len(line) == 9 for line in csv_lines(book.path))
