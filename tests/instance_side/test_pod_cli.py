"""`python -m gpuc.instance_side ...` as real processes: a local sandbox pod, a loopback functions
stand-in that checks signatures, the real urllib transport, the real local self-destroy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fakes.pod import recording_functions, serving

from gpuc.core.models import PodSpec
from gpuc.core.podconfig import PodConfig, PodPaths, render_env_file
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.testkit.local_faults import set_gpu

TOKEN = "cli-token-" + "x" * 30


Functions = recording_functions(TOKEN)


@pytest.fixture
def watchdog_url() -> Iterator[str]:
    Functions.reset()
    with serving(Functions, ThreadingHTTPServer) as url:
        yield url
    assert Functions.problems == []


@pytest.fixture
def local(home: Path) -> LocalProvider:
    return LocalProvider(home, settings=Settings(home=home, local_boot_s=0))


def sandbox(local: LocalProvider, home: Path, watchdog_url: str, **cfg: Any) -> tuple[str, PodPaths, dict[str, str]]:
    """A local pod as `up` leaves it: config + secrets in its state dir, the sandbox's environment."""
    pod = local.create(PodSpec(experiment="exp", run_id="run01", provider="local", gpu_type="sim"))
    paths = local.paths(pod.id)
    paths.state.mkdir(parents=True, exist_ok=True)
    settings = Settings(home=home, watchdog_url=watchdog_url)
    config = PodConfig.for_pod(
        settings, pod_id=pod.id, provider="local", experiment="exp", run_id="run01", local_home=str(home)
    )
    config = PodConfig.model_validate({**config.model_dump(), **cfg})
    paths.config.write_text(config.model_dump_json())
    fd = os.open(paths.secrets, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, render_env_file({"GPUC_POD_TOKEN": TOKEN}).encode())
    os.close(fd)
    return pod.id, paths, local.sandbox_env(pod.id)


def gpuc_pod(args: list[str], env: dict[str, str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuc.instance_side", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        **kw,
    )


def test_run_ends_a_real_local_pod_after_syncing_its_results(
    local: LocalProvider, home: Path, tmp_path: Path, watchdog_url: str
) -> None:
    bucket = tmp_path / "bucket"
    pod_id, _paths, env = sandbox(local, home, watchdog_url, results_bucket=f"file://{bucket}")
    job = "import os; os.makedirs('results'); open('results/score.txt', 'w').write('0.93'); raise SystemExit(4)"
    done = gpuc_pod(["run", "--", sys.executable, "-c", job], env)
    assert done.returncode == 4, done.stderr
    assert (bucket / "exp" / "run01" / "score.txt").read_text() == "0.93"
    assert local.get(pod_id) is None  # destroyed, through the local provider's own state
    [event] = Functions.events
    assert (event.kind, event.exit_code) == ("job_exit", 4) and event.end_at is not None
    steps = [line for line in done.stderr.splitlines() if line.startswith("gpuc: ")]
    assert any("job exit code 4 recorded" in s for s in steps)
    order = [
        next(i for i, s in enumerate(steps) if key in s) for key in ("recorded", "sync verified", "notified", "destroy")
    ]
    assert order == sorted(order)


def test_dry_run_through_the_command_line(local: LocalProvider, home: Path, watchdog_url: str) -> None:
    pod_id, _paths, env = sandbox(local, home, watchdog_url)
    done = gpuc_pod(["run", "--", sys.executable, "-c", "raise SystemExit(6)"], {**env, "DRY_RUN": "1"})
    assert done.returncode == 6
    steps = [line.split("would ", 1)[1].split()[0] for line in done.stderr.splitlines() if "DRY_RUN: would" in line]
    assert steps == ["record", "sync", "notify", "destroy"]
    assert local.get(pod_id) is not None and Functions.events == []


def test_a_dead_terminal_does_not_change_the_jobs_exit_code(
    local: LocalProvider, home: Path, watchdog_url: str
) -> None:
    _pod_id, paths, env = sandbox(local, home, watchdog_url)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuc.instance_side",
            "run",
            "--",
            sys.executable,
            "-c",
            "import time; time.sleep(0.5); raise SystemExit(5)",
        ],
        env={**env, "KEEP_ALIVE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the ssh session that started it is gone
    proc.stderr.close()
    assert proc.wait(timeout=60) == 5
    assert paths.exit_code.read_text().strip() == "5"
    assert [e.kind for e in Functions.events] == ["job_exit"]


def test_the_agent_heartbeats_and_stops_on_sigterm(local: LocalProvider, home: Path, watchdog_url: str) -> None:
    pod_id, paths, env = sandbox(
        local,
        home,
        watchdog_url,
        heartbeat_interval_s=0.2,
        idle_check_interval_s=0.2,
        simulated_gpu=True,
        notify_start=True,  # GPUC_NOTIFY_START=1: the start is pushed too
    )
    set_gpu(local, pod_id, gpus=[{"name": "RTX 4090 (simulated)", "utilization_pct": 70}])
    agent = subprocess.Popen([sys.executable, "-m", "gpuc.instance_side", "agent"], env=env)
    try:
        deadline = time.monotonic() + 30
        while len(Functions.heartbeats) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        second = gpuc_pod(["agent"], env)
        assert second.returncode == 0 and "already running" in second.stderr
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=10) == 0
    finally:
        agent.kill()
        agent.wait()
    assert len(Functions.heartbeats) >= 3
    hb = Functions.heartbeats[-1]
    assert hb.pod_id == pod_id and hb.gpus[0].utilization_pct == 70 and hb.busy_reason == "GPU 0 at 70%"
    assert [h.seq for h in Functions.heartbeats] == sorted({h.seq for h in Functions.heartbeats})
    assert Functions.events[0].kind == "agent_start"
    assert TOKEN not in paths.log.read_text()


def test_the_agent_exits_by_itself_once_the_pod_has_ended(local: LocalProvider, home: Path, watchdog_url: str) -> None:
    pod_id, paths, env = sandbox(local, home, watchdog_url, heartbeat_interval_s=0.2, idle_check_interval_s=0.2)
    paths.ended.write_text(pod_id)
    done = gpuc_pod(["agent"], env)
    assert done.returncode == 0 and Functions.heartbeats == []


def test_sync_reports_success_and_failure_in_one_line(
    local: LocalProvider, home: Path, tmp_path: Path, watchdog_url: str
) -> None:
    _, paths, env = sandbox(local, home, watchdog_url, results_bucket=f"file://{tmp_path}/bucket")
    paths.results.mkdir()
    (paths.results / "a.txt").write_text("abc")
    done = gpuc_pod(["sync"], env)
    assert done.returncode == 0 and "sync verified: 1 file, 3 bytes" in done.stderr

    _, paths, env = sandbox(local, home, watchdog_url, results_bucket="s4://nope")
    paths.results.mkdir()
    (paths.results / "a.txt").write_text("abc")
    done = gpuc_pod(["sync"], env)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("gpuc: error: results bucket scheme 's4'")
    assert "Traceback" not in done.stderr


def test_a_pod_without_config_gets_a_one_line_error(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "GPUC_POD_ROOT": str(tmp_path)}
    done = gpuc_pod(["agent"], env)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("gpuc: error: no pod config at") and "Traceback" not in done.stderr
    done = gpuc_pod(["run"], env)
    assert done.returncode != 0 and "nothing to run" in done.stderr
