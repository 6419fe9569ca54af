"""`gpuc demo` and `gpuc drill` never reach a real account, whatever the user's shell and .env hold.

Incident: the local demo kept RUNPOD_API_KEY / VAST_API_KEY from the shell; its throw-away watchdog reaps
at every provider with a key, destroyed the user's real gpuc pod, and the demo still said "demo passed".

The user's "real account" here is a RunPod and a Vast emulator on loopback, each holding a running
gpuc-managed pod, with the keys and URLs planted in the environment, in GPUC_ENV_FILE and in the current
folder's .env. Whatever would go to the providers' real addresses goes through an https proxy on
loopback that refuses it and writes it down: no test touches the network, and no request goes unseen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpuc.core.errors import ConfigError
from gpuc.core.pod import OWNER_ENV
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.demo import NOWHERE, check_offline, demo_settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

pytestmark = pytest.mark.e2e  # minutes of real processes: `make quick` leaves them out

GPUC = str(Path(sys.executable).parent / "gpuc")
RUNPOD_KEY = "rpa_" + "K7Q2" * 9  # shaped like a real key: the emulator accepts only this one
VAST_KEY = "9f" * 32


class _Catcher(BaseHTTPRequestHandler):
    """An https proxy that lets nothing through: every CONNECT (or plain request) is recorded, refused."""

    seen: list[str]

    def _refuse(self) -> None:
        type(self).seen.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_CONNECT = do_GET = do_POST = do_PUT = do_DELETE = _refuse

    def log_message(self, *_: Any) -> None:
        return


@dataclass
class Account:
    """The user's real account, as far as the demo can tell."""

    runpod: RunPodEmulator
    vast: VastEmulator
    pods: dict[str, str]  # provider -> the running gpuc pod the demo must not touch
    internet: list[str]  # what tried to leave this machine
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = Path(".")

    def requests(self) -> list[str]:
        return [f"{r.method} {r.path}" for emu in (self.runpod, self.vast) for r in emu.requests]

    def alive(self) -> dict[str, bool]:
        return {
            "runpod": any(p.id == self.pods["runpod"] for p in self.runpod.alive()),
            "vast": any(str(i.id) == self.pods["vast"] and i.actual == "running" for i in self.vast.alive()),
        }


def _env_file(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)
    return path


@pytest.fixture
def account(tmp_path: Path) -> Iterator[Account]:
    runpod, vast = RunPodEmulator(api_key=RUNPOD_KEY), VastEmulator(api_key=VAST_KEY)
    pods = {
        "runpod": runpod.add_foreign_pod("gpuc-realrun0001", env={OWNER_ENV: "1", "GPUC_EXPERIMENT": "train"}),
        "vast": vast.add_foreign_pod("gpuc-realrun0002", env={OWNER_ENV: "1", "GPUC_EXPERIMENT": "train"}),
    }

    class Catcher(_Catcher):  # its own record of what it refused
        pass

    Catcher.seen = []
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Catcher)
    thread = threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    with EmulatorServer(runpod) as rp_server, EmulatorServer(vast) as vast_server:
        planted = {**rp_server.client_env(), **vast_server.client_env(), "GPUC_PROVIDER": "runpod"}
        cwd = tmp_path / "project"
        cwd.mkdir()
        _env_file(cwd / ".env", planted)
        proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
        env = {
            **os.environ,
            **planted,
            "GPUC_ENV_FILE": str(_env_file(tmp_path / "user.env", planted)),
            **{name: proxy_url for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")},
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
        try:
            yield Account(runpod, vast, pods, Catcher.seen, env=env, cwd=cwd)
        finally:
            proxy.shutdown()
            proxy.server_close()


def _gpuc(account: Account, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUC, *args], capture_output=True, text=True, env=account.env, cwd=account.cwd, timeout=180)


def test_the_demo_never_reaches_the_users_account(account: Account) -> None:
    proc = _gpuc(account, "demo")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "demo passed" in out, out
    assert account.requests() == [], "the demo talked to the user's provider account"
    assert account.internet == [], "the demo tried to reach a provider's real address"
    assert account.alive() == {"runpod": True, "vast": True}
    assert RUNPOD_KEY not in out and VAST_KEY not in out


def test_the_drill_never_reaches_the_users_account(account: Account) -> None:
    proc = _gpuc(account, "drill")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "drill: PASS" in out, out
    assert account.requests() == [] and account.internet == []
    assert account.alive() == {"runpod": True, "vast": True}


def test_demo_settings_hold_no_key_and_no_provider_url_from_the_shell_or_any_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = {
        "RUNPOD_API_KEY": RUNPOD_KEY,
        "VAST_API_KEY": VAST_KEY,
        "GPUC_RUNPOD_GRAPHQL_URL": "https://api.runpod.io/graphql",
        "GPUC_VAST_URL": "https://console.vast.ai/api/v0",
        "GPUC_NOTIFY_URLS": "ntfy://my-phone",
        "GPUC_LEDGER_PATH": str(tmp_path / "my-real-ledger.csv"),
    }
    project = tmp_path / "project"
    project.mkdir()
    _env_file(project / ".env", planted)  # found from the current folder when GPUC_ENV_FILE is unset
    monkeypatch.chdir(project)
    monkeypatch.delenv("GPUC_ENV_FILE")
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "demo-home"
    settings = demo_settings(home)
    assert settings.runpod_api_key is None and settings.vast_api_key is None
    assert settings.notify_urls is None and settings.provider == "local"
    assert settings.ledger == home / "gpu-ledger.csv"
    for url in (settings.runpod_graphql_url, settings.runpod_rest_url, settings.vast_url):
        assert url.startswith(NOWHERE)


def test_a_demo_given_a_key_for_a_real_address_refuses_to_start(tmp_path: Path) -> None:
    real = Settings(home=tmp_path, runpod_api_key=SecretStr(RUNPOD_KEY))
    with pytest.raises(ConfigError, match="runpod key and a URL off this machine"):
        check_offline(real)
    check_offline(
        real.with_overrides(runpod_graphql_url="http://127.0.0.1:5/graphql", runpod_rest_url="http://localhost:5/v2")
    )
    check_offline(Settings(home=tmp_path))  # no key: the default URLs are never used
