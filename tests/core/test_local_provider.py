from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.errors import NotFound
from gpuc.core.models import PodSpec
from gpuc.core.providers.local import LocalProvider, LocalSelfDestroyer
from gpuc.core.settings import Settings
from gpuc.testkit import local_faults


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
    (pid,) = provider.pids(pod.id)["job"]
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
    foreign = local_faults.add_foreign(provider, "my-notebook")
    imposter = local_faults.add_foreign(provider, "gpuc-abcd1234", managed_env=False)
    assert not foreign.managed
    assert not imposter.managed, "the name prefix alone is not ownership"


def test_drill_states(provider: LocalProvider, clock: FakeClock) -> None:
    pod = provider.create(spec())
    clock.advance(10)
    provider.access(pod.id).spawn(["python", "-c", "import time; time.sleep(60)"], role="agent")
    local_faults.pause(provider, pod.id)
    assert provider.get(pod.id).status == "paused"  # type: ignore[union-attr]
    provider.stop(pod.id)
    assert provider.get(pod.id).status == "stopped"  # type: ignore[union-attr]
    local_faults.vanish(provider, pod.id)
    assert provider.get(pod.id) is None
    with pytest.raises(NotFound):
        local_faults.kill_role(provider, pod.id, "agent", signal.SIGKILL)


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


def _pid_file_job(name: str, daemon: bool = False) -> list[str]:
    """A job that writes its pid to `name` in the workspace and sleeps; with `daemon`, it first starts a
    child in a session of its own (out of every recorded process group) that does the same."""
    code = (
        "import os, subprocess, sys, time\n"
        f"name = {name!r}\n"
        "if {daemon}:\n"
        "    subprocess.Popen([sys.executable, '-c', 'import os, time; open(\"daemon-' + name + '\", \"w\")"
        ".write(str(os.getpid())); time.sleep(60)'], start_new_session=True)\n"
        "open(name, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    ).replace("{daemon}", str(daemon))
    return ["python", "-c", code]


def _wait_for_pids(workspace: Path, names: list[str]) -> list[int]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if all((workspace / n).is_file() and (workspace / n).read_text() for n in names):
            return [int((workspace / n).read_text()) for n in names]
        time.sleep(0.05)
    raise AssertionError(f"the jobs never wrote {names}")


def _all_dead(pids: list[int]) -> bool:
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(p) for p in pids)


# Incident: `gpuc run` on a pod whose job was running started a second job; the sandbox kept one pid per
# role, so the destroy that followed killed the second job only and the first trained on, unwatched.
def test_destroy_ends_every_process_of_the_pod_a_second_job_and_a_daemon_too(provider: LocalProvider) -> None:
    pod = provider.create(spec())
    access = provider.access(pod.id)
    workspace = provider.paths(pod.id).workspace
    access.spawn(_pid_file_job("first"), role="job")
    access.spawn(_pid_file_job("second", daemon=True), role="job")
    pids = _wait_for_pids(workspace, ["first", "second", "daemon-second"])
    try:
        assert all(alive(p) for p in pids)
        assert provider.destroy(pod.id) == "destroyed"
        assert _all_dead(pids), "a process of the destroyed pod survived"
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_destroy_never_signals_a_process_that_is_not_the_pods(provider: LocalProvider) -> None:
    # A recorded pid the kernel has since given to someone else's session leader must be left alone.
    pod = provider.create(spec())
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        provider.record_pid(pod.id, "job", stranger.pid)
        provider.destroy(pod.id)
        time.sleep(0.2)
        assert stranger.poll() is None, "destroy killed a process outside the pod"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_process_started_after_the_destroy_does_not_outlive_the_pod(provider: LocalProvider) -> None:
    pod = provider.create(spec())
    provider.destroy(pod.id)
    late = subprocess.Popen(  # a spawn that raced the destroy: the sandbox process exists, the pod no more
        [sys.executable, "-c", "import time; time.sleep(60)"],
        start_new_session=True,
        env={**os.environ, "GPUC_POD_ID": pod.id},
    )
    try:
        with pytest.raises(NotFound):
            provider.record_pid(pod.id, "job", late.pid)
        assert late.wait(timeout=10) == -signal.SIGKILL
    finally:
        late.kill()
        late.wait()
