"""The `gpuc` console script. The top-level help is served without importing click (cold start)."""

from __future__ import annotations

import sys
from typing import Any


def main() -> Any:
    if sys.argv[1:] in ([], ["--help"], ["-h"]):
        from gpuc.client.commands import top_help

        sys.stdout.write(top_help())
        return 0
    from gpuc.client.cli import main as click_main

    return click_main()
