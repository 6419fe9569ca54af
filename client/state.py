"""The laptop's record of runs: the intent (pod name) is written BEFORE the create call and the pod
id the moment it is known, so a crash mid-`up` never leaves a paid pod nobody can name."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel

from gpuc.core.errors import NotFound
from gpuc.core.sqlitedb import create_db

_SCHEMA = """
create table if not exists runs (
    run_id text primary key,
    name text not null,
    provider text not null,
    experiment text not null,
    pod_id text,
    phase text not null,
    created_at real not null,
    ended_at real,
    note text
);
create index if not exists runs_pod on runs (pod_id);
"""


class Run(BaseModel):
    run_id: str
    name: str
    provider: str
    experiment: str
    pod_id: str | None
    phase: str  # intent | created | registered | running | ended | failed
    created_at: float
    ended_at: float | None = None
    note: str | None = None


class RunStore:
    def __init__(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.path = home / "state.db"
        create_db(self.path, _SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def record_intent(self, run_id: str, name: str, provider: str, experiment: str, now: float) -> None:
        with self._db() as db:
            db.execute(
                "insert into runs (run_id, name, provider, experiment, phase, created_at) values (?,?,?,?,?,?)",
                (run_id, name, provider, experiment, "intent", now),
            )

    def set_pod_id(self, run_id: str, pod_id: str) -> None:
        with self._db() as db:
            db.execute("update runs set pod_id = ?, phase = 'created' where run_id = ?", (pod_id, run_id))

    def set_phase(
        self, run_id: str, phase: str, *, now: float | None = None, note: str | None = None
    ) -> None:
        with self._db() as db:
            db.execute(
                "update runs set phase = ?, ended_at = coalesce(?, ended_at), note = coalesce(?, note)"
                " where run_id = ?",
                (phase, now, note, run_id),
            )

    def all(self) -> list[Run]:
        with self._db() as db:
            rows = db.execute("select * from runs order by created_at").fetchall()
        return [Run(**dict(r)) for r in rows]

    def find(self, ref: str) -> Run:
        """A run by pod id, pod name or run id."""
        with self._db() as db:
            row = db.execute(
                "select * from runs where pod_id = ? or name = ? or run_id = ? order by created_at desc limit 1",
                (ref, ref, ref),
            ).fetchone()
        if row is None:
            raise NotFound(
                f"no pod {ref!r} was started by gpuc on this machine",
                hint="`gpuc ls` lists pods with their ids; gpuc never acts on pods it did not start",
            )
        return Run(**dict(row))

    def by_pod_id(self) -> dict[str, Run]:
        return {r.pod_id: r for r in self.all() if r.pod_id}
