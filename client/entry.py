"""The `gpuc` console script. The top-level help is served without importing click (cold start)."""

from __future__ import annotations

import os
import sys
from typing import Any


def main() -> Any:
    # A shell asking for completions also runs a bare `gpuc` (the request is in _GPUC_COMPLETE):
    # click must answer it, not the fast help.
    if sys.argv[1:] in ([], ["--help"], ["-h"]) and "_GPUC_COMPLETE" not in os.environ:
        from gpuc.client.commands import top_help

        sys.stdout.write(top_help())
        return 0
    from gpuc.client.cli import main as click_main

    return click_main()
