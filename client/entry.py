"""The `gpuc` console script. The top-level help is served without importing click (cold start)."""

from __future__ import annotations

import os
import sys
from typing import Any

from gpuc.client.command_table import top_help  # import-free: the fast help below costs nothing more


def main() -> Any:
    # Startup: pydantic scans every installed distribution's entry points for plugins on the first model
    # it builds (~15 ms); gpuc uses none. A user's own setting wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # A shell asking for completions also runs a bare `gpuc` (the request is in _GPUC_COMPLETE):
    # click must answer it, not the fast help.
    if sys.argv[1:] in ([], ["--help"], ["-h"]) and "_GPUC_COMPLETE" not in os.environ:
        sys.stdout.write(top_help())
        return 0
    from gpuc.client.cli import main as click_main  # lazy: click (~20 ms) only past the fast help

    return click_main()
