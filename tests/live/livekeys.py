"""Shared by the live contract tests: whether they run at all, and the per-provider key check."""

from __future__ import annotations

import os

import pytest

from gpuc.core.settings import Settings

LIVE = os.environ.get("GPUC_LIVE") == "1"


def needs_key(settings: Settings, field: str, env: str) -> None:
    secret = getattr(settings, field)
    if secret is None or not secret.get_secret_value():
        pytest.skip(f"no {env}: set it in the environment or .env to check this provider live")
