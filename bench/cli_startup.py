"""CLI cold start: `gpuc --help` against `python -c pass`, measured in the same run.

Why it matters: `gpuc` is typed many times a day; it must not pay for boto3, httpx or pydantic
before a command needs them. Target: ratio <= 2.0.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 15


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(runs: int = RUNS) -> dict[str, float]:
    base_cmd = [sys.executable, "-c", "pass"]
    cli_cmd = [str(Path(sys.executable).parent / "gpuc"), "--help"]
    base: list[float] = []
    cli: list[float] = []
    for _ in range(2):  # warm the page cache, not measured
        _time(base_cmd)
        _time(cli_cmd)
    for _ in range(runs):  # interleaved, so machine noise hits both alike
        base.append(_time(base_cmd))
        cli.append(_time(cli_cmd))
    b, c = statistics.median(base), statistics.median(cli)
    return {"python_pass_ms": b * 1000, "gpuc_help_ms": c * 1000, "ratio": c / b}


def main() -> list[tuple[str, str, str]]:
    m = measure()
    return [
        ("cli cold start: python -c pass", f"{m['python_pass_ms']:.1f} ms", ""),
        ("cli cold start: gpuc --help", f"{m['gpuc_help_ms']:.1f} ms", ""),
        ("cli cold start ratio (gpuc --help / python -c pass)", f"{m['ratio']:.2f}x", "target <= 2.0x"),
    ]


if __name__ == "__main__":
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
