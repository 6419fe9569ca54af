from __future__ import annotations

import csv
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from moneyfakes import T0, write_rows

from gpuc.core import ledger as ledger_module
from gpuc.core.api import PodRecord
from gpuc.core.errors import ConfigError
from gpuc.core.ledger import Ledger
from gpuc.core.models import LEDGER_COLUMNS


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "gpu-ledger.csv")


def start(
    book: Ledger, pod: str, ts: float = T0, price: float | None = 0.74, experiment: str = "kv-cache"
) -> None:
    book.start(
        pod, provider="runpod", experiment=experiment, gpu="RTX 4090", price_per_hour=price, start_ts=ts
    )


def csv_lines(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_start_writes_the_first_six_columns_under_the_spec_header(book: Ledger) -> None:
    row = book.start(
        "pod1", provider="runpod", experiment="kv-cache", gpu="RTX 4090", price_per_hour=0.74, start_ts=T0
    )
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
        PodRecord(
            pod_id="pod2", provider="runpod", name="gpuc-aaaa2", experiment="kv-cache", registered_at=T0
        ),
    ]
    assert book.sync_from_functions(records) == 1
    assert book.sync_from_functions(records) == 0
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
    assert book.sync_from_functions([record]) == 1
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

    monkeypatch.setattr(ledger_module.os, "replace", replace)


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


def test_a_crash_after_the_csv_write_is_not_written_twice(
    book: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_replace_of(monkeypatch, book.index_path, on_call=2)  # the intent lands, the commit does not
    with pytest.raises(OSError):
        start(book, "pod1")
    monkeypatch.undo()
    assert json.loads(book.index_path.read_text())["pods"]["pod1"]["committed"] is False
    assert len(book.rows()) == 1
    start(book, "pod2", ts=T0 + 10)
    assert len(book.rows()) == 2
    assert all(e["committed"] for e in json.loads(book.index_path.read_text())["pods"].values())


def test_a_crash_while_closing_keeps_the_row_open_not_broken(
    book: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
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
from gpuc.core import ledger as L
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
