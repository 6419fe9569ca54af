"""The user's processes, ssh sessions and the job's process tree, from a fake /proc tree and from the real one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.pod import ANY_GROWTH, settled

from gpuc.instance_side import procfs
from gpuc.instance_side.idle import Thresholds, job_activity, procs_activity
from gpuc.instance_side.jobtree import JobScanError, JobTreeProbe, job_stamp, read_job_stamp
from gpuc.instance_side.podfiles import AgentConfig
from gpuc.instance_side.procfs import ProcCounters
from gpuc.instance_side.procs import ProcScanError, ProcScanner
from gpuc.instance_side.sshscan import SimSshProbe, SshScanner, SshSession
from gpuc.testkit.podfakes import FakeProcTree


@pytest.fixture
def proc(tmp_path: Path) -> FakeProcTree:
    return FakeProcTree(tmp_path / "proc")


def pids(scanner: ProcScanner, skip: tuple[int, ...] = ()) -> list[int]:
    return sorted(p.pid for p in scanner.sample(skip).procs.values())


def test_every_user_process_counts_python_or_not(proc: FakeProcTree) -> None:
    proc.add(10, "python3", ["/usr/bin/python3", "train.py"])
    proc.add(11, "python3.11", ["/usr/local/bin/python3.11", "/usr/local/bin/torchrun", "x.py"])
    proc.add(12, "pt_main_thread", ["/workspace/.venv/bin/python", "-m", "vllm"])
    proc.add(13, "trainer", ["trainer"], exe="/usr/bin/python3.10")  # renamed via setproctitle
    proc.add(14, "bash", ["-bash"], exe="/usr/bin/bash")
    proc.add(15, "train", ["./train", "--steps", "9"], exe="/workspace/train")  # `nohup ./train &` over ssh
    table = ProcScanner(proc.root).sample()
    assert sorted(p.pid for p in table.procs.values()) == [10, 11, 12, 13, 14, 15]
    assert sorted(p.pid for p in table.procs.values() if p.python) == [10, 11, 12, 13]


def test_it_leaves_out_the_kernel_pid_1_gpucs_own_and_zombies(proc: FakeProcTree) -> None:
    proc.add(1, "bash", ["/bin/bash", "/start.sh"])  # the container's init
    proc.add(2, "kthreadd", [])
    proc.set(2, flags=0x00208040)  # PF_KTHREAD: a kernel thread (visible outside a container)
    proc.add(20, "python3", ["python3", "-m", "gpuc.instance_side", "agent"])
    proc.add(21, "python3", ["python3", "-m", "gpuc.instance_side", "run", "--", "python", "t.py"])
    proc.add(22, "python3", ["python3", "t.py"], state="Z")
    proc.add(23, "python3", ["python3", "t.py"], ppid=21)
    assert pids(ProcScanner(proc.root)) == [23]
    assert pids(ProcScanner(proc.root), skip=(23,)) == []  # the job's tree: judged on its own


@pytest.mark.parametrize(
    ("comm", "argv"),
    [
        ("sleep", ["sleep", "infinity"]),
        ("tail", ["tail", "-f", "/dev/null"]),
        ("nginx", ["nginx: worker process"]),
        ("sshd", ["sshd: root@pts/0"]),
        ("sshd-session", ["sshd-session: root@notty"]),
        ("cron", ["/usr/sbin/cron", "-f"]),
        ("jupyter-lab", ["/usr/bin/python3", "/usr/local/bin/jupyter-lab", "--allow-root"]),
        ("python3", ["python3", "-m", "jupyterlab", "--port", "8888"]),
        ("python3", ["/usr/bin/python3", "-X", "utf8", "/usr/bin/supervisord", "-n"]),
        ("tmux: server", ["tmux", "new", "-d"]),
        ("htop", ["htop"]),
        ("nvidia-smi", ["nvidia-smi", "-l", "1"]),
    ],
)
def test_the_pod_images_infrastructure_is_not_the_users_work(proc: FakeProcTree, comm: str, argv: list[str]) -> None:
    proc.add(30, comm, argv)
    proc.add(31, "python3", ["python3", "-m", "ipykernel_launcher", "-f", "k.json"], ppid=30)  # what it runs for you
    assert pids(ProcScanner(proc.root)) == [31]


def test_what_watch_runs_is_watching_too(proc: FakeProcTree) -> None:
    """`watch nvidia-smi` left in tmux: a new nvidia-smi every 2 s, each "just seen" by any check that
    catches one; the pod would stay busy for as long as it is left."""
    proc.add(60, "tmux: server", ["tmux", "new", "-d"])
    proc.add(61, "bash", ["-bash"], ppid=60)
    proc.add(62, "watch", ["watch", "-n", "2", "nvidia-smi"], ppid=61)
    proc.add(63, "sh", ["sh", "-c", "nvidia-smi"], ppid=62)
    proc.add(64, "nvidia-smi", ["nvidia-smi"], ppid=63)
    proc.add(65, "python3", ["python3", "train.py"], ppid=61)  # beside it, in the same shell: the user's
    assert pids(ProcScanner(proc.root)) == [61, 65]


def test_it_reports_the_kernel_name_never_the_argv(proc: FakeProcTree) -> None:
    proc.add(30, "python3", ["python3", "train.py", "--hf-token", "hf_secretsecret"])
    [found] = ProcScanner(proc.root).sample().procs.values()
    assert (found.pid, found.comm) == (30, "python3") and "hf_" not in repr(found)


def test_a_name_with_spaces_and_parentheses_parses(proc: FakeProcTree) -> None:
    proc.add(31, "python3 (x) y", ["python3"])
    proc.set(31, utime=7, wchar=5)
    [found] = ProcScanner(proc.root).sample().procs.values()
    assert found.comm == "python3 (x) y" and found.counters == ProcCounters(7, 5)


def test_in_a_sandbox_only_this_pods_processes_count(proc: FakeProcTree) -> None:
    proc.add(40, "python3", ["python3", "a.py"], environ={"GPUC_POD_ID": "lp-mine"})
    proc.add(41, "python3", ["python3", "b.py"], environ={"GPUC_POD_ID": "lp-other"})
    proc.add(42, "python3", ["python3", "pytest"], environ={"HOME": "/home/me"})
    proc.add(43, "python3", ["python3", "c.py"], environ={"GPUC_POD_ID": "lp-mine-too"})
    proc.add(44, "sh", ["sh", "-c", "read x"], environ={"GPUC_POD_ID": "lp-mine"})
    assert pids(ProcScanner(proc.root, only_pod="lp-mine")) == [40, 44]


def test_a_process_it_may_not_read_is_uncertain_only_when_it_could_be_the_users(
    proc: FakeProcTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hidepid, or another user's process: the kernel's refusal played back (root reads every stat)."""
    proc.add(50, "python3", ["python3", "t.py"])
    proc.add(51, "curl", ["curl", "-O", "x"], io=False)  # /proc/51/io needs ptrace rights
    denied = f"{proc.root}/50/stat"

    def open_(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path) == denied:
            raise PermissionError(13, "Permission denied", str(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(procfs, "open", open_, raising=False)
    table = ProcScanner(proc.root).sample()
    assert table.unreadable == (50,) and [p.counters.io_bytes for p in table.procs.values()] == [None]
    [unreadable_io, unreadable_stat] = procs_activity(table, table)
    th = Thresholds(5.0, 900.0, 1200.0, 600.0, 60.0, cpu_floor_s=0.1, io_floor_bytes=16384)
    assert unreadable_io.progressing(th) and unreadable_stat.progressing(th)
    # A sandbox counts only what it can prove is its own pod's.
    assert ProcScanner(proc.root, only_pod="lp-x").sample().unreadable == ()


def test_a_proc_it_cannot_list_is_a_failed_scan(tmp_path: Path) -> None:
    with pytest.raises(ProcScanError, match="cannot list"):
        ProcScanner(tmp_path / "no-proc").sample()


@pytest.fixture
def sandbox_children() -> Iterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]]:
    code = "import time; time.sleep(30)"
    mine = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "GPUC_POD_ID": "lp-real-proc-test"})
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
    [found] = scanner.sample().procs.values()
    assert found.python and found.counters.io_bytes is not None and found.counters.cpu_ticks >= 0


