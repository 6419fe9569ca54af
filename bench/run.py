"""`make bench`: every benchmark, each printing ratios measured in the same run (machines are noisy)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BENCHES = [
    "cli_startup",
    "ls_latency",
    "agent_footprint",
    "heartbeat_ingest",
    "reaper_pass",
    "exit_to_destroy",
    "upload_scan",
    "push_scan",
    "termsafe_speed",
    "pod_install",
]


def main() -> int:
    print(f"{'benchmark':60} {'value':>12}  target")
    missing = []
    for name in BENCHES:
        if not (Path(__file__).parent / f"{name}.py").exists():
            missing.append(name)
            continue
        for label, value, target in importlib.import_module(name).main():
            print(f"{label:60} {value:>12}  {target}", flush=True)
    if missing:
        print(f"(not built yet: {', '.join(missing)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
