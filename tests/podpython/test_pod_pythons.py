"""gpuc's pod side on the images people rent: the bundle `up` builds, installed with the REAL installer (the probe
that finds the image's python, the unzip, the launcher: core/podinstall.py, as `up` and a re-rented pod's boot run
them) into every python3 the machine offers among 3.9 to 3.13, each found, never assumed (conftest.py), then run
there: the agent's self-check, an agent that heartbeats to a watchdog stand-in checking every ping against the
watchdog's own model, and the job wrapper around `true`.

The interpreters are bare: no venv, no site-packages of gpuc's, no PYTHONPATH. Whatever the pod imports that the
standard library and the bundle do not hold fails here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path, PurePosixPath

import pytest
from fakes.pod import recording_functions, serving
from pod_pythons import MINORS, find

from gpuc.client.onpod.bundle import Bundle, build_bundle
from gpuc.core.podinstall import Installer, probe_script, read_probe
from gpuc.core.podpaths import POD_ROOT_ENV, TOKEN_ENV, PodPaths
from gpuc.core.podsecrets import render_env_file

TOKEN = "podpython-token-" + "x" * 30
Functions = recording_functions(TOKEN)
POD_ID = "podpy0001"


@pytest.fixture(scope="module")
def bundle() -> Bundle:
    return build_bundle()


@pytest.fixture
def watchdog_url() -> Iterator[str]:
    Functions.reset()
    with serving(Functions, ThreadingHTTPServer) as url:
        yield url


def bare_env(root: Path) -> dict[str, str]:
    """A pod's environment: no venv, no PYTHONPATH, nothing of the laptop's python."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    return {**keep, POD_ROOT_ENV: str(root), "PYTHONNOUSERSITE": "1"}


def install(bundle: Bundle, python: str, root: Path) -> tuple[PodPaths, str]:
    """As `up` does it over ssh (client/onpod/provision.py install_code), with sh on this machine."""
    paths = PodPaths(root)
    paths.code.mkdir(parents=True)
    probe = subprocess.run(["sh", "-c", probe_script(python)], capture_output=True, text=True, env=bare_env(root))
    found = read_probe(probe.stdout)
    assert found.usable and found.path, probe.stdout + probe.stderr
    remote = paths.code / bundle.filename
    remote.write_bytes(bundle.data)
    script = Installer(python).script(paths, PurePosixPath(str(remote)), found.path)
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=bare_env(root), timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return paths, str(found.version)


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_the_pod_side_installs_and_runs_on_this_python(
    minor: int, bundle: Bundle, tmp_path: Path, watchdog_url: str
) -> None:
    python = find(minor)
    if python is None:
        pytest.skip(f"no python3.{minor} on this machine (the run's summary says so in capitals)")
    root = tmp_path / "pod"
    paths, version = install(bundle, python, root)
    assert version.startswith(f"3.{minor}.")
    env = bare_env(root)

    check = subprocess.run(
        [str(paths.python), "-m", "gpuc.instance_side", "selfcheck", "--json"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    report = json.loads(check.stdout)
    assert check.returncode == 0 and report["ok"], report
    assert report["python"] == version and report["source"].startswith("bundle")
    assert report["modules"] >= 40 and "PodConfig" in report["wire"] and report["nvml"].startswith("pynvml present")

    config = {
        "pod_id": POD_ID, "provider": "runpod", "experiment": "exp", "run_id": "run01", "watchdog_url": watchdog_url,
        "heartbeat_interval_s": 0.5, "idle_check_interval_s": 0.5, "sync_interval_s": 0,
    }  # fmt: skip
    paths.config.write_text(json.dumps(config))
    fd = os.open(paths.secrets, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, render_env_file({TOKEN_ENV: TOKEN}).encode())
    os.close(fd)

    agent = subprocess.Popen(
        [str(paths.python), "-m", "gpuc.instance_side", "agent"],
        env=env, cwd=paths.workspace, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        until = time.monotonic() + 60
        while not Functions.heartbeats and agent.poll() is None and time.monotonic() < until:
            time.sleep(0.1)
        assert Functions.heartbeats, f"no heartbeat from python {version}: {_stderr(agent)}"
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=30)
        if agent.stderr is not None:
            agent.stderr.close()
    assert Functions.problems == []  # every ping signed right and valid against the watchdog's own model
    assert Functions.heartbeats[0].pod_id == POD_ID

    wrapped = subprocess.run(
        [str(paths.python), "-m", "gpuc.instance_side", "run", "--", "true"],
        env={**env, "DRY_RUN": "1"}, cwd=paths.workspace, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert wrapped.returncode == 0, wrapped.stdout + wrapped.stderr
    assert "DRY_RUN: would destroy pod" in wrapped.stdout + wrapped.stderr


def test_the_job_gets_the_images_pythonpath_not_gpucs(bundle: Bundle, tmp_path: Path) -> None:
    """gpuc's site (its pynvml) is first on the path of gpuc's own processes, never of the user's job."""
    python = next((p for p in map(find, MINORS) if p), None)
    assert python is not None
    paths, _ = install(bundle, python, tmp_path / "pod")
    env = {**bare_env(paths.root), "PYTHONPATH": "/image/lib"}
    code = "import json, os; from gpuc.core.podinstall import image_environ as i; print(json.dumps(i(os.environ)))"
    done = subprocess.run([str(paths.python), "-c", code], capture_output=True, text=True, env=env, check=True)
    seen = json.loads(done.stdout)
    assert seen["PYTHONPATH"] == "/image/lib" and "GPUC_POD_SITE" not in seen


def _stderr(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None or proc.stderr is None:
        return "(still running)"
    return proc.stderr.read().decode(errors="replace")[-2000:]
