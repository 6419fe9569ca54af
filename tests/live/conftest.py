"""Read-only contract tests against the real provider APIs, for a user with an account: `make live`.

They run only when GPUC_LIVE=1 (`make live` sets it) and skip, each, without the provider's key: `make
test` never runs them, and no other test touches the network. Every call they make is a read.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "live: a read-only call to a real provider API (make live)")


@pytest.fixture(autouse=True)
def clean_environ() -> Iterator[None]:
    """Overrides the suite's: these tests read the user's real keys and .env, on purpose."""
    yield


@pytest.fixture
def settings() -> Settings:
    return load_settings()
