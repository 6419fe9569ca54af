"""Local SQLite files (the laptop's run state, the local sandbox's pods): created once, in WAL mode so a
reader never blocks the one writer, with the schema applied idempotently (CREATE ... IF NOT EXISTS)."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 30
_WAL_RETRY_S = 0.05


def create_db(path: Path, schema: str) -> None:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        _use_wal(conn)
        conn.executescript(schema)
    finally:
        conn.close()


def _use_wal(conn: sqlite3.Connection) -> None:
    # Switching to WAL takes an exclusive lock, and SQLite answers "database is locked" at once (without
    # its busy wait) while a second process opens the same new file: the watchdog's reaper and `up`
    # both do. WAL is kept in the file, so once either switched the other only reads the mode.
    give_up = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("pragma journal_mode").fetchone()[0] == "wal":
                return
            conn.execute("pragma journal_mode=wal")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > give_up:
                raise
        if time.monotonic() > give_up:
            return  # a file that cannot do WAL still works, readers just wait for the writer
        time.sleep(_WAL_RETRY_S)
