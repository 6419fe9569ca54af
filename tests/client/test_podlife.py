"""The pod's life from the laptop, for real: local pods (processes), the local watchdog server over
HTTP, the real agent and wrapper. Intervals are seconds, not minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from fakes.localworld import wait_for

from gpuc.client.context import Ctx
from gpuc.client.pods.down import down
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.run import job_on_pod, run_job
from gpuc.client.pods.survey import LS_FIELDS, dumps_rows, list_all, reaper_warnings
from gpuc.client.pods.up import up
from gpuc.core.api import Ack, EndRequest, RegisterAnswer, RegisterRequest, StatusResponse
from gpuc.core.errors import ConfigError, NotFound, SafetyRefusal, WatchdogError
from gpuc.core.ledger.rows import LEDGER_COLUMNS
from gpuc.core.pod import Pod
from gpuc.core.podpaths import STATE_REL as STATE_DIR
from gpuc.core.providers.base import DestroyResult, PodAccess
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.server import start_in_thread
from gpuc.testkit.local_faults import add_foreign

FAST: dict[str, Any] = {  # Settings overrides, each checked by Settings itself
    "heartbeat_interval_s": 0.3,
    "idle_check_interval_s": 0.3,
    "idle_warn_s": 300.0,
    "idle_destroy_s": 600.0,
    "silence_limit_s": 60.0,
    "reaper_period_s": 30.0,
    "local_boot_s": 0.2,
    "watchdog_timeout_s": 3.0,
}


class SpyProvider(LocalProvider):
    """The local provider, recording the money-relevant calls in order."""

    calls: list[str]

    def destroy(self, pod_id: str) -> DestroyResult:
        self.calls.append("destroy")
        return super().destroy(pod_id)


class SpyWatchdog(WatchdogClient):
    """The real client, recording the end and the notification `down` sends; `register_fails`: the
    watchdog goes away between the create and the registration."""

    def __init__(self, settings: Settings, calls: list[str]) -> None:
        super().__init__(settings)
        self.calls = calls
        self.register_fails = False

    def register(self, request: RegisterRequest) -> RegisterAnswer:
        if self.register_fails:
            raise WatchdogError("watchdog went away", hint="restart it")
        return super().register(request)

    def end(self, pod_id: str, request: EndRequest) -> Ack:
        self.calls.append("end")
        return super().end(pod_id, request)

    def notify(self, title: str, message: str) -> Ack:
        self.calls.append("notify")
        return super().notify(title, message)


World = tuple[Ctx, SpyProvider, list[str]]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr("admin-token-x"), **FAST)
    server = start_in_thread(settings, port=0, reaper_interval_s=30)
    settings = settings.with_overrides(watchdog_url=server.url)
    calls: list[str] = []
    provider = SpyProvider(home, settings=settings)
    provider.calls = calls
    deps = Ctx(settings, echo=lambda m: None, watchdog=SpyWatchdog(settings, calls), providers={"local": provider})
    try:
        yield deps, provider, calls
    finally:
        for pod in provider.list_pods():
            provider.destroy(pod.id)
        deps.watchdog.close()
        server.stop()


JOB = "import os; os.makedirs('results', exist_ok=True); open('results/out.txt', 'w').write('42')"


def test_a_job_ends_in_sync_notify_destroy_and_a_closed_ledger_row(world: World) -> None:
    deps, provider, _ = world
    pod = up(UpOptions(experiment="job1", command=["python", "-c", JOB]), deps)
    assert pod is not None
    assert wait_for(lambda: provider.get(pod.id) is None), "the wrapper destroyed the pod"
    synced = list((deps.settings.home / "results" / "job1").rglob("out.txt"))
    assert [p.read_text() for p in synced] == ["42"]
    outbox = (deps.settings.home / "outbox.jsonl").read_text()
    assert "job_exit" in outbox and "exited with code 0" in outbox
    assert wait_for(lambda: list_all(deps) and any(r.end for r in deps.ledger().rows()))
    row = deps.ledger().rows()[0]
    assert row.experiment == "job1" and row.end and row.cost_usd


def test_down_is_sync_then_end_then_notify_then_destroy_then_confirmed(world: World) -> None:
    deps, provider, calls = world
    pod = up(UpOptions(experiment="manual"), deps)
    assert pod is not None
    results = provider.paths(pod.id).results
    results.mkdir(parents=True)
    (results / "notes.md").write_text("findings")
    down(pod.id, deps, note="works")
    assert calls == ["end", "notify", "destroy"]
    assert provider.get(pod.id) is None
    assert list((deps.settings.home / "results" / "manual").rglob("notes.md"))
    row = deps.ledger().rows()[0]
    assert row.end and row.note == "works"
    assert deps.runs.find(pod.id).phase == "ended"


def test_a_failed_sync_keeps_the_pod_and_says_so(world: World) -> None:
    deps, provider, calls = world
    deps.settings = deps.settings.with_overrides(results_bucket="nowhere://bucket")
    pod = up(UpOptions(experiment="unsyncable"), deps)
    assert pod is not None
    results = provider.paths(pod.id).results
    results.mkdir(parents=True)
    (results / "precious.bin").write_bytes(b"x" * 100)
    with pytest.raises(SafetyRefusal, match="sync failed"):
        down(pod.id, deps)
    assert "destroy" not in calls
    assert provider.get(pod.id) is not None
    assert "results sync FAILED: pod kept, billing" in (deps.settings.home / "outbox.jsonl").read_text()


def test_up_refuses_to_create_a_pod_nobody_watches(world: World) -> None:
    deps, provider, _ = world
    deps.settings = deps.settings.with_overrides(watchdog_url="http://127.0.0.1:9")

    deps.watchdog.close()
    deps.watchdog = WatchdogClient(deps.settings, sleep=lambda s: None)
    with pytest.raises(WatchdogError):
        up(UpOptions(experiment="unwatched"), deps)
    assert provider.list_pods() == []


def test_a_failure_after_create_destroys_the_pod(world: World) -> None:
    deps, provider, calls = world
    cast(SpyWatchdog, deps.watchdog).register_fails = True
    with pytest.raises(WatchdogError):
        up(UpOptions(experiment="halfway"), deps)
    assert provider.list_pods() == [] and calls == ["destroy"]
    (run,) = deps.runs.all()
    assert run.pod_id is not None and run.phase == "failed", "the id was recorded before anything could fail"


def test_gpuc_never_acts_on_a_pod_it_did_not_start(world: World) -> None:
    deps, provider, calls = world
    foreign = add_foreign(provider, "my-notebook")
    with pytest.raises(NotFound, match="was started by gpuc"):
        down(foreign.id, deps)
    with pytest.raises(NotFound):
        run_job(foreign.id, ["true"], deps)
    assert provider.get(foreign.id) is not None and calls == []


def test_ls_json_has_the_documented_fields(world: World) -> None:
    deps, _provider, _ = world
    pod = up(UpOptions(experiment="listed"), deps)
    assert pod is not None
    rows, warnings = list_all(deps)
    (row,) = rows
    assert set(LS_FIELDS) <= set(row)
    assert row["experiment"] == "listed" and row["managed"] is True and row["status"] == "running"
    assert isinstance(json.loads(dumps_rows(rows)), list)
    assert not any("reaper" in w for w in warnings), "the local server's reaper ran"


def test_a_stale_or_missing_reaper_is_reported() -> None:
    assert "never run" in reaper_warnings(None, 300, 10_000)[0]
    assert "STALE" in reaper_warnings(10_000 - 601, 300, 10_000)[0]
    assert reaper_warnings(10_000 - 599, 300, 10_000) == []


def test_dry_run_creates_nothing(world: World) -> None:
    deps, provider, _ = world
    lines: list[str] = []
    deps.echo = lines.append
    assert up(UpOptions(experiment="plan", dry_run=True, command=["python", "x.py"]), deps) is None
    assert provider.list_pods() == [] and deps.runs.all() == []
    assert any("register" in line for line in lines)


# -- one job per pod, every process ends with it -------------------------------------------------------------
def _sleeper(name: str) -> list[str]:
    """A long job that says its pid in the workspace (a 600-step training run, in short)."""
    return ["python", "-c", f"import os, time; open({name!r}, 'w').write(str(os.getpid())); time.sleep(120)"]


def _pid_in(workspace: Path, name: str) -> int:
    path = workspace / name
    assert wait_for(lambda: path.is_file() and path.read_text() != ""), f"{name} never started"
    return int(path.read_text())


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# Incident: `gpuc run POD -- CMD` on a pod whose job was still running started a second job; when that one
# exited it destroyed the pod under the first, and a 600-step training run was lost.
def test_run_refuses_a_pod_whose_job_is_running_unless_forced(world: World) -> None:
    deps, provider, calls = world
    pod = up(UpOptions(experiment="train600"), deps)
    assert pod is not None
    workspace = provider.paths(pod.id).workspace
    run_job(pod.id, _sleeper("first.pid"), deps)
    first = _pid_in(workspace, "first.pid")
    with pytest.raises(SafetyRefusal, match="still running") as refused:
        run_job(pod.id, _sleeper("second.pid"), deps)
    assert "--force" in (refused.value.hint or "")
    with pytest.raises(SafetyRefusal, match="still running"):
        run_job(pod.id, _sleeper("second.pid"), deps, dry_run=True)
    assert not (workspace / "second.pid").exists() and len(provider.pids(pod.id)["job"]) == 1
    run_job(pod.id, _sleeper("second.pid"), deps, force=True)
    second = _pid_in(workspace, "second.pid")
    assert provider.get(pod.id) is not None and calls == []
    # The destroy ends both jobs, not only the one whose pid was recorded last.
    provider.destroy(pod.id)
    assert wait_for(lambda: _dead(first) and _dead(second), 10), "a job outlived its destroyed pod"


def test_run_is_refused_while_the_pod_is_ending(world: World) -> None:
    deps, provider, _ = world
    pod = up(UpOptions(experiment="ending"), deps)
    assert pod is not None
    provider.access(pod.id).put_file(f"{STATE_DIR}/ended", f"{pod.id}\n".encode(), 0o644)
    with pytest.raises(SafetyRefusal, match="ending"):
        run_job(pod.id, ["python", "-c", "pass"], deps)


def test_run_takes_a_free_pod_after_its_job_ended(world: World) -> None:
    deps, provider, _ = world
    deps.settings = deps.settings.with_overrides(results_bucket="nowhere://bucket")  # kept: sync fails
    pod = up(UpOptions(experiment="again"), deps)
    assert pod is not None
    run_job(pod.id, ["python", "-c", "pass"], deps)
    job_file = provider.paths(pod.id).job
    assert wait_for(lambda: (provider.paths(pod.id).exit_code).exists() and not job_file.exists())
    run_job(pod.id, ["python", "-c", "pass"], deps)  # no job runs: not refused


def test_up_twice_with_one_experiment_warns_and_names_the_running_pod(world: World) -> None:
    deps, provider, _ = world
    lines: list[str] = []
    deps.echo = lines.append
    first = up(UpOptions(experiment="sweep"), deps)
    assert first is not None and not any("already" in line for line in lines)
    second = up(UpOptions(experiment="sweep"), deps)
    assert second is not None, "a warning, not a refusal"
    (warning,) = [line for line in lines if "already" in line]
    assert first.id in warning and "sweep" in warning
    assert {p.id for p in provider.list_pods()} == {first.id, second.id}


# -- a ledger problem never costs a pod --------------------------------------------------------------------
def test_a_ledger_that_cannot_be_read_is_refused_before_the_create(world: World) -> None:
    deps, provider, calls = world
    ledger = deps.settings.ledger
    ledger.parent.mkdir(parents=True, exist_ok=True)
    ledger.write_text(",".join(LEDGER_COLUMNS) + "\n2026-09-01,half a row\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="line 2"):
        up(UpOptions(experiment="ledgerless"), deps)
    assert provider.list_pods() == [] and calls == [] and deps.runs.all() == [], "a pod was created"


# Incident: a ledger saved by a spreadsheet (UTF-8 with a byte-order mark) made `up` create, then destroy.
def test_a_ledger_saved_by_a_spreadsheet_takes_the_next_pod(world: World) -> None:
    deps, _provider, calls = world
    ledger = deps.settings.ledger
    ledger.parent.mkdir(parents=True, exist_ok=True)
    old = ["2026-09-01", "by-hand", "vast", "L4", "0.3", "2026-09-01T10:00:00Z", "", "", "kept"]
    ledger.write_bytes(("\ufeff" + ",".join(LEDGER_COLUMNS) + "\r\n" + ",".join(old) + "\r\n").encode("utf-8"))
    pod = up(UpOptions(experiment="after-excel"), deps)
    assert pod is not None and calls == []
    assert [r.experiment for r in deps.ledger().rows()] == ["by-hand", "after-excel"]
    assert not ledger.read_bytes().startswith(b"\xef\xbb\xbf")


# Incident: a signed pod event with end_at = 1e300 was accepted; every `gpuc ls` then failed (OverflowError).
def test_ls_lists_pods_and_warns_when_the_watchdog_reports_an_absurd_end(world: World) -> None:
    deps, _provider, _ = world
    pod = up(UpOptions(experiment="absurd"), deps)
    assert pod is not None
    real_status = deps.watchdog.status

    def status() -> StatusResponse:
        answer = real_status()
        pods = [p.model_copy(update={"end_at": 1e300}) if p.pod_id == pod.id else p for p in answer.pods]
        return answer.model_copy(update={"pods": pods})

    deps.watchdog.status = status  # type: ignore[method-assign]
    rows, warnings = list_all(deps)
    assert [r["id"] for r in rows] == [pod.id]
    assert any(pod.id in w and "not a time" in w for w in warnings), warnings
    assert not any("unreachable" in w for w in warnings)
    assert deps.ledger().rows()[0].end == "", "the row stays open rather than wrong"


def test_a_ledger_that_fails_after_the_create_does_not_cost_the_pod(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, provider, calls = world
    lines: list[str] = []
    deps.echo = lines.append

    def disk_full(*_: Any, **__: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("gpuc.core.ledger.store.Ledger.start", disk_full)
    pod = up(UpOptions(experiment="disk-full"), deps)
    assert pod is not None and provider.get(pod.id) is not None and calls == []
    assert any("ledger: start row not written (No space left on device)" in line for line in lines)
    monkeypatch.undo()
    list_all(deps)  # the watchdog's record fills the row in
    assert [r.experiment for r in deps.ledger().rows()] == ["disk-full"]


class _HereAccess(PodAccess):
    """The probe run as it runs on a pod, against a pod root on this machine."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        raise AssertionError("the probe uploads nothing")

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        env = {**os.environ, "GPUC_POD_ROOT": str(self.root)}
        proc = subprocess.run([sys.executable, *argv[1:]], env=env, capture_output=True, text=True, timeout=timeout_s)
        return proc.returncode, proc.stdout + proc.stderr

    def spawn(self, argv: list[str], role: str) -> None:
        raise AssertionError("the probe starts nothing")


