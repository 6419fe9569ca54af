"""What a periodic results push costs the pod when nothing changed: results/ holds 10,000 files
(100 folders of 100 small checkpoints and metrics files), pushed once to a file:// bucket; then the push is
run again on the unchanged tree. Measured: the process CPU time of that push (the walk, the stat of every
file, the compare with the last manifest, the manifest written on the pod and at the destination), best of 3.
Target: under 1 s of CPU. Also said: how many files it sent (0: only what changed goes)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from gpuc.core.clock import SystemClock
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.push import IncrementalPush
from gpuc.instance_side.pushmanifest import PushReport

FOLDERS, PER_FOLDER = 100, 100


def make_pod(root: Path) -> PodPaths:
    paths = PodPaths(root / "pod")
    paths.state.mkdir(parents=True)
    old = time.time() - 3600  # written an hour ago: settled
    for f in range(FOLDERS):
        folder = paths.results / f"epoch{f:03d}"
        folder.mkdir(parents=True)
        for i in range(PER_FOLDER):
            path = folder / f"shard{i:03d}.pt"
            path.write_bytes(b"\1" * (64 + i))
            os.utime(path, (old, old))
    return paths


def cpu_of_push(push: IncrementalPush) -> tuple[float, PushReport]:
    start = time.process_time()
    report = push.run()
    return time.process_time() - start, report


def main() -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = make_pod(Path(tmp))
        push = IncrementalPush(FileBucketSync(Path(tmp) / "bucket", "exp", "run01"), paths, SystemClock())
        first_cpu, first = cpu_of_push(push)
        runs = [cpu_of_push(push) for _ in range(3)]
    cpu, report = min(runs, key=lambda r: r[0])
    return [
        (f"push: first push of {first.files:,} files (all sent), CPU", f"{first_cpu:.2f} s", "-"),
        (f"push: unchanged tree of {report.files:,} files, CPU", f"{cpu:.3f} s", "< 1 s"),
        ("push: files sent by that push", f"{report.sent}", "0"),
    ]


if __name__ == "__main__":
    for label, value, target in main():
        print(f"{label:60} {value:>12}  {target}")
