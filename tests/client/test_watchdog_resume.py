""" "Pause new pods" from the phone, as the user lives it: the real tap over HTTP, `gpuc up` refused with the
way out, `gpuc watchdog resume` (the command the refusal names), then `up` gets past the pause."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakes.localworld import World, open_world

from gpuc.functions.buttons import offer

CONFIRMED = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def pause_from_the_phone(world: World) -> None:
    from gpuc.functions.store import SqliteStore

    store = SqliteStore(world.home / "watchdog.db")
    try:
        (pause,) = [o for o in offer(store, world.settings, None, "budget", time.time()) if o.verb == "pause"]
    finally:
        store.close()
    tapped = httpx.post(pause.url, content=b"confirm=yes", headers=CONFIRMED, timeout=10)
    assert tapped.status_code == 200, tapped.text


def test_up_names_resume_and_resume_lets_up_start_pods_again(world: World) -> None:
    pause_from_the_phone(world)
    refused = world.gpuc("up", "exp", "-y", "--", "python", "train.py")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "nothing was created" in refused.stderr and "gpuc watchdog resume" in refused.stderr
    assert world.provider().list_pods() == []

    resumed = world.gpuc("watchdog", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "new pods resumed" in resumed.stderr
    again = world.gpuc("watchdog", "resume")
    assert again.returncode == 0 and "not paused" in again.stderr

    started = world.gpuc("up", "exp", "-y", "--wait", "--", "python", "train.py")
    assert started.returncode == 0, started.stderr
    assert "paused" not in started.stderr


def test_resume_without_the_admin_token_says_how_to_get_one(world: World) -> None:
    done = world.gpuc("watchdog", "resume", GPUC_ADMIN_TOKEN="")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "admin token" in done.stderr
