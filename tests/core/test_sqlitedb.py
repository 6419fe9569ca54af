"""Two processes open the same new state file at once (the watchdog's reaper and `up` on the local
provider): neither may fail on the switch to WAL, which SQLite refuses at once, without its busy wait."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from gpuc.core.sqlitedb import create_db

SCHEMA = "create table if not exists pods (id text primary key);"


def _race(path: Path, openers: int) -> list[BaseException]:
    start = threading.Barrier(openers)
    failures: list[BaseException] = []

    def open_it() -> None:
        start.wait()
        try:
            create_db(path, SCHEMA)
        except BaseException as exc:  # the test counts every failure
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(openers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def test_openers_racing_on_a_new_file_all_succeed_and_leave_it_in_wal(tmp_path: Path) -> None:
    failures = [exc for n in range(40) for exc in _race(tmp_path / f"pods{n}.db", openers=4)]
    assert failures == []
    conn = sqlite3.connect(tmp_path / "pods0.db")
    try:
        assert conn.execute("pragma journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_an_existing_file_is_opened_again_without_change(tmp_path: Path) -> None:
    create_db(tmp_path / "pods.db", SCHEMA)
    conn = sqlite3.connect(tmp_path / "pods.db")
    conn.execute("insert into pods values ('p1')")
    conn.commit()
    conn.close()
    create_db(tmp_path / "pods.db", SCHEMA)
    conn = sqlite3.connect(tmp_path / "pods.db")
    try:
        assert conn.execute("select id from pods").fetchall() == [("p1",)]
    finally:
        conn.close()
