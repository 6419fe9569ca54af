"""The `local` provider: a pod is a sandbox directory with its own workspace, price and state, and
real processes (the gpuc agent, the job) running in their own sessions.

State lives in SQLite under `$GPUC_HOME/local/`, so it survives the `gpuc` process and is shared by
the laptop CLI, the local watchdog server (reaper) and the pods themselves (self-destroy), each a
separate process. The failure drills (pause, freeze, kill one process, vanish, ...) are the platform's
doing, not the product's: they live in gpuc.testkit.local_faults.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import NotFound, ProviderError
from gpuc.core.podpaths import POD_ROOT_ENV, PodPaths
from gpuc.core.providers.base import DestroyResult, PodAccess, Provider, SelfDestroyer
from gpuc.core.settings import Settings
from gpuc.core.sqlitedb import create_db

if TYPE_CHECKING:
    from gpuc.core.models import Balance, PodSpec
    from gpuc.core.pod import Pod

_SCHEMA = """
create table if not exists pods (
    id text primary key,
    name text not null,
    experiment text,
    status text not null,
    gpu text,
    price real,
    created_at real not null,
    ready_at real not null,
    status_since real not null,
    managed_env integer not null,
    interruptible integer not null default 0,
    env text not null default '{}',
    pids text not null default '{}'
);
create table if not exists account (k text primary key, v real not null);
"""
STARTING_BALANCE_USD = 15.0
# argv: the output log, the pid file, the command. The pid file (`<state>/<role>.pid`, as a spawn over ssh
# writes it) is written the instant the process exists: for a job, the pod then shows a running job
# before the wrapper has even started it, so a second `gpuc run` cannot slip in. O_EXCL: the wrapper's
# own write (the job's pid) is never overwritten.
_LAUNCHER = (
    "import os, subprocess, sys\n"
    "log = open(sys.argv[1], 'ab')\n"
    "p = subprocess.Popen(sys.argv[3:], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,"
    " start_new_session=True)\n"
    "try:\n"
    "    fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)\n"
    "    os.write(fd, b'%d\\n' % p.pid)\n"
    "    os.close(fd)\n"
    "except OSError:\n"
    "    pass\n"
    "print(p.pid)\n"
)
# The environment a sandbox process sees: nothing from the laptop's environment leaks in (a real
# pod never sees the user's shell, and the user's shell may hold account keys).
_PASS_THROUGH = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
# Every sandbox process carries its pod's id in its environment (the job wrapper passes it on to the
# job); the pod agent counts a pod's python processes by the same mark (instance_side/procs.py).
POD_ID_ENV = "GPUC_POD_ID"
_PROC = Path("/proc")

Pids = dict[str, list[int]]


def _load_pids(text: str) -> Pids:
    """role -> every pid started in that role. Rows written before a role could hold several pids
    held one int per role: read them as a list of one."""
    raw = json.loads(text)
    return {role: [v] if isinstance(v, int) else [int(p) for p in v] for role, v in raw.items()}


class LocalProvider(Provider):
    name = "local"

    def __init__(self, home: Path, settings: Settings | None = None, clock: Clock | None = None) -> None:
        self.home = home
        self.root = home / "local"
        self.settings = settings or Settings(home=home)
        self.clock = clock or SystemClock()
        self.root.mkdir(parents=True, exist_ok=True)
        create_db(self.root / "pods.db", _SCHEMA)

    # -- storage -----------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The platform's state, one immediate transaction (also how gpuc.testkit's drills change it)."""
        conn = sqlite3.connect(self.root / "pods.db", timeout=30, isolation_level=None)
        conn.row_factory = sqlite3.Row
        try:
            conn.execute("begin immediate")
            yield conn
            conn.execute("commit")
        except BaseException:
            conn.execute("rollback")
            raise
        finally:
            conn.close()

    def _row(self, db: sqlite3.Connection, pod_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute("select * from pods where id = ?", (pod_id,)).fetchone()
        return row

    def _advance(self, db: sqlite3.Connection, row: sqlite3.Row) -> sqlite3.Row:
        """Provisioning pods become running once their boot time has passed."""
        now = self.clock.now()
        if row["status"] == "provisioning" and now >= row["ready_at"]:
            db.execute(
                "update pods set status = 'running', status_since = ? where id = ? and status = 'provisioning'",
                (row["ready_at"], row["id"]),
            )
            fresh = self._row(db, row["id"])
            assert fresh is not None
            return fresh
        return row

    def _to_pod(self, row: sqlite3.Row) -> Pod:
        # Startup: the models (pydantic) load with the first row; `gpuc ls` with no pods never pays for them.
        from gpuc.core.pod import OWNER_ENV, WATCHDOG_ENV, Pod, is_gpuc_name

        env = json.loads(row["env"])
        return Pod(
            provider=self.name,
            id=row["id"],
            name=row["name"],
            experiment=row["experiment"],
            status=row["status"],
            raw_status=row["status"],
            gpu=row["gpu"],
            price_per_hour=row["price"],
            created_at=row["created_at"],
            uptime_s=max(0.0, self.clock.now() - row["ready_at"]) if row["status"] == "running" else None,
            managed=bool(row["managed_env"]) and is_gpuc_name(row["name"]) and env.get(OWNER_ENV) == "1",
            watchdog=env.get(WATCHDOG_ENV) or None,
            interruptible=bool(row["interruptible"]),
            gpu_util_pct=self._sim_util(row["id"]),
        )

    def _sim_util(self, pod_id: str) -> float | None:
        """The provider's own GPU reading (the reaper's second witness), from the sandbox's sim file."""
        try:
            data = json.loads(self.paths(pod_id).sim_gpu.read_text())
            utils = [float(g.get("utilization_pct") or 0) for g in data.get("gpus", [])]
            return max(utils) if utils else 0.0
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    # -- the Provider interface ----------------------------------------------------------------
    def create(self, spec: PodSpec) -> Pod:
        from gpuc.core.pod import OWNER_ENV, new_run_id  # startup: as in _to_pod

        pod_id = "lp-" + new_run_id()
        now = self.clock.now()
        env = {**spec.env, OWNER_ENV: "1"}
        paths = self.paths(pod_id)
        paths.workspace.mkdir(parents=True)
        paths.state.mkdir(mode=0o700)
        price = spec.price_per_hour if spec.price_per_hour is not None else self.settings.local_price_per_hour
        with self.transaction() as db:
            db.execute(
                "insert into pods (id, name, experiment, status, gpu, price, created_at, ready_at, status_since,"
                " managed_env, interruptible, env) values (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    pod_id,
                    spec.name,
                    spec.experiment,
                    "provisioning",
                    self.settings.local_gpu,
                    price,
                    now,
                    now + self.settings.local_boot_s,
                    now,
                    1,
                    int(spec.interruptible),
                    json.dumps(env),
                ),
            )
            row = self._row(db, pod_id)
        assert row is not None
        return self._to_pod(row)

    def get(self, pod_id: str) -> Pod | None:
        with self.transaction() as db:
            row = self._row(db, pod_id)
            if row is None or row["status"] == "terminated":
                return None
            return self._to_pod(self._advance(db, row))

    def list_pods(self) -> list[Pod]:
        with self.transaction() as db:
            rows = db.execute("select * from pods where status != 'terminated' order by created_at").fetchall()
            return [self._to_pod(self._advance(db, r)) for r in rows]

    def stop(self, pod_id: str) -> None:
        self.signal_sandbox(pod_id, signal.SIGKILL)
        with self.transaction() as db:
            db.execute("update pods set status = 'stopped', status_since = ? where id = ?", (self.clock.now(), pod_id))

    def start(self, pod_id: str) -> None:
        """A stopped sandbox comes back with its disk as it was and none of its processes, as a resumed
        container does."""
        with self.transaction() as db:
            row = self._row(db, pod_id)
            if row is None or row["status"] == "terminated":
                raise NotFound(f"local pod {pod_id} does not exist", hint="list pods with: gpuc ls")
            if row["status"] == "stopped":
                db.execute(
                    "update pods set status = 'running', status_since = ? where id = ?", (self.clock.now(), pod_id)
                )

    def destroy(self, pod_id: str) -> DestroyResult:
        with self.transaction() as db:
            row = self._row(db, pod_id)
            if row is None or row["status"] == "terminated":
                return "already_gone"
            db.execute(
                "update pods set status = 'terminated', status_since = ? where id = ?",
                (self.clock.now(), pod_id),
            )
            pids = _load_pids(row["pids"])
        # Like a real destroy, nothing of the pod survives it: every process, however it was started.
        self._signal(pod_id, pids, signal.SIGKILL)
        self._remove_disk(pod_id)
        return "destroyed"

    def balance(self) -> Balance:
        from gpuc.core.models import Balance  # startup: as in _to_pod

        now = self.clock.now()
        spent = 0.0
        spend_per_hour = 0.0
        with self.transaction() as db:
            for row in db.execute("select * from pods").fetchall():
                end = row["status_since"] if row["status"] in ("terminated", "stopped") else now
                spent += (row["price"] or 0.0) * max(0.0, end - row["created_at"]) / 3600
                if row["status"] in ("provisioning", "running", "paused"):
                    spend_per_hour += row["price"] or 0.0
            start = db.execute("select v from account where k = 'balance'").fetchone()
        balance = (start["v"] if start else STARTING_BALANCE_USD) - spent
        return Balance(provider=self.name, balance_usd=round(balance, 4), spend_per_hour=spend_per_hour)

    # -- the sandbox ---------------------------------------------------------------------------
    def paths(self, pod_id: str) -> PodPaths:
        return PodPaths(self.root / "pods" / pod_id)

    def access(self, pod_id: str) -> LocalAccess:
        self.require(pod_id)
        return LocalAccess(self, pod_id)

    def sandbox_env(self, pod_id: str) -> dict[str, str]:
        row = self.require(pod_id)
        env = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
        env.update(json.loads(row["env"]))
        env.update(
            {
                POD_ROOT_ENV: str(self.paths(pod_id).root),
                POD_ID_ENV: pod_id,
                "GPUC_LOCAL_HOME": str(self.home),
                "HOME": str(self.paths(pod_id).workspace),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def record_pid(self, pod_id: str, role: str, pid: int) -> None:
        """Every pid is kept (a second job must not hide the first from the destroy)."""
        with self.transaction() as db:
            row = self._row(db, pod_id)
            if row is not None and row["status"] != "terminated":
                pids = _load_pids(row["pids"])
                pids.setdefault(role, []).append(pid)
                db.execute("update pods set pids = ? where id = ?", (json.dumps(pids), pod_id))
                return
        # Destroyed while this process was starting: it must not outlive its pod.
        self._signal(pod_id, {role: [pid]}, signal.SIGKILL)
        raise NotFound(f"local pod {pod_id} does not exist", hint="list pods with: gpuc ls")

    def pids(self, pod_id: str) -> Pids:
        return _load_pids(self.require(pod_id)["pids"])

    def signal_sandbox(self, pod_id: str, sig: int) -> None:
        """Send `sig` to every process of the pod (what stop, destroy and the platform's drills do)."""
        self._signal(pod_id, _load_pids(self.require(pod_id)["pids"]), sig)

    def require(self, pod_id: str) -> sqlite3.Row:
        """The pod's row; NotFound when it does not exist or was destroyed."""
        with self.transaction() as db:
            row = self._row(db, pod_id)
        if row is None or row["status"] == "terminated":
            raise NotFound(f"local pod {pod_id} does not exist", hint="list pods with: gpuc ls")
        return row

    # -- helpers -------------------------------------------------------------------------------
    def _signal(self, pod_id: str, pids: Mapping[str, Iterable[int]], sig: int) -> None:
        """Two nets: the process group of every process started in the pod (each leads its own session),
        and every process that carries the pod's id in its environment (a job's daemon that left for a
        session of its own). The caller and its ancestors are spared: a self-destroy must return before
        its caller exits by itself."""
        marker = f"{POD_ID_ENV}={pod_id}".encode()
        spared = _self_and_ancestors()
        own_group = os.getpgid(0)
        for pid in sorted({p for group in pids.values() for p in group}):
            # A live leader without the mark is a reused pid, not ours. A group whose leader has exited
            # keeps its id reserved while any member lives, so it is still the pod's.
            if pid == own_group or pid in spared or _carries(pid, marker) is False:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)
        for pid in _marked_processes(marker):
            if pid not in spared:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def _remove_disk(self, pod_id: str) -> None:
        import shutil  # startup: only a destroy needs it (~5 ms on every `gpuc ls` otherwise)

        paths = self.paths(pod_id)
        logs = self.root / "logs" / pod_id
        if paths.log.exists():
            logs.mkdir(parents=True, exist_ok=True)
            shutil.copy2(paths.log, logs / "agent.log")
        shutil.rmtree(paths.root, ignore_errors=True)


def _environ_of(pid: int) -> bytes | None:
    try:
        return (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None


def _carries(pid: int, marker: bytes) -> bool | None:
    """Whether process `pid` carries `marker` in its environment; None when there is no such process
    (or no procfs to ask)."""
    if not (_PROC / str(pid)).exists():
        return None
    env = _environ_of(pid)
    return None if env is None else marker in env.split(b"\0")


def _marked_processes(marker: bytes) -> list[int]:
    """Every process whose environment holds `marker`. Without procfs (macOS) there is none to find:
    the recorded process groups are then the only net."""
    try:
        names = [n for n in os.listdir(_PROC) if n.isdigit()]
    except OSError:
        return []
    found = []
    for name in names:
        env = _environ_of(int(name))
        if env is not None and marker in env.split(b"\0"):
            found.append(int(name))
    return found


def _self_and_ancestors() -> set[int]:
    spared = {os.getpid(), os.getppid()}
    pid = os.getppid()
    while pid > 1:
        try:
            stat = (_PROC / str(pid) / "stat").read_bytes()
            pid = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        spared.add(pid)
    return spared


class LocalAccess(PodAccess):
    def __init__(self, provider: LocalProvider, pod_id: str) -> None:
        self.provider = provider
        self.pod_id = pod_id
        self.paths = provider.paths(pod_id)

    def _resolve(self, path: str) -> Path:
        target = (self.paths.root / path.lstrip("/")).resolve()
        if not target.is_relative_to(self.paths.root.resolve()):
            raise ProviderError(f"path {path} escapes the sandbox", provider="local")
        return target

    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        target = self._resolve(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        import subprocess  # lazy: `gpuc ls` lists local pods on every run and never runs anything in one

        proc = subprocess.run(
            self._argv(argv),
            cwd=self.paths.workspace,
            env=self.provider.sandbox_env(self.pod_id),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        return proc.returncode, proc.stdout + proc.stderr

    def spawn(self, argv: list[str], role: str) -> None:
        import subprocess  # lazy: as in run

        self.paths.state.mkdir(parents=True, exist_ok=True)
        # Double start through a tiny launcher: the pod process is orphaned at once and adopted by
        # init, so it outlives `gpuc` (like a process on a real pod) and never lingers as our zombie.
        launcher = subprocess.run(
            [
                sys.executable,
                "-c",
                _LAUNCHER,
                str(self.paths.state / f"{role}.out"),
                str(self.paths.state / f"{role}.pid"),
                *self._argv(argv),
            ],
            cwd=self.paths.workspace,
            env=self.provider.sandbox_env(self.pod_id),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if launcher.returncode != 0 or not launcher.stdout.strip().isdigit():
            raise ProviderError(f"could not start {role} in {self.pod_id}: {launcher.stderr[-300:]}", provider="local")
        self.provider.record_pid(self.pod_id, role, int(launcher.stdout.strip()))

    @staticmethod
    def _argv(argv: list[str]) -> list[str]:
        # The sandbox runs the same interpreter as the laptop so `python -m gpuc...` resolves.
        return [sys.executable, *argv[1:]] if argv and argv[0] in ("python", "python3") else argv


class LocalSelfDestroyer(SelfDestroyer):
    """Inside a sandbox pod: destroy it through the local provider's shared state."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        try:
            self.home = Path(environ["GPUC_LOCAL_HOME"])
            self.pod_id = environ[POD_ID_ENV]
        except KeyError as exc:
            raise ProviderError(f"{exc.args[0]} is not set in this pod", provider="local") from None

    def destroy_self(self) -> str:
        result = LocalProvider(self.home).destroy(self.pod_id)
        return f"local pod {self.pod_id}: {result}"

    def stop_self(self) -> str:
        LocalProvider(self.home).stop(self.pod_id)
        return f"stopped local pod {self.pod_id}: its disk stays"
