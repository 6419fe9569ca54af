"""CLI cold start: `gpuc --help` and `gpuc ls` against `python -c pass`, measured in the same run.

Why it matters: `gpuc` is typed many times a day; it must not pay for boto3, httpx or pydantic
before a command needs them. Targets: `--help` <= 2x, `ls` <= 4x.

`gpuc ls` runs as a new user would have it: a fresh GPUC_HOME, no .env, no provider keys, no watchdog
token (so the watchdog is "unreachable" without a connection attempt: nothing here touches the network).
What it measures is the import and setup cost of a real command, not a provider's latency.
`--importtime` also lists the packages that `gpuc ls` imports and which gpuc module pulls each in
(python -X importtime, cumulative): the imports to make lazy.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 15
GPUC = str(Path(sys.executable).parent / "gpuc")


def _time(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def fresh_env(home: Path) -> dict[str, str]:
    """The caller's environment minus anything that configures gpuc or a provider, in an empty home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_", "HF_"))}
    env.update(HOME=str(home), GPUC_HOME=str(home / "gpuc"), GPUC_ENV_FILE=str(home / "no.env"))
    return env


def measure(runs: int = RUNS) -> dict[str, float]:
    commands = {
        "python_pass": [sys.executable, "-c", "pass"],
        "gpuc_help": [GPUC, "--help"],
        "gpuc_ls": [GPUC, "ls"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory(prefix="gpuc-bench-") as tmp:
        env = fresh_env(Path(tmp))
        for _ in range(2):  # warm the page cache (and let `ls` create its state), not measured
            for argv in commands.values():
                _time(argv, env)
        for _ in range(runs):  # interleaved, so machine noise hits all alike
            for name, argv in commands.items():
                times[name].append(_time(argv, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["python_pass"]
    return {
        "python_pass_ms": base * 1000,
        "gpuc_help_ms": medians["gpuc_help"] * 1000,
        "gpuc_ls_ms": medians["gpuc_ls"] * 1000,
        "help_ratio": medians["gpuc_help"] / base,
        "ls_ratio": medians["gpuc_ls"] / base,
    }


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


def heavy_imports(min_ms: float = 5.0) -> list[tuple[float, str, str]]:
    """(cumulative ms, package, the gpuc module that pulled it in) for each third-party or stdlib
    package a gpuc module imports directly during one `gpuc ls`: the list of what to make lazy."""
    with tempfile.TemporaryDirectory(prefix="gpuc-bench-") as tmp:
        env = fresh_env(Path(tmp))
        code = "import sys; sys.argv = ['gpuc', 'ls']; from gpuc.client.entry import main; main()"
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=True
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
        ("cli cold start: python -c pass", f"{m['python_pass_ms']:.1f} ms", ""),
        ("cli cold start: gpuc --help", f"{m['gpuc_help_ms']:.1f} ms", ""),
        ("cli cold start ratio (gpuc --help / python -c pass)", f"{m['help_ratio']:.2f}x", "target <= 2.0x"),
        ("cli cold start: gpuc ls (fresh home, no keys)", f"{m['gpuc_ls_ms']:.1f} ms", ""),
        ("cli cold start ratio (gpuc ls / python -c pass)", f"{m['ls_ratio']:.2f}x", "target <= 4.0x"),
    ]


if __name__ == "__main__":
    for name, value, target in main():
        print(f"{name:60} {value:>12}  {target}")
    if "--importtime" in sys.argv:
        print("\n`gpuc ls`: packages gpuc modules import (cumulative ms, >= 5 ms), and who imports them:")
        for ms, module, parent in heavy_imports():
            print(f"  {ms:8.1f}  {module:<32} from {parent}")
