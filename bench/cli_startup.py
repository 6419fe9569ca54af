"""CLI cold start: `gpuc --help` against `python -c pass`, measured in the same run, as CPU time (user +
system of the child: the machine's other load does not count). Target: `--help` <= 2x.

Why it matters: `gpuc --help` and every TAB completion start the CLI; they must not pay for boto3, httpx or
pydantic. What a user waits for in a command that reads the network is measured with latency, not CPU, in
bench/ls_latency.py (the earlier ls/ledger CPU-ratio goals against loopback emulators are retired).
`--importtime` lists the packages that `gpuc ls` imports in a real home and which gpuc module pulls each in
(python -X importtime, cumulative).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gpuc.testkit.homes import fresh_env, real_home

RUNS = int(os.environ.get("GPUC_BENCH_RUNS", "15"))
GPUC = str(Path(sys.executable).parent / "gpuc")


def _time(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(runs: int = RUNS) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="gpuc-bench-") as empty:
        fresh = fresh_env(Path(empty))
        commands = {
            "python_pass": [sys.executable, "-c", "pass"],
            "gpuc_help": [GPUC, "--help"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(2):  # warm the page cache, not measured
            for argv in commands.values():
                _time(argv, fresh)
        for _ in range(runs):  # interleaved, so machine noise hits both alike
            for name, argv in commands.items():
                times[name].append(_time(argv, fresh))
    medians = {name: statistics.median(values) for name, values in times.items()}
    found = {f"{name}_ms": median * 1000 for name, median in medians.items()}
    found["gpuc_help_ratio"] = medians["gpuc_help"] / medians["python_pass"]
    return found


def _import_tree(stderr: str) -> list[tuple[str, float, str | None]]:
    """(module, cumulative ms, the module that imported it) from `python -X importtime` output, which
    prints each module after its children, indented by depth."""
    rows: list[tuple[str, float, str | None]] = []
    waiting: dict[int, list[int]] = {}  # depth -> rows still looking for their parent
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, raw = line.removeprefix("import time:").split("|")
        depth = (len(raw) - len(raw.lstrip(" "))) // 2
        rows.append((raw.strip(), int(cumulative) / 1000, None))
        for child in waiting.pop(depth + 1, []):
            rows[child] = (rows[child][0], rows[child][1], raw.strip())
        waiting.setdefault(depth, []).append(len(rows) - 1)
    return rows


def heavy_imports(
    env: dict[str, str], argv: tuple[str, ...] = ("ls",), min_ms: float = 5.0
) -> list[tuple[float, str, str]]:
    """(cumulative ms, package, the gpuc module that pulled it in) for each third-party or stdlib
    package a gpuc module imports directly during one `gpuc ls`: the list of what to make lazy."""
    code = f"import sys; sys.argv = ['gpuc', *{list(argv)!r}]; from gpuc.client.entry import main; main()"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=False
    )
    found = [
        (ms, module, parent)
        for module, ms, parent in _import_tree(proc.stderr)
        if parent and parent.startswith("gpuc") and not module.startswith("gpuc") and ms >= min_ms
    ]
    return sorted(found, reverse=True)


def main() -> list[tuple[str, str, str]]:
    m = measure()
    return [
        ("cli cold start (CPU): python -c pass", f"{m['python_pass_ms']:.1f} ms", ""),
        ("cli cold start (CPU): gpuc --help", f"{m['gpuc_help_ms']:.1f} ms", ""),
        ("cli cold start ratio: gpuc --help / python -c pass", f"{m['gpuc_help_ratio']:.2f}x", "target <= 2.0x"),
    ]


if __name__ == "__main__":
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
    if "--importtime" in sys.argv:
        with tempfile.TemporaryDirectory(prefix="gpuc-bench-real-") as tmp, real_home(Path(tmp)) as env:
            for command in ("ls", "ledger"):
                print(
                    f"\n`gpuc {command}` (real home): packages gpuc modules import (cumulative ms, >= 5 ms), and who:"
                )
                for ms, module, parent in heavy_imports(env, (command,)):
                    print(f"  {ms:8.1f}  {module:<32} from {parent}")
