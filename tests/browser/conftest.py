"""The status page as a person uses it: a real headless Chromium at phone size (testkit/browser.py) on the
watchdog's loopback server, the world on a virtual clock. Without Chromium the tests are skipped, and the
run's summary says so in capitals with the command that installs it (never a quiet skip)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.watchdog import World, make_world

from gpuc.core.clock import FakeClock
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.testkit import browser as wd

SKIPPED = "BROWSER TESTS SKIPPED"
_missing: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _missing:
        terminalreporter.write_sep("!", f"{SKIPPED}: {_missing[0]}", red=True, bold=True)


@pytest.fixture(scope="session")
def driver() -> Iterator[wd.Driver]:
    found = wd.find()
    if isinstance(found, str):
        _missing.append(found)
        pytest.skip(f"{SKIPPED}: {found}")
    driver = wd.Driver(found)
    yield driver
    driver.close()


@pytest.fixture(scope="session")
def browser(driver: wd.Driver) -> Iterator[wd.Browser]:
    """One browser for the run (a start costs seconds): the page keeps no cookies or state to leak."""
    session = driver.session()
    yield session
    session.quit()


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[World]:
    w = make_world(home, clock, monthly_budget=50.0)
    yield w
    w.store.close()


@pytest.fixture
def served(world: World) -> Iterator[ServerHandle]:
    handle = start_in_thread(world.settings, deps=world.deps)
    yield handle
    handle.stop()