def _start_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[19])


def test_the_job_probe_tells_a_running_job_from_a_stale_pid_file(tmp_path: Path) -> None:
    state = tmp_path / "workspace" / ".gpuc"
    state.mkdir(parents=True)
    pod = Pod(provider="x", id="pod-1", name="gpuc-pod10001", status="running")
    access = _HereAccess(tmp_path)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        assert job_on_pod(access, pod) is None
        for stamp in (f"{job.pid}\n", f"{job.pid} {_start_ticks(job.pid)}\n"):
            (state / "job.pid").write_text(stamp)
            assert f"pid {job.pid}" in (job_on_pod(access, pod) or "")
        (state / "job.pid").write_text(f"{job.pid} {_start_ticks(job.pid) + 1}\n")  # the pid went to another
        assert job_on_pod(access, pod) is None
        (state / "job.pid").write_text(f"{dead.pid}\n")
        assert job_on_pod(access, pod) is None
        (state / "ended").write_text("another-pod\n")  # a reused volume's marker is not this pod's
        assert job_on_pod(access, pod) is None
        holder = subprocess.Popen(  # the wrapper between the job's exit and the marker: holds end.lock
            [
                sys.executable,
                "-c",
                "import fcntl, sys, time; f = open(sys.argv[1], 'w'); "
                "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
                str(state / "end.lock"),
            ],
            stdout=subprocess.PIPE,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
            assert "ending" in (job_on_pod(access, pod) or "")
        finally:
            holder.kill()
            holder.communicate()
        assert job_on_pod(access, pod) is None  # the lock file alone, unheld, is no ending
        (state / "ended").write_text("pod-1\n")
        assert "ending" in (job_on_pod(access, pod) or "")
        (state / "job.pid").write_text("not a pid\n")
        with pytest.raises(SafetyRefusal, match="could not tell"):
            job_on_pod(access, pod)
    finally:
        job.kill()
        job.wait()


def test_up_note_is_on_the_row_from_its_start_and_down_note_adds_to_it(world: World) -> None:
    deps, _provider, _calls = world
    pod = up(UpOptions(experiment="noted", note="baseline, lr 3e-4"), deps)
    assert pod is not None
    assert deps.ledger().rows()[0].note == "baseline, lr 3e-4"
    down(pod.id, deps, note="loss 0.5")
    assert deps.ledger().rows()[0].note == "baseline, lr 3e-4; loss 0.5"