def test_ssh_sessions_are_the_terminals_of_sshd_and_its_shells(proc: FakeProcTree, tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "pts").mkdir(parents=True)
    for n, atime in ((0, 1_790_000_100.0), (1, 1_790_000_200.0), (2, 1_790_000_300.0)):
        (dev / "pts" / str(n)).touch()
        os.utime(dev / "pts" / str(n), (atime, atime))
    proc.add(100, "sshd", ["sshd: root@pts/0"])
    proc.add(101, "bash", ["-bash"], ppid=100, stdin="/dev/pts/0")
    proc.add(200, "sshd-session", ["sshd-session: root@notty"])  # OpenSSH >= 9.8, no pty
    proc.add(201, "bash", ["bash", "-c", "make"], ppid=200, stdin="pipe:[1234]")
    proc.add(300, "sshd", ["sshd: root [priv]"])
    proc.add(301, "zsh", ["-zsh"], ppid=300, stdin="/dev/pts/1")
    proc.add(400, "tmux: server", ["tmux"], stdin="/dev/pts/2")  # not an ssh session
    assert SshScanner(proc.root, dev).sessions() == [
        SshSession("pts/0", 1_790_000_100.0),
        SshSession("pts/1", 1_790_000_200.0),
    ]


def test_a_session_whose_terminal_is_gone_is_skipped(proc: FakeProcTree, tmp_path: Path) -> None:
    proc.add(100, "sshd", ["sshd: root@pts/7"])
    assert SshScanner(proc.root, tmp_path / "dev").sessions() == []


