"""`gpuc ledger` and `gpuc ls` in a home a user lives in (a .env with both keys, a watchdog with a token, a
pod at RunPod, in the watchdog and in the ledger), as separate processes: every read goes through. What the
network costs them is measured in bench/ls_latency.py; that they load no cloud SDK is checked here."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.testkit.homes import real_home

HEAVY = ("boto3",)
SHOW = (
    "import sys; sys.argv = ['gpuc', *sys.argv[1:]]\n"
    "from gpuc.client.entry import main\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "import json\n"
    f"print('LOADED', json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))), file=sys.stderr)"
)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with real_home(Path(tmp_path_factory.mktemp("real-home"))) as env:
        yield env


def run(env: dict[str, str], *argv: str) -> tuple[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", SHOW, *argv], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    [loaded] = [line for line in done.stderr.splitlines() if line.startswith("LOADED ")]
    return done.stdout + done.stderr, json.loads(loaded.removeprefix("LOADED "))


def test_gpuc_ledger_reads_the_watchdog_without_boto3(home: dict[str, str]) -> None:
    out, loaded = run(home, "ledger")
    assert "bench" in out and "RTX 4090" in out, out  # the ledger's row
    assert "unreachable" not in out, out  # the status call went through
    assert loaded == [], out


def test_gpuc_ls_lists_both_providers_and_the_watchdog_without_boto3(home: dict[str, str]) -> None:
    out, loaded = run(home, "ls")
    assert "bench" in out and "ok, no heartbeat yet" in out, out  # RunPod's pod, the watchdog's view of it
    assert "not read" not in out and "unreachable" not in out, out  # both providers and the watchdog answered
    assert loaded == [], out
