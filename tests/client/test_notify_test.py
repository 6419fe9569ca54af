"""`gpuc notify --test`, as a user runs it: the real command, a real watchdog server and a
local ntfy stand-in over HTTP. Each route says whether its service accepted the message, and a channel
the watchdog does not hold is a ✗ with exit 1, never a silent gap."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.server import start_in_thread
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.stand_ins import NtfyStandIn

ADMIN = "admin-token-notify-test"


@pytest.fixture
def ntfy() -> Iterator[tuple[NtfyStandIn, str]]:
    stand_in = NtfyStandIn()
    with EmulatorServer(stand_in) as http:
        yield stand_in, "ntfy://" + http.url.removeprefix("http://") + "/gpuc-alerts"


def gpuc(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_"))}
    base.update(GPUC_HOME=str(tmp_path / "laptop"), GPUC_ENV_FILE=str(tmp_path / "none.env"), **env)
    return subprocess.run(
        [sys.executable, "-m", "gpuc.client.cli", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_route_is_tried_and_said(tmp_path: Path, ntfy: tuple[NtfyStandIn, str]) -> None:
    stand_in, url = ntfy
    settings = Settings(
        home=tmp_path / "wd", env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN), notify_urls=SecretStr(url)
    )
    with start_in_thread(settings, port=0) as server:
        done = gpuc(
            tmp_path, "notify", "--test", GPUC_NOTIFY_URLS=url, GPUC_WATCHDOG_URL=server.url, GPUC_ADMIN_TOKEN=ADMIN
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✓ channel 1 (ntfy): accepted by the service" in done.stdout
    assert "✓ the watchdog: accepted; it sends through 1 channel" in done.stdout
    assert len(stand_in.published) == 2, "one from here, one through the watchdog"
    assert ADMIN not in done.stdout + done.stderr


def test_a_channel_the_watchdog_lacks_is_a_cross(tmp_path: Path, ntfy: tuple[NtfyStandIn, str]) -> None:
    _, url = ntfy
    settings = Settings(home=tmp_path / "wd", env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN))
    with start_in_thread(settings, port=0) as server:
        done = gpuc(
            tmp_path, "notify", "--test", GPUC_NOTIFY_URLS=url, GPUC_WATCHDOG_URL=server.url, GPUC_ADMIN_TOKEN=ADMIN
        )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "✓ channel 1 (ntfy)" in done.stdout and "✗ the watchdog: accepted, but" in done.stdout


def test_no_channel_and_no_watchdog_say_so(tmp_path: Path) -> None:
    done = gpuc(tmp_path, "notify", "--test", GPUC_WATCHDOG_URL="http://127.0.0.1:9", GPUC_ADMIN_TOKEN=ADMIN)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "✗ channels: GPUC_NOTIFY_URLS is not set" in done.stdout
    assert "✗ the watchdog: not sent:" in done.stdout


def test_the_stand_in_phone_page_shows_a_push_and_a_tap_sends_its_button(tmp_path: Path) -> None:
    """The rehearsal's phone: the page lists the message and its buttons; a tap on an
    `http` button sends its request as the ntfy app does."""
    import time

    import httpx

    from gpuc.core.notify.channels import NtfyChannel
    from gpuc.core.notify.message import Action, Message

    target = NtfyStandIn()
    phone = NtfyStandIn()
    with EmulatorServer(target) as aimed, EmulatorServer(phone) as http:
        channel = NtfyChannel(http.url, "rehearsal")
        keep = Action("keep 1 h", f"{aimed.url}/", "t", safe=True)
        with httpx.Client() as client:
            channel.deliver(Message(0.0, "exp idle: destroys at 12:00", "To keep it: tap", actions=(keep,)), client)
            page = client.get(http.url).text
            assert "exp idle: destroys at 12:00" in page and "keep 1 h" in page
            tapped = client.post(f"{http.url}/tap", data={"m": "0", "label": "keep 1 h"})
            assert tapped.status_code == 303
            assert client.post(f"{http.url}/tap", data={"m": "0", "label": "nope"}).status_code == 400
        for _ in range(100):
            if phone.taps:
                break
            time.sleep(0.05)
        assert [r.method for r in target.requests] == ["POST"]
        assert phone.taps and phone.taps[0][:2] == (0, "keep 1 h")
