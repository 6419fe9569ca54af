"""Python processes and ssh sessions, from a fake /proc tree and from the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.instance_side.procs import ProcScanner, PythonProc, SimSshProbe, SshScanner, SshSession


def add_proc(
    root: Path,
    pid: int,
    comm: str,
    argv: list[str],
    *,
    ppid: int = 1,
    state: str = "S",
    environ: dict[str, str] | None = None,
    exe: str | None = None,
    stdin: str | None = None,
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 4194304 100 0 0 0\n")
    (d / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in (environ or {}).items()))
    if exe:
        os.symlink(exe, d / "exe")
    if stdin:
        (d / "fd").mkdir()
        os.symlink(stdin, d / "fd" / "0")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    (root / "self").mkdir()  # non-numeric entries are not processes
    return root


def pids(scanner: ProcScanner) -> list[int]:
    return [p.pid for p in scanner.python_procs()]


def test_it_finds_python_however_it_was_started(proc: Path) -> None:
    add_proc(proc, 10, "python3", ["/usr/bin/python3", "train.py"])
    add_proc(proc, 11, "python3.11", ["/usr/local/bin/python3.11", "/usr/local/bin/torchrun", "x.py"])
    add_proc(proc, 12, "pt_main_thread", ["/workspace/.venv/bin/python", "-m", "vllm"])
    add_proc(proc, 13, "trainer", ["trainer"], exe="/usr/bin/python3.10")  # renamed via setproctitle
    add_proc(proc, 14, "bash", ["-bash"], exe="/usr/bin/bash")
    add_proc(proc, 15, "kworker/0:1", [])  # kernel thread: no command line
    assert pids(ProcScanner(proc)) == [10, 11, 12, 13]


def test_it_skips_gpucs_own_processes_and_zombies(proc: Path) -> None:
    add_proc(proc, 20, "python3", ["python3", "-m", "gpuc.instance_side", "agent"])
    add_proc(proc, 21, "python3", ["python3", "-m", "gpuc.instance_side", "run", "--", "python", "t.py"])
    add_proc(proc, 22, "python3", ["python3", "t.py"], state="Z")
    add_proc(proc, 23, "python3", ["python3", "t.py"], ppid=21)
    assert pids(ProcScanner(proc)) == [23]


def test_it_reports_the_kernel_name_never_the_argv(proc: Path) -> None:
    add_proc(proc, 30, "python3", ["python3", "train.py", "--hf-token", "hf_secretsecret"])
    assert ProcScanner(proc).python_procs() == [PythonProc(pid=30, comm="python3")]


def test_a_name_with_spaces_and_parentheses_parses(proc: Path) -> None:
    add_proc(proc, 31, "python3 (x) y", ["python3"])
    assert pids(ProcScanner(proc)) == [31]


def test_in_a_sandbox_only_this_pods_processes_count(proc: Path) -> None:
    add_proc(proc, 40, "python3", ["python3", "a.py"], environ={"GPUC_POD_ID": "lp-mine"})
    add_proc(proc, 41, "python3", ["python3", "b.py"], environ={"GPUC_POD_ID": "lp-other"})
    add_proc(proc, 42, "python3", ["python3", "pytest"], environ={"HOME": "/home/me"})
    add_proc(proc, 43, "python3", ["python3", "c.py"], environ={"GPUC_POD_ID": "lp-mine-too"})
    assert pids(ProcScanner(proc, only_pod="lp-mine")) == [40]


@pytest.fixture
def sandbox_children() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    code = "import time; time.sleep(30)"
    mine = subprocess.Popen(
        [sys.executable, "-c", code], env={**os.environ, "GPUC_POD_ID": "lp-real-proc-test"}
    )
    other = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "GPUC_POD_ID": "lp-somebody"})
    yield mine, other
    for child in (mine, other):
        child.kill()
        child.wait()


def test_it_reads_the_real_proc(
    sandbox_children: tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]],
) -> None:
    mine, _other = sandbox_children
    scanner = ProcScanner(only_pod="lp-real-proc-test")
    deadline = time.monotonic() + 10
    while pids(scanner) != [mine.pid] and time.monotonic() < deadline:
        time.sleep(0.02)  # until the child has exec'd python
    assert pids(scanner) == [mine.pid]


def test_ssh_sessions_are_the_terminals_of_sshd_and_its_shells(proc: Path, tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "pts").mkdir(parents=True)
    for n, atime in ((0, 1_790_000_100.0), (1, 1_790_000_200.0), (2, 1_790_000_300.0)):
        (dev / "pts" / str(n)).touch()
        os.utime(dev / "pts" / str(n), (atime, atime))
    add_proc(proc, 100, "sshd", ["sshd: root@pts/0"])
    add_proc(proc, 101, "bash", ["-bash"], ppid=100, stdin="/dev/pts/0")
    add_proc(proc, 200, "sshd-session", ["sshd-session: root@notty"])  # OpenSSH >= 9.8, no pty
    add_proc(proc, 201, "bash", ["bash", "-c", "make"], ppid=200, stdin="pipe:[1234]")
    add_proc(proc, 300, "sshd", ["sshd: root [priv]"])
    add_proc(proc, 301, "zsh", ["-zsh"], ppid=300, stdin="/dev/pts/1")
    add_proc(proc, 400, "tmux: server", ["tmux"], stdin="/dev/pts/2")  # not an ssh session
    assert SshScanner(proc, dev).sessions() == [
        SshSession("pts/0", 1_790_000_100.0),
        SshSession("pts/1", 1_790_000_200.0),
    ]


def test_a_session_whose_terminal_is_gone_is_skipped(proc: Path, tmp_path: Path) -> None:
    add_proc(proc, 100, "sshd", ["sshd: root@pts/7"])
    assert SshScanner(proc, tmp_path / "dev").sessions() == []


def test_the_sandbox_reads_ssh_sessions_from_the_sim_file(tmp_path: Path) -> None:
    sim = tmp_path / "sim_gpu.json"
    assert SimSshProbe(sim).sessions() == []
    sim.write_text(json.dumps({"ssh_sessions": [{"tty": "pts/3", "last_input": 1_790_000_000}]}))
    assert SimSshProbe(sim).sessions() == [SshSession("pts/3", 1_790_000_000.0)]
