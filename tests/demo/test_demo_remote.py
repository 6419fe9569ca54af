"""`gpuc demo --provider runpod|vast` and the real CLI against an emulator: pods created over HTTP,
reached over a loopback ssh server, gpuc installed on them offline, destroyed with the right key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.ledger.store import Ledger
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import new_token
from gpuc.functions.server import start_in_thread
from gpuc.testkit.demo import run_demo
from gpuc.testkit.platform import ACCOUNT, client_environ, start_platform, write_env_file
from gpuc.testkit.sshd import LoopbackSshd, SshdUnavailable, start_loopback_sshd

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]  # minutes of real processes: `make quick` leaves them out
LS_FIELDS = ("provider", "id", "name", "experiment", "status", "gpu", "price_per_hour", "created_at", "managed")


@pytest.mark.parametrize("provider", ["runpod", "vast"])
def test_the_demo_runs_both_stories_against_the_emulator(provider: str) -> None:
    lines: list[str] = []
    code = run_demo(lines.append, provider=provider)
    text = "\n".join(lines)
    assert code == 0, text
    assert f"gpuc demo: {provider} emulator at http://127.0.0.1:" in text
    assert "✗" not in text
    assert "failed" not in text and "bootstrap incomplete" not in text  # no noise to read past in a pass
    for expected in (
        "✓ up printed the ssh line: ready: ssh -p ",
        "✓ the watchdog never took the pod for silent while up installed it",
        "verify gpu_name: pass",
        "✓ results and the job's log synced to s3://gpuc-demo/results through the pod's grants before the destroy:"
        " ['job.log', 'metrics.json', 'outcome.json', 'push-manifest.json', 'weights.bin']",
        "✓ notification carries the exit code",
        "✓ destroyed with the pod-scoped key (expected: the pod-scoped key)",
        "✓ destroyed with the account key (expected: the account key)",
        f"✓ no pod left at the {provider} emulator",
        "✓ no process left in the pods' sandboxes",
        "demo passed in",
    ):
        assert expected in text, expected
    assert text.count("ledger: ") == 2
    first_rental = (  # RunPod's story 0: a first rental's traps, each before any money
        "✓ the account has no ssh key registered (a new account's)",
        "✓ a 3 GB volume refused before renting, with the fix",
        "✓ a 4-GPU quote is RunPod's price and stock for 4",
        "✓ told that no key is registered, and that gpuc hands the pod its own",
        "✓ a pool the account cannot use is said as such",
        "✓ nothing was rented by any of them",
        "✓ no key registered at RunPod: the pod took the key gpuc handed it (PUBLIC_KEY)",
    )
    assert all((line in text) == (provider == "runpod") for line in first_rental), text


def test_the_remote_demo_without_an_ssh_client_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No OpenSSH server is fine (the loopback server falls back to asyncssh); no ssh client is not.
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SshdUnavailable, match="no ssh client found") as exc:
        run_demo(print, home=tmp_path / "home", provider="runpod")
    assert exc.value.hint == "install it: apt-get install openssh-client"
    assert not (tmp_path / "home").exists()  # raised before anything started


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[LoopbackSshd]:
    server = start_loopback_sshd(tmp_path / "sshd")
    yield server
    server.stop()


def gpuc(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuc.client.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_up_ls_down_with_the_real_cli_against_the_runpod_emulator(sshd: LoopbackSshd, tmp_path: Path) -> None:
    emulator, platform = start_platform("runpod", sshd)
    token = new_token()
    functions = start_in_thread(Settings(home=tmp_path / "functions", admin_token=SecretStr(token)), port=0)
    try:
        home = tmp_path / "home"
        write_env_file(home)
        (home / "config.json").write_text(json.dumps({"bootstrap_apt": ""}))
        env = client_environ(emulator, sshd, home)
        env.update({"GPUC_WATCHDOG_URL": functions.url, "GPUC_ADMIN_TOKEN": token})

        up = gpuc(env, "up", "cli-exp", "--provider", "runpod")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"ready: ssh -p {sshd.port} root@127.0.0.1" in up.stderr  # gpuc's own lines go to stderr
        (pod_id,) = platform.alive()
        assert platform.processes(pod_id), "the agent runs in the pod's sandbox"

        ls = gpuc(env, "ls", "--json")
        assert ls.returncode == 0, ls.stderr
        (row,) = json.loads(ls.stdout)
        assert set(LS_FIELDS) <= set(row)
        assert row["provider"] == "runpod" and row["id"] == pod_id and row["experiment"] == "cli-exp"
        assert row["name"].startswith("gpuc-") and row["status"] == "running" and row["managed"] is True
        assert row["gpu"] and row["price_per_hour"] == pytest.approx(0.74) and row["created_at"]
        assert row["ssh"] == f"127.0.0.1:{sshd.port}"
        (open_row,) = Ledger(home / "gpu-ledger.csv").rows()
        assert open_row.experiment == "cli-exp" and open_row.provider == "runpod" and not open_row.end

        down = gpuc(env, "down", pod_id, "--note", "cli test")
        assert down.returncode == 0, down.stdout + down.stderr
        assert platform.alive() == {} and platform.destroyed_by[pod_id] == ACCOUNT
        (closed,) = Ledger(home / "gpu-ledger.csv").rows()
        assert closed.end and closed.cost_usd
        assert json.loads(gpuc(env, "ls", "--json").stdout) == []
    finally:
        platform.close()
        emulator.stop()
        functions.stop()
    assert platform.leftovers() == {}
    assert os.path.exists(sshd.sandbox / pod_id / "container.env")