def test_the_sandbox_reads_ssh_sessions_from_the_sim_file(tmp_path: Path) -> None:
    sim = tmp_path / "sim_gpu.json"
    assert SimSshProbe(sim).sessions() == []
    sim.write_text(json.dumps({"ssh_sessions": [{"tty": "pts/3", "last_input": 1_790_000_000}]}))
    assert SimSshProbe(sim).sessions() == [SshSession("pts/3", 1_790_000_000.0)]


# -- the job under the wrapper: its process tree and its counters -------------------------------------
def test_the_job_tree_is_the_job_and_its_descendants_only(proc: FakeProcTree, tmp_path: Path) -> None:
    proc.add(100, "python3", ["python3", "-m", "gpuc.instance_side", "run", "--", "sh", "build.sh"])  # wrapper
    proc.add(200, "sh", ["sh", "build.sh"], ppid=100, start=7000)
    proc.add(201, "make", ["make", "-j2"], ppid=200, start=7001)
    proc.add(202, "cc1", ["cc1"], ppid=201, start=7002, state="R")
    proc.add(203, "ld", ["ld"], ppid=201, start=7003, state="Z")  # ended, not yet reaped: still its own time
    proc.add(300, "postgres", ["postgres"], start=10)  # busy, but not the job's
    proc.set(202, utime=40, stime=2, rchar=4096, wchar=100)
    proc.set(201, cutime=30, cstime=5)  # children it already reaped
    proc.set(203, utime=7)
    proc.set(300, utime=99_999, wchar=10**9)
    job_file = tmp_path / "job.pid"
    job_file.write_text(job_stamp(200, proc.root))
    assert read_job_stamp(job_file) == (200, 7000)
    tree = JobTreeProbe(job_file, proc.root).sample()
    assert tree is not None and tree.pid == 200
    assert tree.procs == {
        (200, 7000): ProcCounters(0, 0),
        (201, 7001): ProcCounters(35, 0),
        (202, 7002): ProcCounters(42, 4196),
        (203, 7003): ProcCounters(7, 0),
    }


