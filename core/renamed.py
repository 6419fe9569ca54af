"""Names an older gpuc wrote under another name: the watchdog's address and timeout were named after the AWS
functions that ran it first. Read under both: a config.json an older deploy wrote, a pod config in a recovery kit
registered before the rename, and (core/settings.py OLD_ENV_NAMES) a .env or a shell's variables. The current
name wins where both are present. Standard library only: the pod reads its config through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RENAMED = {"functions_url": "watchdog_url", "functions_timeout_s": "watchdog_timeout_s"}


def current_names(document: Mapping[str, Any]) -> dict[str, Any]:
    """`document` with each old key (RENAMED) under its current name."""
    out = {k: v for k, v in document.items() if k not in RENAMED}
    for old, new in RENAMED.items():
        if old in document and new not in document:
            out[new] = document[old]
    return out
