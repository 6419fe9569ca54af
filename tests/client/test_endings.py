"""Every ending named, coded and priced, and gpuc made for pipes: the real `gpuc` in a subprocess against local
pods and the local watchdog (tests/fakes/localworld.py), its stdout and stderr each a pipe of its own, so each test
sees where every line lands (the rented path, RunPod and Vast: tests/client/test_endings_rented.py).

- `gpuc down` while `up --wait` waits: the wait ends with 119 and says so (it was 125, "could not be learnt");
- 3 (not found) and 4 (refused for money or safety), as documented with the rest;
- Ctrl-C before the job started, a step that fails before it, `down`, the wait's Ctrl-C: each says what was
  spent, the ledger's figure;
- data on stdout (the job's output, `ls`), talk on stderr; `2>&1 | tee` keeps both; a run with no terminal at
  all (cron) gets plain progress lines and no cut cells.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.localworld import World, only_run, open_world, wait_for

from gpuc.client.exits import ENDED_BY_DOWN_EXIT, EXIT_CODES_HELP
from gpuc.client.jobs.follow import Follow, report
from gpuc.client.jobs.outcome_file import JobOutcome
from gpuc.client.jobs.podlog import LogPrinter
from gpuc.core.ledger.store import Ledger

HANG = ("python", "-c", "import time; print('started', flush=True); time.sleep(600)")
MONEY = r"\$\d+\.\d{4}"  # under a dollar, four decimals: a short run costs $0.0021, not "$0.00"
README = Path(__file__).resolve().parents[2] / "README.md"
USING = Path(__file__).resolve().parents[2] / "docs" / "using.md"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


def start(world: World, *args: str, **env: str) -> subprocess.Popen[str]:
    """`gpuc ARGS` left running, stdout and stderr each its own pipe, no terminal anywhere."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpuc.client.cli", *args],
        cwd=world.project,
        env={**world.env, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def job_running(world: World) -> bool:
    return "started" in world.gpuc("logs", "exp").stdout


# -- down during a wait ---------------------------------------------------------------------------


def test_down_during_a_wait_ends_it_with_its_own_code_and_words(world: World) -> None:
    up = start(world, "up", "exp", "-y", "--wait", "--", *HANG)
    try:
        assert wait_for(lambda: job_running(world), timeout_s=60), "the job started"
        down = world.gpuc("down", "exp", "--note", "enough")
        out, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
    assert down.returncode == 0, down.stderr
    assert up.returncode == ENDED_BY_DOWN_EXIT == 119, err
    last = err.splitlines()[-1]
    assert "the job did not finish: the pod was ended by `gpuc down` (--note 'enough'), which synced results/" in last
    assert re.search(rf"pod \S+ ran \d+s, {MONEY}; results and log: ", last), last
    assert out == "started\n", "stdout holds the job's output alone"
    # `down` itself says what the pod cost, the ledger's figure once its row is closed.
    (row,) = Ledger(world.settings.ledger).rows()
    assert row.end and "the pod ran " in down.stderr and f"${float(row.cost_usd):.4f} (gpuc ledger)" in down.stderr
    assert down.stdout == ""


# -- 3 and 4 ----------------------------------------------------------------------------------------


def test_not_found_exits_3_and_a_refusal_for_money_exits_4(world: World) -> None:
    missing = world.gpuc("down", "no-such-pod")
    assert missing.returncode == 3 and "no pod, run or experiment 'no-such-pod'" in missing.stderr
    over = world.gpuc("up", "exp", "-y", "--", "python", "train.py", GPUC_MONTHLY_BUDGET="0.5")
    assert over.returncode == 4, over.stderr  # $0.44/h x 12 h would cross a $0.50 month
    assert "budget" in over.stderr and world.provider().list_pods() == []


def test_every_code_is_documented_where_the_user_looks(world: World) -> None:
    """README's table, docs/using.md's and `gpuc up --help` name each code gpuc exits with."""
    codes = ("| 1 |", "| 2 |", "| 3 |", "| 4 |", "| 70 |", "| 119 |", "| 120 |", "| 125 |", "| 130 |")
    for doc in (README, USING):
        text = doc.read_text(encoding="utf-8")
        assert all(code in text for code in codes), (doc, [c for c in codes if c not in text])
    shown = " ".join(world.gpuc("up", "--help").stdout.split())
    assert " ".join(EXIT_CODES_HELP.split()) in shown
    for words in ("3 not found", "4 refused for money or safety", "119 the pod was ended by gpuc down"):
        assert words in EXIT_CODES_HELP


def test_a_job_killed_by_down_read_on_the_pod_before_it_ended_still_exits_119(world: World) -> None:
    """Under load `--wait` may read the job's death under `down`'s destroy (137) on the pod before the pod is gone;
    the destination down synced first has no exit code: the end on record is `gpuc down`'s, 119, not 137."""
    assert world.gpuc("up", "exp", "-y", "--", *HANG).returncode == 0
    assert wait_for(lambda: job_running(world), timeout_s=60), "the job started"
    (pod,) = world.provider().list_pods()
    deps = world.deps()
    run = deps.runs.find(pod.id)
    assert world.gpuc("down", "exp").returncode == 0
    died = JobOutcome(job_id=None, exit_code=137, duration_s=14.0)  # what the follow loop read before the pod went
    state = Follow(LogPrinter(io.BytesIO(), []), outcome=died, gone=True)
    result = report(deps, pod, run, state, job_id=None, since=run.created_at)
    assert result.exit_code == ENDED_BY_DOWN_EXIT, result.line
    assert "the pod was ended by `gpuc down`" in result.line and "137" not in result.line


# -- endings before the job, priced ---------------------------------------------------------------


def test_ctrl_c_before_the_job_started_destroys_and_says_what_was_spent(world: World) -> None:
    up = start(world, "up", "exp", "-y", "--", "python", "train.py", GPUC_LOCAL_BOOT_S="60")
    try:
        assert wait_for(lambda: bool(Ledger(world.settings.ledger).rows()), timeout_s=60), "registered, on record"
        up.send_signal(signal.SIGINT)
        _, err = up.communicate(timeout=120)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 130, err
    assert world.provider().list_pods() == []
    (row,) = Ledger(world.settings.ledger).rows()
    said = re.search(rf"up ended early: Ctrl-C \(SIGINT\); destroyed (\S+) \(\S+\); it ran \d+s, ({MONEY})", err)
    assert said is not None, err
    assert said.group(2) == f"${float(row.cost_usd):.4f}", "the ledger's figure"
    # The watchdog records the end as `up`'s, with why: the status page says so, not "ended by `gpuc down`".
    (record,) = world.deps().watchdog.status().pods
    assert (record.ended_by, record.note) == ("up", "up stopped early: Ctrl-C (SIGINT)")


def test_a_step_that_fails_before_the_job_says_what_was_spent(world: World) -> None:
    """The same ending as a failed install (requirements.txt on a rented pod): `up` destroys the fresh pod,
    then says what it cost."""
    done = world.gpuc("up", "exp", "-y", "--", "python", "repo/train.py", GPUC_GIT_REMOTE="file:///nowhere")
    assert done.returncode == 2, done.stderr
    assert re.search(rf"destroyed \S+ \(\S+\); it ran \d+s, {MONEY}", done.stderr), done.stderr
    assert only_run(world).phase == "failed"


def test_ctrl_c_during_the_wait_says_what_the_running_job_costs_so_far(world: World) -> None:
    up = start(world, "up", "exp", "-y", "--wait", "--", *HANG)
    try:
        assert wait_for(lambda: job_running(world), timeout_s=60)
        up.send_signal(signal.SIGINT)
        _, err = up.communicate(timeout=60)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 130, err
    last = err.splitlines()[-1]
    assert "stopped waiting; the job goes on" in last
    assert re.search(rf"; {MONEY} so far \(\d+s at \$0\.4400/h\)$", last), last
    assert len(world.provider().list_pods()) == 1, "the job goes on"


# -- made for pipes -------------------------------------------------------------------------------


def test_data_on_stdout_talk_on_stderr(world: World) -> None:
    """`gpuc up ... --wait > job.log` keeps the job's output alone; every line of gpuc's is on stderr."""
    done = world.gpuc("up", "exp", "-y", "--wait", "--", "python", "train.py", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "epoch 1 loss 0.9\na warning\ndone\n"
    for said in (
        "price:",
        "creating ",
        "running after",
        "ready:",
        "job STARTED",
        "waiting for the job",
        "job exited with code 0",
    ):
        assert said in done.stderr, said
    assert re.search(rf"job exited with code 0 after \S+; pod \S+ ran \S+, {MONEY}; results and log: ", done.stderr)
    listed = world.gpuc("ls")
    assert listed.stdout.startswith("no pods") and listed.stderr == "", "a command's data: stdout"


def test_up_2_and_1_through_tee_keeps_every_line(world: World, tmp_path: Path) -> None:
    """The shell pipeline a user writes to keep a run's record: both streams, in order, into the file."""
    log = tmp_path / "run.log"
    gpuc = f"{sys.executable} -m gpuc.client.cli"
    done = subprocess.run(
        ["sh", "-c", f"{gpuc} up exp -y --wait -- python train.py 3 2>&1 | tee {log}; exit $(( $? ))"],
        cwd=world.project,
        env=world.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    kept = log.read_text()
    assert kept == done.stdout
    lines = kept.splitlines()
    price = next(i for i, line in enumerate(lines) if line.startswith("price:"))
    output = lines.index("epoch 1 loss 0.9")
    ended = next(i for i, line in enumerate(lines) if "job exited with code 3" in line)
    assert price < output < ended == len(lines) - 1, kept
    assert re.search(rf"; pod \S+ ran \S+, {MONEY}; results and log: ", lines[ended])


def test_a_cron_run_gets_plain_progress_lines_and_nothing_cut(world: World, tmp_path: Path) -> None:
    """No terminal at all: no stdin, stdout and stderr into files, a session of its own (no controlling tty).
    A boot that takes a while says so every GPUC_PROGRESS_EVERY_S in a line of its own (no `\\r`), and `ls`
    prints every cell whole."""
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as o, err.open("w") as e:
        code = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuc.client.cli",
                "up",
                "a-cron-job-with-a-rather-long-experiment-name",
                "-y",
                "--",
                "python",
                "train.py",
                "0",
                "120",
            ],
            cwd=world.project,
            env={**world.env, "GPUC_LOCAL_BOOT_S": "3", "GPUC_PROGRESS_EVERY_S": "1"},
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e,
            start_new_session=True,
            timeout=120,
            check=False,
        ).returncode
    said = err.read_text()
    assert code == 0, said
    assert "\r" not in said and out.read_text() == ""
    assert re.search(r"^  still booting \(\d s\): \w+$", said, re.MULTILINE), said
    with out.open("w") as o:
        subprocess.run(
            [sys.executable, "-m", "gpuc.client.cli", "ls"],
            cwd=world.project,
            env=world.env,
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            timeout=60,
            check=True,
        )
    listed = out.read_text()
    assert "…" not in listed and "a-cron-job-with-a-rather-long-experiment-name" in listed, listed
    assert re.search(r"deadline in 11h5\dm; busy", listed), listed  # NEXT, whole


def test_no_terminal_means_no_progress_on_a_terminal_means_no_plain_lines() -> None:
    """The rule itself: gpuc asks stderr, not stdout (`up | tee` keeps a terminal for gpuc's lines)."""
    probe = "from gpuc.client.progress import plain_stderr; print(plain_stderr())"
    piped = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert piped.stdout.strip() == "True"
    if os.path.exists("/dev/tty") and os.isatty(0):  # only where the test run has a terminal to hand
        with open("/dev/tty", "w") as tty:
            on_tty = subprocess.run([sys.executable, "-c", probe], stdout=subprocess.PIPE, stderr=tty, text=True)
        assert on_tty.stdout.strip() == "False"
