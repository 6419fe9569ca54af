"""Pod install: what putting gpuc on a pod costs, the bundle (client/onpod/bundle.py) installed with gpuc's own
installer (core/podinstall.py: the probe that finds the image's python3, the unzip, the launcher) against the old
path (a venv and `pip install` of gpuc's wheel WITH its dependencies from the package index), in the same run.

- bundle: its size, the size unpacked, and the wall time of the probe + install on this machine with the oldest
  python3 >= 3.9 here (median of 5, each into a fresh pod root), then the agent's selfcheck through the launcher.
- old path: the dependencies the old wheel declared (pyproject's runtime list), `pip install --target` from this
  machine's package mirror into a fresh folder: its size on disk and its time (once: pip's own cache makes a
  second run lie). Said "not measured" where pip cannot reach the mirror.

Targets: <= 15 MB and <= 5 s; better, nothing from the index at all (the bundle takes nothing).
"""

from __future__ import annotations

import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
RUNS = 5


def oldest_python() -> str:
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    for minor in (9, 10, 11, 12, 13):
        for path in [*sorted(glob.glob(str(pyenv / "versions" / f"3.{minor}.*" / "bin" / f"python3.{minor}"))),
                     f"/usr/bin/python3.{minor}"]:  # fmt: skip
            if os.access(path, os.X_OK):
                return path
    return sys.executable


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def install_once(data: bytes, name: str, python: str, tmp: Path) -> tuple[float, int]:
    from gpuc.core.podinstall import Installer, probe_script, read_probe
    from gpuc.core.podpaths import PodPaths

    paths = PodPaths(tmp)
    paths.code.mkdir(parents=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp)}
    started = time.perf_counter()
    (paths.code / name).write_bytes(data)  # what the upload leaves on the pod
    probe = subprocess.run(["sh", "-c", probe_script(python)], capture_output=True, text=True, env=env)
    found = read_probe(probe.stdout)
    script = Installer(python).script(paths, PurePosixPath(str(paths.code / name)), str(found.path))
    subprocess.run(["sh", "-c", script], check=True, capture_output=True, env=env)
    elapsed = time.perf_counter() - started
    check = subprocess.run([str(paths.python), "-m", "gpuc.instance_side", "selfcheck", "--json"],
                           capture_output=True, text=True, env=env)  # fmt: skip
    if check.returncode != 0:
        raise SystemExit(f"selfcheck failed after the install: {check.stdout}{check.stderr}")
    return elapsed, du(paths.code / "site")


def old_path() -> tuple[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check",
             "--target", tmp, *deps],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            return "not measured", "not measured"
        return f"{du(Path(tmp)) / 1e6:.1f} MB", f"{elapsed:.1f} s"


def main() -> list[tuple[str, str, str]]:
    from gpuc.client.onpod.bundle import build_bundle

    started = time.perf_counter()
    bundle = build_bundle()
    built = time.perf_counter() - started
    python = oldest_python()
    times, unpacked = [], 0
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            elapsed, unpacked = install_once(bundle.data, bundle.filename, python, Path(tmp))
            times.append(elapsed)
    median = statistics.median(times)
    old_size, old_time = old_path()
    version = subprocess.run([python, "-V"], capture_output=True, text=True).stdout.strip()
    return [
        ("pod bundle: size uploaded", f"{len(bundle.data) / 1e6:.2f} MB", f"built in {built:.2f} s on the laptop"),
        ("pod bundle: size unpacked on the pod", f"{unpacked / 1e6:.2f} MB", "<= 15 MB"),
        (f"pod bundle: probe + install ({version}, median of {RUNS})", f"{median:.2f} s", "<= 5 s, no index"),
        ("old path: pip install of the declared dependencies", old_size, "(57 MB in the issue)"),
        ("old path: its time from this machine's package mirror", old_time, "(~14 s in the issue)"),
        ("old path / bundle install time", _ratio(old_time, median), "same run"),
    ]


def _ratio(old: str, new_s: float) -> str:
    try:
        return f"{float(old.split()[0]) / new_s:.0f}x"
    except ValueError:
        return "n/a"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT.parent))
    for row in main():
        print(f"{row[0]:60} {row[1]:>12}  {row[2]}")
