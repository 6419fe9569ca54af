"""A container stop, as the demo's and the rehearsal's platform does it: when it returns, none of the
container's processes is left, even the ones the kernel had not finished ending at the kill; and none of them
saw another die, as none does when the kernel ends a container."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


# Each reads a pipe whose only writer is the other: the other's death is EOF, and it writes what it saw.
PEER = "import os, sys\nos.read(int(sys.argv[1]), 1)\nopen(sys.argv[2], 'w').write('saw its peer die')\n"


def test_no_process_of_a_stopped_container_sees_another_die_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outbid rehearsals' race, made certain: a stop that killed one by one, on a machine busy enough to
    run the survivor between two kills, let a wrapper report its job's 137 as a failed job and lose the
    recovery. Here every signal is followed by 0.3 s, and each of two processes reports its peer's death."""
    platform = Platform(tmp_path)
    root = platform.root("p1")
    root.mkdir()
    env = {POD_ROOT_ENV: str(root), "PATH": "/usr/bin:/bin"}
    a_reads, b_writes = os.pipe()
    b_reads, a_writes = os.pipe()
    peers = [
        subprocess.Popen([sys.executable, "-c", PEER, str(reads), str(root / f"{name}.saw")], env=env, pass_fds=fds)
        for name, reads, fds in (("a", a_reads, (a_reads, a_writes)), ("b", b_reads, (b_reads, b_writes)))
    ]
    for fd in (a_reads, b_writes, b_reads, a_writes):
        os.close(fd)
    real_kill = os.kill

    def busy_kill(pid: int, sig: int) -> None:
        real_kill(pid, sig)
        time.sleep(0.3)

    try:
        while len(platform.processes("p1")) < 2:
            time.sleep(0.01)
        monkeypatch.setattr(os, "kill", busy_kill)
        assert platform.kill_container("p1") == 2
        monkeypatch.undo()
        time.sleep(0.3)  # a survivor's write would have landed by now
        assert platform.processes("p1") == []
        assert not list(root.glob("*.saw")), [p.read_text() for p in root.glob("*.saw")]
    finally:
        for proc in peers:
            with contextlib.suppress(ProcessLookupError):
                real_kill(proc.pid, signal.SIGKILL)
            proc.wait()
