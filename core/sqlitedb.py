"""Local SQLite files (the laptop's run state, the local sandbox's pods): created once, in WAL mode so a
reader never blocks the one writer, with the schema applied idempotently (CREATE ... IF NOT EXISTS)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

BUSY_TIMEOUT_S = 30


def create_db(path: Path, schema: str) -> None:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)
    try:
        conn.execute("pragma journal_mode=wal")
        conn.executescript(schema)
    finally:
        conn.close()
