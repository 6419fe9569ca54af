"""The laptop's record of runs: the intent (pod name) is written BEFORE the create call and the pod
id the moment it is known, so a crash mid-`up` never leaves a paid pod nobody can name.

`RunRecord` is a plain dataclass, not a pydantic model: every `gpuc ls` reads this store, and the rows come
from our own table (nothing to validate), so pydantic's import is not worth paying for here.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuc.core.errors import ConfigError, NotFound
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


@dataclass
class RunRecord:
    run_id: str
    name: str
    provider: str
    experiment: str
    pod_id: str | None
    phase: str  # intent | created | registered | running | ended | failed
    created_at: float
    ended_at: float | None = None
    note: str | None = None
    warm_s: float | None = None  # `up --warm`: the pod's idle end, for `gpuc ls` (its agent has it too)
    # `up --warm` without --max-hours: each job's allowance; `gpuc run` moves the deadline (client/pods/warm.py)
    warm_job_s: float | None = None


def home_error(home: Path, why: str) -> ConfigError:
    return ConfigError(
        f"gpuc cannot use its folder {home}: {why}",
        hint=f"point GPUC_HOME at a folder you can write (export GPUC_HOME=~/.gpuc), or fix {home}",
    )


def ensure_home(home: Path) -> Path:
    """The gpuc folder, created if missing. One line naming the folder when it cannot be: a traceback
    about state.db would not tell the user that GPUC_HOME is the thing to fix."""
    if home.exists() and not home.is_dir():
        raise home_error(home, "it is a file, not a folder")
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise home_error(home, f"cannot create it ({exc.strerror or type(exc).__name__})") from None
    if not os.access(home, os.W_OK | os.X_OK):
        raise home_error(home, "it is read-only")
    return home


class RunStore:
    def __init__(self, home: Path) -> None:
        self.path = ensure_home(home) / "state.db"
        try:
            create_db(self.path, _SCHEMA)
            self._add_warm_column()
        except sqlite3.Error as exc:  # a read-only state.db, a full disk, a file that is not a database
            raise home_error(home, f"{self.path.name} cannot be written ({exc})") from None

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(self.path, timeout=30)
        conn.row_factory = sqlite3.Row
        try:
            with conn:
                yield conn
        finally:
            conn.close()

    def _add_warm_column(self) -> None:
        """A state.db from before `up --warm` gets the columns (a missing column is NULL: not warm)."""
        with self._db() as db:
            columns = {row["name"] for row in db.execute("pragma table_info(runs)")}
            for column in ("warm_s", "warm_job_s"):
                if column not in columns:
                    db.execute(f"alter table runs add column {column} real")

    def record_intent(
        self,
        run_id: str,
        name: str,
        provider: str,
        experiment: str,
        now: float,
        warm_s: float | None = None,
        warm_job_s: float | None = None,
    ) -> None:
        with self._db() as db:
            db.execute(
                "insert into runs (run_id, name, provider, experiment, phase, created_at, warm_s, warm_job_s)"
                " values (?,?,?,?,?,?,?,?)",
                (run_id, name, provider, experiment, "intent", now, warm_s or None, warm_job_s or None),
            )

    def set_pod_id(self, run_id: str, pod_id: str) -> None:
        with self._db() as db:
            db.execute("update runs set pod_id = ?, phase = 'created' where run_id = ?", (pod_id, run_id))

    def set_phase(self, run_id: str, phase: str, *, now: float | None = None, note: str | None = None) -> None:
        with self._db() as db:
            db.execute(
                "update runs set phase = ?, ended_at = coalesce(?, ended_at), note = coalesce(?, note)"
                " where run_id = ?",
                (phase, now, note, run_id),
            )

    def all(self) -> list[RunRecord]:
        with self._db() as db:
            rows = db.execute("select * from runs order by created_at").fetchall()
        return [RunRecord(**dict(r)) for r in rows]

    def find(self, ref: str) -> RunRecord:
        """The one resolver every command uses: a pod id, run id or pod name; else an experiment's run
        (the name `gpuc ls` shows): its one open run, else its latest. Two open runs of one experiment are
        refused with both listed: acting on a guess could end the wrong pod."""
        with self._db() as db:
            row = db.execute(
                "select * from runs where pod_id = ? or name = ? or run_id = ? order by created_at desc limit 1",
                (ref, ref, ref),
            ).fetchone()
            rows = (
                []
                if row
                else db.execute(
                    "select * from runs where experiment = ? and pod_id is not null order by created_at", (ref,)
                ).fetchall()
            )
        if row is not None:
            return RunRecord(**dict(row))
        return _one_of_experiment(ref, [RunRecord(**dict(r)) for r in rows])

    def by_pod_id(self) -> dict[str, RunRecord]:
        return {r.pod_id: r for r in self.all() if r.pod_id}


CLOSED = ("ended", "failed")


def _one_of_experiment(ref: str, runs: list[RunRecord]) -> RunRecord:
    if not runs:
        raise NotFound(
            f"no pod, run or experiment {ref!r} was started by gpuc on this machine",
            hint="`gpuc ls` lists pods with their ids; gpuc never acts on pods it did not start",
        )
    open_runs = [r for r in runs if r.phase not in CLOSED]
    if len(open_runs) > 1:
        listed = "; ".join(f"pod {r.pod_id} (run {r.run_id}, {r.phase})" for r in open_runs)
        raise NotFound(
            f"ambiguous: experiment {ref!r} has {len(open_runs)} pods: {listed}",
            hint="name one by its pod id (the first column of `gpuc ls`)",
        )
    return open_runs[0] if open_runs else runs[-1]
