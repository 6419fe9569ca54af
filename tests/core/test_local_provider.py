from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.errors import NotFound
from gpuc.core.models import PodSpec
from gpuc.core.providers.local import LocalProvider, LocalSelfDestroyer
from gpuc.core.settings import Settings


def spec(run_id: str = "run01") -> PodSpec:
    return PodSpec(experiment="exp", run_id=run_id, provider="local", gpu_type="sim")


@pytest.fixture
def provider(home: Path, clock: FakeClock) -> LocalProvider:
    return LocalProvider(home, settings=Settings(home=home, local_boot_s=5), clock=clock)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by us) is dead for our purpose
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def test_it_boots_after_the_boot_time(provider: LocalProvider, clock: FakeClock) -> None:
    pod = provider.create(spec())
    assert pod.status == "provisioning"
    assert pod.managed and pod.name == "gpuc-run01"
    clock.advance(5)
    got = provider.get(pod.id)
    assert got is not None and got.status == "running"


def test_destroy_is_idempotent_and_kills_the_sandbox(provider: LocalProvider) -> None:
    pod = provider.create(spec())
    provider.access(pod.id).spawn(["python", "-c", "import time; time.sleep(60)"], role="job")
    pid = provider.pids(pod.id)["job"]
    assert provider.destroy(pod.id) == "destroyed"
    assert provider.destroy(pod.id) == "already_gone"
    assert provider.get(pod.id) is None
    assert not provider.paths(pod.id).root.exists()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_the_sandbox_does_not_inherit_the_laptops_secrets(
    provider: LocalProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_PLANTEDSECRET123")
    pod = provider.create(spec())
    code, out = provider.access(pod.id).run(["python", "-c", "import os; print(sorted(os.environ))"])
    assert code == 0
    assert "RUNPOD_API_KEY" not in out and "GPUC_POD_ID" in out and "GPUC_MANAGED" in out


def test_put_file_keeps_the_mode_and_stays_in_the_sandbox(provider: LocalProvider) -> None:
    pod = provider.create(spec())
    access = provider.access(pod.id)
    access.put_file("workspace/.gpuc/secrets.env", b"X=1\n", 0o600)
    path = provider.paths(pod.id).secrets
    assert path.read_bytes() == b"X=1\n" and (path.stat().st_mode & 0o777) == 0o600
    with pytest.raises(Exception, match="escapes"):
        access.put_file("../../outside", b"no")


def test_a_foreign_pod_is_not_managed(provider: LocalProvider) -> None:
    foreign = provider.add_foreign("my-notebook")
    imposter = provider.add_foreign("gpuc-abcd1234", managed_env=False)
    assert not foreign.managed
    assert not imposter.managed, "the name prefix alone is not ownership"


def test_drill_states(provider: LocalProvider, clock: FakeClock) -> None:
    pod = provider.create(spec())
    clock.advance(10)
    provider.access(pod.id).spawn(["python", "-c", "import time; time.sleep(60)"], role="agent")
    provider.pause(pod.id)
    assert provider.get(pod.id).status == "paused"  # type: ignore[union-attr]
    provider.stop(pod.id)
    assert provider.get(pod.id).status == "stopped"  # type: ignore[union-attr]
    provider.vanish(pod.id)
    assert provider.get(pod.id) is None
    with pytest.raises(NotFound):
        provider.kill_role(pod.id, "agent", signal.SIGKILL)


def test_self_destroy_uses_the_shared_state(provider: LocalProvider, home: Path) -> None:
    pod = provider.create(spec())
    out = LocalSelfDestroyer({"GPUC_LOCAL_HOME": str(home), "GPUC_POD_ID": pod.id}).destroy_self()
    assert "destroyed" in out and provider.get(pod.id) is None


def test_balance_counts_running_pods(provider: LocalProvider, clock: FakeClock) -> None:
    provider.create(spec())
    clock.advance(3600)
    bal = provider.balance()
    assert bal.spend_per_hour == pytest.approx(0.44)
    assert bal.balance_usd == pytest.approx(15 - 0.44, abs=0.01)
