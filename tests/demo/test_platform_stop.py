"""A container stop, as the demo's and the rehearsal's platform does it: when it returns, none of the
container's processes is left, even the ones the kernel had not finished ending at the kill."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpuc.core.podpaths import POD_ROOT_ENV
from gpuc.testkit.platform import Platform


def test_a_stopped_container_leaves_no_process_even_on_a_busy_machine(tmp_path: Path) -> None:
    platform = Platform(tmp_path)
    root = platform.root("p1")
    root.mkdir()
    env = {POD_ROOT_ENV: str(root), "PATH": "/usr/bin:/bin"}
    script = "import time\nwhile True: time.sleep(0.01)"
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env) for _ in range(40)]
    try:
        assert len(platform.processes("p1")) == 40
        assert platform.kill_container("p1") == 40
        assert platform.processes("p1") == []  # killed ones not yet reaped by us are zombies, not processes
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
