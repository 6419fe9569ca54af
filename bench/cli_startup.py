"""CLI cold start: `gpuc --help`, `gpuc ls` and `gpuc ledger` against `python -c pass`, measured in the
same run, as CPU time (user + system of the child: the machine's other load does not count).

Why it matters: `gpuc` is typed many times a day; it must not pay for boto3, httpx or pydantic
before a command needs them. Targets: `--help` <= 2x, `ls` and `ledger` <= 4x.

Two homes. The empty one, as a new user has it: a fresh GPUC_HOME, no .env, no provider keys, no watchdog
token (the watchdog is "unreachable" without a connection attempt). The real one, as a user lives in it:
a .env with both providers' keys, a watchdog URL and token, pods at the providers, in the watchdog and in
the ledger. There the providers are the emulators and the watchdog is the real server, in threads of this
process on loopback (their CPU is not the child's): nothing here touches the network. What it measures is
the import and setup cost of a real command, not a provider's latency.
`--importtime` also lists the packages that `gpuc ls` imports and which gpuc module pulls each in
(python -X importtime, cumulative): the imports to make lazy.
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
# What `gpuc ls` / `gpuc ledger` in a real home cannot start without, and nothing else: click (the CLI),
# http.client (the stdlib's HTTP, for the providers and the watchdog), python-dotenv (the .env), json,
# sqlite3 (the runs store) and csv (the ledger). The ratio no gpuc code can go under.
FLOOR = "import click, http.client, dotenv, json, sqlite3, csv"
# The bench's providers and watchdog answer plain HTTP on loopback; a real home's answer HTTPS, and the
# first request of a command loads the trusted roots (core/tls.py: httpx's, certifi's bundle). The two
# commands below differ by that load alone.
TLS_IMPORT = "import ssl, certifi; certifi.where()"
TLS_ROOTS = "import ssl, certifi; ssl.create_default_context(cafile=certifi.where())"
GPUC = str(Path(sys.executable).parent / "gpuc")


def _time(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(runs: int = RUNS) -> dict[str, float]:
    with (
        tempfile.TemporaryDirectory(prefix="gpuc-bench-") as empty,
        tempfile.TemporaryDirectory(prefix="gpuc-bench-real-") as lived,
        real_home(Path(lived)) as real,
    ):
        fresh = fresh_env(Path(empty))
        commands = {
            "python_pass": ([sys.executable, "-c", "pass"], fresh),
            "gpuc_help": ([GPUC, "--help"], fresh),
            "gpuc_ls": ([GPUC, "ls"], fresh),
            "gpuc_ledger": ([GPUC, "ledger"], fresh),
            "gpuc_ls_real": ([GPUC, "ls"], real),
            "gpuc_ledger_real": ([GPUC, "ledger"], real),
            "floor_real": ([sys.executable, "-c", FLOOR], real),
            "tls_import": ([sys.executable, "-c", TLS_IMPORT], real),
            "tls_roots": ([sys.executable, "-c", TLS_ROOTS], real),
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(2):  # warm the page cache (and let `ls` create its state), not measured
            for argv, env in commands.values():
                _time(argv, env)
        for _ in range(runs):  # interleaved, so machine noise hits all alike
            for name, (argv, env) in commands.items():
                times[name].append(_time(argv, env))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["python_pass"]
    found = {f"{name}_ms": median * 1000 for name, median in medians.items()}
    found.update({f"{name}_ratio": medians[name] / base for name in commands if name != "python_pass"})
    found["tls_roots_extra_ms"] = (medians["tls_roots"] - medians["tls_import"]) * 1000
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
    rows = [("cli cold start (CPU): python -c pass", f"{m['python_pass_ms']:.1f} ms", "")]
    for name, label, target in (
        ("gpuc_help", "gpuc --help", "2.0"),
        ("gpuc_ls", "gpuc ls (empty home)", "4.0"),
        ("gpuc_ledger", "gpuc ledger (empty home)", "4.0"),
        ("gpuc_ls_real", "gpuc ls (real home: keys, watchdog, pods)", "4.0"),
        ("gpuc_ledger_real", "gpuc ledger (real home)", "4.0"),
        ("floor_real", "floor: python -c 'import click, http.client, dotenv, json, sqlite3, csv'", "-"),
    ):
        rows.append((f"cli cold start (CPU): {label}", f"{m[name + '_ms']:.1f} ms", ""))
        goal = f"target <= {target}x" if target != "-" else ""
        rows.append((f"cli cold start ratio: {label} / python -c pass", f"{m[name + '_ratio']:.2f}x", goal))
    roots = f"{m['tls_roots_extra_ms']:.1f} ms"
    rows.append(("cli cold start, over HTTPS also: loading the TLS roots once", roots, ""))
    return rows


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