def test_no_job_a_finished_job_and_a_reused_pid_are_no_job(proc: FakeProcTree, tmp_path: Path) -> None:
    job_file = tmp_path / "job.pid"
    probe = JobTreeProbe(job_file, proc.root)
    assert probe.sample() is None  # no job under the wrapper
    job_file.write_text("200 7000\n")
    assert probe.sample() is None  # the job is gone (the wrapper ends the pod)
    proc.add(200, "nginx", ["nginx"], start=9999)
    assert probe.sample() is None  # a crash left the file; the pid now belongs to someone else
    job_file.write_text("200\n")  # an old wrapper's file, without the start time: taken as is
    tree = probe.sample()
    assert tree is not None and list(tree.procs) == [(200, 9999)]


@pytest.mark.parametrize("content", ["", "two hundred", "200 7000 1", "-5"])
def test_a_garbled_job_file_is_a_failed_scan(proc: FakeProcTree, tmp_path: Path, content: str) -> None:
    job_file = tmp_path / "job.pid"
    job_file.write_text(content)
    with pytest.raises(JobScanError, match="not a pid"):
        JobTreeProbe(job_file, proc.root).sample()


def test_an_unreadable_proc_or_job_stat_is_a_failed_scan_never_no_job(proc: FakeProcTree, tmp_path: Path) -> None:
    job_file = tmp_path / "job.pid"
    job_file.write_text("200\n")
    with pytest.raises(JobScanError, match="cannot list"):
        JobTreeProbe(job_file, tmp_path / "no-proc").sample()
    (proc.root / "200").mkdir()  # listed, but its stat cannot be read (hidepid, a permission change)
    with pytest.raises(JobScanError, match="cannot be read"):
        JobTreeProbe(job_file, proc.root).sample()


def test_unreadable_io_is_read_as_unknown_never_as_zero(proc: FakeProcTree, tmp_path: Path) -> None:
    proc.add(200, "curl", ["curl"], start=5, io=False)
    proc.set(200, utime=3)
    job_file = tmp_path / "job.pid"
    job_file.write_text("200 5\n")
    tree = JobTreeProbe(job_file, proc.root).sample()
    assert tree is not None and tree.procs == {(200, 5): ProcCounters(3, None)}


