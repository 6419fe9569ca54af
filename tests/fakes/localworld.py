"""A local world for the outcome tests: the local watchdog server over real HTTP, local pods (real
processes), and the real `gpuc` command in a subprocess (shared by tests/client/test_outcome*.py and
tests/hostile/test_hostile_pod.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuc.client.context import Ctx
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.server import start_in_thread

ADMIN = "admin-token-for-outcome-tests"
FAST: dict[str, Any] = {  # Settings overrides, each checked by Settings itself
    "heartbeat_interval_s": 0.5,
    "idle_check_interval_s": 0.5,
    "idle_warn_s": 300.0,
    "idle_destroy_s": 600.0,
    "silence_limit_s": 60.0,
    "reaper_period_s": 30.0,
    "local_boot_s": 0.2,
    "watchdog_timeout_s": 5.0,
}
TRAIN = """\
import os, sys, time
print("epoch 1 loss 0.9", flush=True)
print("a warning", file=sys.stderr, flush=True)
os.makedirs("results", exist_ok=True)
open("results/metrics.json", "w").write('{"loss": 0.5}')
time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0.5)
print("done", flush=True)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


@dataclass
class World:
    home: Path
    project: Path
    env: dict[str, str]
    settings: Settings
    opened: list[Ctx]

    def gpuc(self, *args: str, timeout_s: float = 120.0, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", *args],
            cwd=self.project,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def provider(self) -> LocalProvider:
        return LocalProvider(self.home, settings=self.settings)

    def deps(self) -> Ctx:
        deps = Ctx(self.settings, echo=lambda _: None)
        deps.providers["local"] = self.provider()
        self.opened.append(deps)
        return deps


@contextmanager
def open_world(tmp_path: Path) -> Iterator[World]:
    """A local watchdog server (a thread, real HTTP), a GPUC_HOME and a project with train.py; on the way
    out every local pod is destroyed and the server stopped."""
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN), **FAST)
    server = start_in_thread(settings, port=0, reaper_interval_s=30)
    settings = settings.with_overrides(watchdog_url=server.url)
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_"))}
    env.update({f"GPUC_{k.upper()}": str(v) for k, v in FAST.items()})
    env.update(
        GPUC_HOME=str(home),
        GPUC_ENV_FILE=str(tmp_path / "none.env"),
        GPUC_WATCHDOG_URL=server.url,
        GPUC_ADMIN_TOKEN=ADMIN,
    )
    opened: list[Ctx] = []
    try:
        yield World(home, project, env, settings, opened)
    finally:
        for deps in opened:
            deps.watchdog.close()
        provider = LocalProvider(home, settings=settings)
        for pod in provider.list_pods():
            provider.destroy(pod.id)
        server.stop()


def wait_for(pred: Any, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return bool(pred())


def only_run(world: World) -> Any:
    (run,) = world.deps().runs.all()
    return run
