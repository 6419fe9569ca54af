"""Rerun the hand mutants (safety checks that no test guarded once): each breaks one safety check, and a
named test must fail on it.

    make mutants                                   # every mutant in table.py
    .venv/bin/python tests/mutants/run.py --list   # what they are
    .venv/bin/python tests/mutants/run.py --only dry-   # the ones whose id starts so
    .venv/bin/python tests/mutants/run.py --sample 12 --seed 1   # twelve of them, drawn reproducibly
    .venv/bin/python tests/mutants/run.py --only dry- \
        --against "tests/functions --ignore=tests/functions/test_reaper_guards.py"   # before their guard?

Each mutant is one exact replacement in one file (table.py). The tree must be clean (no change to a
tracked file): the file is mutated in place, its tests run, and the original bytes and mtime are put back
in a `finally`, on Ctrl-C and SIGTERM too. Python writes no bytecode for the mutated runs, so no cached
mutant can outlive its run. A snippet that no longer occurs exactly once fails the run (the code moved:
update the table) instead of counting as a survivor or a kill.

Each mutant runs twice: against its named tests (the table's score: did the test written for it fail?),
then against every test of the folders those tests are in (the suite's score: would the suite as a whole
catch this break, as `make test` runs it?). Both scores are printed.

Killed: pytest reports a failure (exit 1) or the run exceeds the timeout. Survived: every test passed.
Anything else (a collection error, exit 2-5) is an error of the table. Exit 0 only when every mutant was
killed in both runs.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutant import Mutant
from table import MUTANTS  # the table lives beside this script

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600.0


def tracked_changes(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


def check(mutant: Mutant, root: Path = ROOT) -> str | None:
    """Why this mutant cannot be applied to the tree as it is, or None."""
    path = root / mutant.file
    if not path.is_file():
        return f"{mutant.file} does not exist"
    if mutant.original == mutant.mutated:
        return "the mutated snippet is the original"
    count = path.read_text(encoding="utf-8").count(mutant.original)
    if count != 1:
        return f"the original snippet occurs {count} times in {mutant.file}, not once"
    missing = [t for t in mutant.tests if not (root / t.split("::")[0]).is_file()]
    if missing:
        return f"no such test file: {', '.join(missing)}"
    return None


def folders(mutant: Mutant) -> list[str]:
    """The folders of its named tests: the part of the suite that answers for the code it breaks."""
    return sorted({str(Path(t.split("::")[0]).parent) for t in mutant.tests})


def in_parallel(workers: int) -> list[str]:
    return ["-n", str(workers), "--dist", "worksteal"] if workers > 1 else ["-p", "no:xdist"]


def pytest(tests: list[str], root: Path, timeout_s: float) -> tuple[int | None, str]:
    """(pytest's exit code, or None on timeout; its last lines). `tests` may hold pytest options."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header", *tests]
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, ""
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
    return done.returncode, tail


def run_mutant(mutant: Mutant, root: Path, timeout_s: float, tests: list[str] | None = None) -> tuple[str, str]:
    """("killed" | "survived" | "error", detail), against its own tests or `tests`. The file is back as it
    was when this returns or raises."""
    path = root / mutant.file
    original = path.read_bytes()
    stat = path.stat()
    try:
        text = original.decode("utf-8")
        path.write_text(text.replace(mutant.original, mutant.mutated, 1), encoding="utf-8")
        code, tail = pytest(list(mutant.tests) if tests is None else tests, root, timeout_s)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    if code is None:
        return "killed", f"timed out after {timeout_s:.0f} s"
    # Under pytest-xdist, -x ends the run as interrupted (exit 2) after the first failure: a kill when it says so.
    if code == 1 or (code == 2 and "Interrupted: stopping after" in tail):
        return "killed", tail.splitlines()[-1] if tail else ""
    if code == 0:
        return "survived", tail.splitlines()[-1] if tail else ""
    return "error", f"pytest exit {code}: {tail}"


def interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM too: the `finally` in run_mutant puts the file back


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the mutants whose id starts with this")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per mutant (a hang is a kill)")
    parser.add_argument(
        "--sample", type=int, default=0, metavar="N", help="run N of the chosen mutants, drawn at random"
    )
    parser.add_argument("--seed", type=int, default=0, help="the draw of --sample (the same seed, the same mutants)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers for the folder runs (1: no xdist)")
    parser.add_argument("--no-folders", action="store_true", help="only the named tests: the table's score alone")
    parser.add_argument(
        "--against",
        metavar="PYTEST_ARGS",
        help="run every mutant against these pytest arguments (one string) instead of its own tests, e.g. "
        '"tests/functions --ignore=tests/functions/test_reaper_guards.py": did it survive before its guard?',
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if m.id.startswith(args.only)]
    if 0 < args.sample < len(chosen):
        chosen = sorted(random.Random(args.seed).sample(chosen, args.sample), key=MUTANTS.index)
    if args.list:
        for m in chosen:
            print(f"{m.id:28} {m.file:34} {m.what}")
        return 0
    if not chosen:
        print(f"no mutant id starts with {args.only!r}", file=sys.stderr)
        return 2
    dirty = tracked_changes(root)
    if dirty:
        print("refusing to run: the tree has changes to tracked files (commit or stash them):", file=sys.stderr)
        print("\n".join(f"  {line}" for line in dirty[:20]), file=sys.stderr)
        return 2
    broken = [(m.id, why) for m in chosen if (why := check(m, root)) is not None]
    if broken:
        for mid, why in broken:
            print(f"table error: {mid}: {why}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, interrupt)
    against = shlex.split(args.against) if args.against else None
    tests = against or sorted({t for m in chosen for t in m.tests})
    print(f"baseline: pytest {' '.join(tests)[:100]}... on the unmutated tree", flush=True)
    code, tail = pytest(tests, root, args.timeout * 2)
    if code != 0:
        print(f"the named tests fail without any mutant (exit {code}):\n{tail}", file=sys.stderr)
        return 2
    by_folder = not (args.no_folders or against)
    if by_folder:
        every = sorted({f for m in chosen for f in folders(m)})
        print(f"baseline: pytest {' '.join(every)} on the unmutated tree", flush=True)
        code, tail = pytest([*in_parallel(args.workers), *every], root, args.timeout * 4)
        if code != 0:
            print(f"the folders fail without any mutant (exit {code}):\n{tail}", file=sys.stderr)
            return 2
    table: dict[str, int] = {"killed": 0, "survived": 0, "error": 0}
    suite: dict[str, int] = {"killed": 0, "survived": 0, "error": 0}
    try:
        for mutant in chosen:
            outcome = report(mutant, "tests", root, args.timeout, against)
            table[outcome] += 1
            if by_folder:
                in_folders = [*in_parallel(args.workers), *folders(mutant)]
                # A folder takes minutes where its named tests take seconds: four timeouts before a hang is a kill.
                suite[report(mutant, "folder", root, args.timeout * 4, in_folders)] += 1
    except KeyboardInterrupt:
        print("interrupted: the tree is as it was", file=sys.stderr)
        return 130
    finally:
        left = tracked_changes(root)
        if left:  # never expected: each file is restored in run_mutant's finally
            print(f"WARNING: the tree changed during the run: {left}", file=sys.stderr)
    print(score("by their named tests (the table)", table))
    if by_folder:
        print(score("by the tests of their folders (the suite)", suite))
    return 0 if table["killed"] == len(chosen) and (not by_folder or suite["killed"] == len(chosen)) else 1


def report(mutant: Mutant, against: str, root: Path, timeout_s: float, tests: list[str] | None) -> str:
    """Run one mutant against its tests or `tests`, say how it went; the outcome."""
    start = time.monotonic()
    outcome, detail = run_mutant(mutant, root, timeout_s, tests)
    took = time.monotonic() - start
    print(f"{outcome:8} {against:6} {mutant.id:28} {took:5.1f} s  {mutant.what}", flush=True)
    if outcome != "killed":
        print(f"         {detail}", flush=True)
    return outcome


def score(by: str, results: dict[str, int]) -> str:
    ran = sum(results.values())
    errors = f", {results['error']} errors" if results["error"] else ""
    return (
        f"{ran} mutants {by}: {results['killed']} killed, {results['survived']} survived{errors}"
        f" ({100 * results['killed'] / max(ran, 1):.0f} %)"
    )


if __name__ == "__main__":
    sys.exit(main())
