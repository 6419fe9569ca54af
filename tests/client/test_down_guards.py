"""`down` never destroys a pod whose results sit unsynced on its disk (stopped, exited) without --force,
and neither `down` nor `run` acts on a pod gpuc did not start. "Started by gpuc" is two things at once:
a run in this machine's run store, and both ownership markers at the provider (a gpuc name and the
owner env var). A run record pointing at a pod without the markers (a reused id, a hand-edited store,
a pod renamed in the console) is refused like a pod with no record at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuc.client.context import Ctx
from gpuc.client.pods.down import down
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.run import run_job
from gpuc.client.pods.up import up
from gpuc.core.errors import SafetyRefusal
from gpuc.core.providers.base import DestroyResult
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.server import start_in_thread
from gpuc.testkit.local_faults import add_foreign

FAST: dict[str, Any] = {"heartbeat_interval_s": 0.3, "idle_check_interval_s": 0.3, "local_boot_s": 0.2}


class CountingProvider(LocalProvider):
    destroys: list[str]

    def destroy(self, pod_id: str) -> DestroyResult:
        self.destroys.append(pod_id)
        return super().destroy(pod_id)


Deps = Ctx


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Deps, CountingProvider]]:
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr("admin-token-x"), **FAST)
    server = start_in_thread(settings, port=0, reaper_interval_s=30)
    settings = settings.with_overrides(watchdog_url=server.url)
    provider = CountingProvider(home, settings=settings)
    provider.destroys = []
    deps = Ctx(settings, echo=lambda m: None, providers={"local": provider})
    try:
        yield deps, provider
    finally:
        for pod in provider.list_pods():
            LocalProvider.destroy(provider, pod.id)
        deps.close()
        server.stop()


def set_status(provider: LocalProvider, pod_id: str, status: str) -> None:
    with provider.transaction() as db:
        db.execute("update pods set status = ? where id = ?", (status, pod_id))


@pytest.mark.parametrize("status", ["stopped", "exited", "paused"])
def test_down_keeps_a_pod_whose_results_cannot_be_synced_unless_forced(
    world: tuple[Deps, CountingProvider], status: str
) -> None:
    deps, provider = world
    pod = up(UpOptions(experiment="parked"), deps)
    assert pod is not None
    results = provider.paths(pod.id).results
    results.mkdir(parents=True)
    (results / "checkpoint.pt").write_bytes(b"x" * 64)  # on the pod's disk, not yet in the bucket
    set_status(provider, pod.id, status)
    with pytest.raises(SafetyRefusal, match=f"is {status}: its results cannot be synced") as refused:
        down(pod.id, deps)
    assert "--force" in (refused.value.hint or "")
    # A paused (outbid) pod's disk is read by nothing until its bid wins: `gpuc results` refuses it too.
    assert ("gpuc results" in (refused.value.hint or "")) is (status != "paused"), refused.value.hint
    assert provider.destroys == [] and provider.get(pod.id) is not None
    down(pod.id, deps, force=True)
    assert provider.destroys == [pod.id] and provider.get(pod.id) is None


def a_run_record_for(deps: Deps, pod_id: str, name: str) -> None:
    """The run store says gpuc started this pod (a reused id, a hand-edited store, a console rename)."""
    deps.runs.record_intent("run-mixup", name, "local", "exp", deps.clock.now())
    deps.runs.set_pod_id("run-mixup", pod_id)


@pytest.mark.parametrize(
    ("name", "marked"),
    [("my-notebook", False), ("gpuc-lookalike01", False), ("my-notebook", True)],
    ids=["neither-marker", "gpuc-name-only", "owner-env-only"],
)
def test_down_and_run_refuse_a_pod_without_both_markers_even_with_a_run_record(
    world: tuple[Deps, CountingProvider], name: str, marked: bool
) -> None:
    deps, provider = world
    foreign = add_foreign(provider, name, managed_env=marked)
    a_run_record_for(deps, foreign.id, name)
    with pytest.raises(SafetyRefusal, match="not marked as gpuc's"):
        down(foreign.id, deps, force=True)
    with pytest.raises(SafetyRefusal, match="not marked as gpuc's"):
        run_job(foreign.id, ["python", "-c", "pass"], deps, force=True)
    assert provider.destroys == [] and provider.get(foreign.id) is not None
    assert provider.pids(foreign.id).get("job", []) == []  # nothing was started on it