def start_job(tmp_path: Path, script: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A real non-python job in its own process group, its pid file written as the wrapper writes it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    job_file = tmp_path / "job.pid"
    job = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    try:
        job_file.write_text(job_stamp(job.pid))
    except BaseException:
        stop_job(job)
        raise
    return job, job_file


def stop_job(job: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)  # the job and everything it started: its own group
    job.wait()


def test_a_real_shell_pipeline_grows_and_a_real_sleep_does_not(tmp_path: Path) -> None:
    # The outer shell waits; its children do the work: CPU in one, I/O through a pipe in the other.
    spin_and_pipe = "sh -c 'while :; do :; done' & head -c 65536 /dev/zero | cat >/dev/null; wait"
    busy, busy_file = start_job(tmp_path / "busy", spin_and_pipe)
    try:
        asleep, asleep_file = start_job(tmp_path / "asleep", "sleep 1000")
    except BaseException:
        stop_job(busy)
        raise
    try:
        busy_probe, asleep_probe = JobTreeProbe(busy_file), JobTreeProbe(asleep_file)
        first_asleep = settled(asleep_probe)  # past its start-up (exec, the loader reading libc)
        first_busy = busy_probe.sample()
        assert first_busy is not None
        deadline = time.monotonic() + 20
        while True:  # until the spinning child has been charged a clock tick (10 ms of CPU)
            later = busy_probe.sample()
            assert later is not None
            activity = job_activity(first_busy, later)
            if activity.cpu_ticks > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert activity.progressing(ANY_GROWTH) and not activity.first and activity.cpu_ticks > 0
        assert len(later.procs) >= 2  # the job and its descendants, from the real ppid links
        time.sleep(0.1)
        still = asleep_probe.sample()
        assert still is not None
        quiet = job_activity(first_asleep, still)
        assert not quiet.progressing(ANY_GROWTH) and (quiet.cpu_ticks, quiet.io_bytes) == (0, 0)
    finally:
        stop_job(busy)
        stop_job(asleep)


HUNG_JOBS = {
    "lock": [
        sys.executable,
        "-c",
        "import threading\nprint('ready', flush=True)\nthreading.Lock().acquire()\n"
        "lock = threading.Lock()\nlock.acquire()\nlock.acquire()",
    ],
    "input": [sys.executable, "-c", "print('ready', flush=True)\ninput()"],
    "shell": ["sh", "-c", "echo ready; read x"],
}


def test_on_the_real_proc_a_blocked_job_makes_no_progress_and_a_busy_loop_does() -> None:
    """The product's floors on real processes: blocked in a lock, in input(), in a shell's read (stdin held
    open) -- and a busy loop beside them."""
    env = {**os.environ, "GPUC_POD_ID": "lp-real-hang-test"}
    argvs = [*HUNG_JOBS.values(), [sys.executable, "-c", "print('ready', flush=True)\nwhile True: pass"]]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for argv in argvs:
            procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env))
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # past start-up
        *hung, busy = procs
        scanner = ProcScanner(only_pod="lp-real-hang-test")
        cfg = AgentConfig(pod_id="p", provider="runpod", experiment="e", run_id="r", watchdog_url="x")
        th = Thresholds.from_config(cfg)
        first = scanner.sample()
        assert {p.pid for p in procs} <= {key[0] for key in first.procs}
        deadline = time.monotonic() + 30
        while True:  # until the busy loop has been charged more than the floor, however loaded the machine
            later = scanner.sample()
            trees = {t.pid: t for t in procs_activity(first, later)}
            if trees[busy.pid].progressing(th) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert trees[busy.pid].progressing(th)
        assert [trees[p.pid].progressing(th) for p in hung] == [False, False, False]
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()  # reaps it and closes its pipes


def test_a_rented_pod_in_a_sandbox_counts_only_what_runs_in_its_root(proc: FakeProcTree) -> None:
    """The rehearsal's emulated pods share the machine: the host's busy processes are not
    the pod's work; what its ssh prelude started (GPUC_POD_ROOT=<its root>) is."""
    root = Path("/tmp/rehearse/sshd/pods/abc")
    proc.add(70, "python3", ["python3", "train.py"], environ={"GPUC_POD_ROOT": str(root)})
    proc.add(71, "python3", ["python3", "host_build.py"], environ={"HOME": "/home/me"})
    proc.add(72, "python3", ["python3", "other.py"], environ={"GPUC_POD_ROOT": f"{root}-2"})
    assert pids(ProcScanner(proc.root, only_root=root)) == [70]


def test_the_agent_scopes_its_scan_to_its_sandbox_and_not_on_a_real_pod(tmp_path: Path) -> None:
    from gpuc.instance_side.context import default_probes
    from gpuc.instance_side.podfiles import PodPaths

    cfg = AgentConfig(pod_id="p", provider="runpod", experiment="e", run_id="r", watchdog_url="x")
    sandboxed = default_probes(cfg, PodPaths(tmp_path / "pods" / "p")).procs
    real = default_probes(cfg, PodPaths(Path("/"))).procs
    assert isinstance(sandboxed, ProcScanner) and isinstance(real, ProcScanner)
    env = {k: v for k, v in os.environ.items() if k != "GPUC_POD_ROOT"}
    host = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        deadline = time.monotonic() + 10
        while host.pid not in pids(real) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert host.pid in pids(real)  # a real pod's machine is the pod: every user process counts
        assert host.pid not in pids(sandboxed)  # a sandbox's host is not
    finally:
        host.kill()
        host.wait()
