"""The pod's life from the laptop, for real: local pods (processes), the local functions server over
HTTP, the real agent and wrapper. Intervals are seconds, not minutes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from gpuc.client import podlife
from gpuc.core.errors import FunctionsError, NotFound, SafetyRefusal
from gpuc.core.providers.base import DestroyResult
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.functions.server import start_in_thread

FAST = {
    "heartbeat_interval_s": 0.3,
    "idle_check_interval_s": 0.3,
    "idle_warn_s": 300.0,
    "idle_destroy_s": 600.0,
    "silence_limit_s": 60.0,
    "reaper_period_s": 30.0,
    "local_boot_s": 0.2,
    "functions_timeout_s": 3.0,
}


class SpyProvider(LocalProvider):
    """The local provider, recording the money-relevant calls in order."""

    calls: list[str]

    def destroy(self, pod_id: str) -> DestroyResult:
        self.calls.append("destroy")
        return super().destroy(pod_id)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[podlife.Deps, SpyProvider, list[str]]]:
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr("admin-token-x"), **FAST)
    server = start_in_thread(settings, port=0, reaper_interval_s=30)
    settings = settings.with_overrides(functions_url=server.url)
    calls: list[str] = []
    deps = podlife.build_deps(settings, echo=lambda m: None)
    provider = SpyProvider(home, settings=settings)
    provider.calls = calls
    deps.providers["local"] = provider
    real_end, real_notify = deps.functions.end, deps.functions.notify

    def end(*a: Any, **k: Any) -> Any:
        calls.append("end")
        return real_end(*a, **k)

    def notify(*a: Any, **k: Any) -> Any:
        calls.append("notify")
        return real_notify(*a, **k)

    deps.functions.end = end  # type: ignore[method-assign]
    deps.functions.notify = notify  # type: ignore[method-assign]
    try:
        yield deps, provider, calls
    finally:
        for pod in provider.list_pods():
            provider.destroy(pod.id)
        deps.functions.close()
        server.stop()


def wait_for(pred: Any, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


JOB = "import os; os.makedirs('results', exist_ok=True); open('results/out.txt', 'w').write('42')"


def test_a_job_ends_in_sync_notify_destroy_and_a_closed_ledger_row(world: Any) -> None:
    deps, provider, _ = world
    pod = podlife.up(podlife.UpOptions(experiment="job1", command=["python", "-c", JOB]), deps)
    assert pod is not None
    assert wait_for(lambda: provider.get(pod.id) is None), "the wrapper destroyed the pod"
    synced = list((deps.settings.home / "results" / "job1").rglob("out.txt"))
    assert [p.read_text() for p in synced] == ["42"]
    outbox = (deps.settings.home / "outbox.jsonl").read_text()
    assert "job_exit" in outbox and "exited with code 0" in outbox
    assert wait_for(lambda: podlife.list_all(deps) and any(r.end for r in deps.ledger().rows()))
    row = deps.ledger().rows()[0]
    assert row.experiment == "job1" and row.end and row.cost_usd


def test_down_is_sync_then_end_then_notify_then_destroy_then_confirmed(world: Any) -> None:
    deps, provider, calls = world
    pod = podlife.up(podlife.UpOptions(experiment="manual"), deps)
    assert pod is not None
    results = provider.paths(pod.id).results
    results.mkdir(parents=True)
    (results / "notes.md").write_text("findings")
    podlife.down(pod.id, deps, note="works")
    assert calls == ["end", "notify", "destroy"]
    assert provider.get(pod.id) is None
    assert list((deps.settings.home / "results" / "manual").rglob("notes.md"))
    row = deps.ledger().rows()[0]
    assert row.end and row.note == "works"
    assert deps.runs.find(pod.id).phase == "ended"


def test_a_failed_sync_keeps_the_pod_and_says_so(world: Any) -> None:
    deps, provider, calls = world
    deps.settings = deps.settings.with_overrides(results_bucket="nowhere://bucket")
    pod = podlife.up(podlife.UpOptions(experiment="unsyncable"), deps)
    assert pod is not None
    results = provider.paths(pod.id).results
    results.mkdir(parents=True)
    (results / "precious.bin").write_bytes(b"x" * 100)
    with pytest.raises(SafetyRefusal, match="sync failed"):
        podlife.down(pod.id, deps)
    assert "destroy" not in calls
    assert provider.get(pod.id) is not None
    assert "kept alive: sync failed" in (deps.settings.home / "outbox.jsonl").read_text()


def test_up_refuses_to_create_a_pod_nobody_watches(world: Any) -> None:
    deps, provider, _ = world
    deps.settings = deps.settings.with_overrides(functions_url="http://127.0.0.1:9")
    from gpuc.client.functions_client import FunctionsClient

    deps.functions.close()
    deps.functions = FunctionsClient(deps.settings, sleep=lambda s: None)
    with pytest.raises(FunctionsError):
        podlife.up(podlife.UpOptions(experiment="unwatched"), deps)
    assert provider.list_pods() == []


def test_a_failure_after_create_destroys_the_pod(world: Any) -> None:
    deps, provider, calls = world

    def broken_register(request: Any) -> Any:
        raise FunctionsError("watchdog went away", hint="restart it")

    deps.functions.register = broken_register
    with pytest.raises(FunctionsError):
        podlife.up(podlife.UpOptions(experiment="halfway"), deps)
    assert provider.list_pods() == [] and calls == ["destroy"]
    (run,) = deps.runs.all()
    assert run.pod_id is not None and run.phase == "failed", "the id was recorded before anything could fail"


def test_gpuc_never_acts_on_a_pod_it_did_not_start(world: Any) -> None:
    deps, provider, calls = world
    foreign = provider.add_foreign("my-notebook")
    with pytest.raises(NotFound, match="was started by gpuc"):
        podlife.down(foreign.id, deps)
    with pytest.raises(NotFound):
        podlife.run_job(foreign.id, ["true"], deps)
    assert provider.get(foreign.id) is not None and calls == []


def test_ls_json_has_the_documented_fields(world: Any) -> None:
    deps, _provider, _ = world
    pod = podlife.up(podlife.UpOptions(experiment="listed"), deps)
    assert pod is not None
    rows, warnings = podlife.list_all(deps)
    (row,) = rows
    assert set(podlife.LS_FIELDS) <= set(row)
    assert row["experiment"] == "listed" and row["managed"] is True and row["status"] == "running"
    assert isinstance(json.loads(podlife.dumps_rows(rows)), list)
    assert not any("reaper" in w for w in warnings), "the local server's reaper ran"


def test_a_stale_or_missing_reaper_is_reported() -> None:
    assert "never run" in podlife.reaper_warnings(None, 300, 10_000)[0]
    assert "STALE" in podlife.reaper_warnings(10_000 - 601, 300, 10_000)[0]
    assert podlife.reaper_warnings(10_000 - 599, 300, 10_000) == []


def test_dry_run_creates_nothing(world: Any) -> None:
    deps, provider, _ = world
    lines: list[str] = []
    deps.echo = lines.append
    assert podlife.up(podlife.UpOptions(experiment="plan", dry_run=True, command=["python", "x.py"]), deps) is None
    assert provider.list_pods() == [] and deps.runs.all() == []
    assert any("register" in line for line in lines)
