"""`gpuc keep POD --for 2h` says its limit in words ("until 16:13 UTC (2 h)"), and a duration beyond the
watchdog's cap says the cap and what to ask for, against the real local watchdog."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuc.client.pods.commands import keep
from gpuc.client.runs import RunStore
from gpuc.core.api import RegisterRequest
from gpuc.core.errors import ConfigError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_token
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.server import ServerHandle, start_in_thread

ADMIN = "admin-token-PLANTED-4f1e2d3c"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerHandle, dict[str, str]]]:
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN), max_hours=12)
    server = start_in_thread(settings, port=0)
    runs = RunStore(home)
    runs.record_intent("r1", "gpuc-r1", "local", "exp", 1.0)
    runs.set_pod_id("r1", "lp-1")
    with WatchdogClient(settings.with_overrides(watchdog_url=server.url)) as client:
        key = derive_key(new_token())
        client.register(RegisterRequest(pod_id="lp-1", provider="local", name="gpuc-r1", experiment="exp", key=key))
    env = {"GPUC_HOME": str(home), "GPUC_WATCHDOG_URL": server.url, "GPUC_ADMIN_TOKEN": ADMIN}
    try:
        yield server, env
    finally:
        server.stop()


def test_keep_says_until_when_in_utc_and_for_how_long(served: tuple[ServerHandle, dict[str, str]]) -> None:
    server, env = served
    result = CliRunner().invoke(keep, ["lp-1", "--for", "2h"], env=env)
    assert result.exit_code == 0, result.output
    first, second = result.output.splitlines()
    # After 22:00 UTC the lease ends tomorrow, and the line says the date (a lease is never read as today's).
    until = r"(\d{4}-\d\d-\d\d )?(\d\d):(\d\d) UTC"
    assert re.fullmatch(rf"lp-1: idle destroy suspended until {until} \(2 h\)", first), first
    assert second.startswith("lp-1: its deadline stays "), second  # 12 h from its start: later than the lease
    lease = server.deps.store.get_pod("lp-1").lease_until  # type: ignore[union-attr]
    assert lease is not None and lease - server.deps.clock.now() == pytest.approx(7200, abs=60)


def test_a_lease_beyond_the_watchdogs_cap_says_the_cap(served: tuple[ServerHandle, dict[str, str]]) -> None:
    server, env = served
    result = CliRunner().invoke(keep, ["lp-1", "--for", "2d"], env=env)
    error = result.exception
    assert isinstance(error, ConfigError), result.output  # the CLI prints it as one line plus the fix
    assert error.message.startswith("--for 2d is longer than the watchdog allows: a lease ends at most 12 h from now")
    assert re.match(r"ask for less \(gpuc keep lp-1 --for 1[12]h\)", error.hint or ""), error.hint
    assert server.deps.store.get_pod("lp-1").lease_until is None  # type: ignore[union-attr]
