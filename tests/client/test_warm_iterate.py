"""A warm pod iterated on five times, as a user would: `up --warm 1m`, then `run --sync --wait` four
times with an edit, a crash and a `--clean` among them; reading every start line, `--wait`'s last line, `ls`,
the status page, the phone's pushes and each job's own log; the budget holding one job and the warm time for
the pod, not 12 h. The real CLI against local pods and the local watchdog (tests/fakes/localworld.py)."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.localworld import World, only_run, open_world, wait_for

from gpuc.core.notify.notifier import read_outbox

# A resumable script: it resumes from what results/ holds (a checkpoint per run), sleeps quietly (no CPU, no
# I/O: what the idle watch once called "hung?"), and crashes when asked.
TRAIN = """\
import os, sys, time
os.makedirs("results", exist_ok=True)
n = len([f for f in os.listdir("results") if f.startswith("ckpt")])
print(f"resuming from {n} checkpoints", flush=True)
open(f"results/ckpt{n}.txt", "w").write("x" * (n + 1))
time.sleep(4)
if sys.argv[1:] == ["crash"]:
    raise RuntimeError(f"boom in run {n}")
print("done", flush=True)
"""


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        (opened.project / "train.py").write_text(TRAIN)
        yield opened


def rows(world: World) -> list[dict[str, object]]:
    listed = world.gpuc("ls", "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)  # type: ignore[no-any-return]


def test_a_warm_pod_iterated_on_five_times(world: World) -> None:
    budget: dict[str, Any] = {"GPUC_MONTHLY_BUDGET": "3"}  # a 12 h reserve ($5.28) would refuse the pod itself
    first = world.gpuc("up", "exp", "-y", "--warm", "1m", "--wait", "--", "python", "train.py", **budget)
    assert first.returncode == 0, first.stderr
    said = first.stdout + first.stderr
    assert "warm pod: the budget holds $0.45 for it, one job of up to 1h00m (GPUC_WARM_JOB_HOURS) and its 1m" in said
    assert "stays warm: with no job for 1m it ends itself" in said and "destroys itself" not in said
    assert "resuming from 0 checkpoints" in first.stdout
    pod_id = only_run(world).pod_id
    assert f"stays warm, billing until it has had no job for 1m: gpuc run {pod_id} --sync --wait" in first.stderr

    runs = [  # edit, rerun; a crash; the fix; a clean start
        ("print('edit 1')\n", [], 0),
        ("", ["crash"], 1),
        ("print('fixed')\n", [], 0),
        ("", ["--clean"], 0),
    ]
    for n, (edit, extra, code) in enumerate(runs, start=2):
        (world.project / "train.py").write_text(TRAIN + edit)
        args = [a for a in extra if a == "--clean"]
        tail = [a for a in extra if a != "--clean"]
        again = world.gpuc("run", "exp", "--sync", *args, "--wait", "--", "python", "train.py", *tail, **budget)
        assert again.returncode == code, again.stderr
        said = again.stdout + again.stderr
        assert "warm pod: deadline " in said and "this job's 1h00m and 1m warm" in said, said
        assert "stays warm: with no job for 1m it ends itself" in said
        assert [p.id for p in world.provider().list_pods()] == [pod_id], f"run {n}: the same pod, kept warm"
        if extra == ["--clean"]:
            assert f"results/ on {pod_id}: 4 file(s) removed" in said and "resuming from 0 checkpoints" in said
        else:
            assert f"resuming from {n - 1} checkpoints" in again.stdout, "results/ carries over between jobs"

    # Five jobs: no idle warning while any of them ran (each slept 4 s, quiet), none said "hung?".
    warnings = [m for m in read_outbox(world.home / "outbox.jsonl") if m.kind == "idle_warning"]
    assert not any("hung?" in m.message for m in warnings), [m.message for m in warnings]
    outbox = read_outbox(world.home / "outbox.jsonl")
    pushes = [m for m in outbox if m.kind == "job_exit"]
    assert len(pushes) == 5 and all("stays warm for the next job" in m.message for m in pushes)
    assert [m.title for m in outbox if m.kind == "deadline"] == [], "a run's deadline move is no push of its own"

    # ls and the status page say the same: warm, no job, when it ends.
    assert wait_for(lambda: rows(world)[0].get("busy") is False, timeout_s=20), rows(world)
    (row,) = rows(world)
    assert row["warm_s"] == 60.0 and row["job_running"] is False
    assert isinstance(row["idle_destroy_in_s"], int) and row["idle_destroy_in_s"] <= 60
    table = world.gpuc("ls", COLUMNS="250").stdout
    assert re.search(r"warm 1m: no job for \d+s, ends in \d+s; deadline in 1h0\dm", table), table
    page = status_page(world)
    assert "kept 60 s after each job, for the next `gpuc run`" in page, page
    assert re.search(r"warm, no job: ends itself at \d\d:\d\d UTC \((in \d+ s|now)\)", page), page

    # Every job's own log, at the destination: the crash's traceback outlives the runs after it.
    listed = world.gpuc("logs", "exp", "--jobs")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[-1] for line in listed.stdout.splitlines()[1:]] == ["0", "0", "1", "0", "0"], listed.stdout
    crash = world.gpuc("logs", "exp", "--job", "3")
    assert crash.returncode == 0, crash.stderr
    assert "RuntimeError: boom in run 2" in crash.stdout and "exited with code 1" in crash.stderr
    latest = world.gpuc("logs", "exp")
    assert "resuming from 0 checkpoints" in latest.stdout and "boom" not in latest.stdout

    # `gpuc results` brings every job's log with results/, then ends the pod.
    got = world.gpuc("results", "exp", "--to", str(world.home.parent / "got"))
    assert got.returncode == 0, got.stderr
    copied = world.home.parent / "got"
    assert sorted(p.name for p in (copied / "logs" / "jobs").glob("*.log")) == sorted(
        f"{line.split()[1]}.log" for line in listed.stdout.splitlines()[1:]
    )
    assert (copied / "results" / "ckpt0.txt").exists() and (copied / "logs" / "job.log").exists()
    assert world.provider().list_pods() == []


def status_page(world: World) -> str:
    """The phone's status page, as `gpuc page` links it, its text without the markup."""
    link = world.gpuc("page", "--for", "1h")
    assert link.returncode == 0, link.stderr
    found = re.search(r"http://\S+/p/\S+", link.stdout + link.stderr)
    assert found is not None, link.stdout
    page = httpx.get(found.group(0), timeout=10)
    assert page.status_code == 200
    return html.unescape(re.sub(r"<[^>]+>", " ", page.text))


def test_a_second_job_while_one_runs_is_refused_in_a_warm_pods_words(world: World) -> None:
    up = world.gpuc("up", "exp", "-y", "--warm", "1m", "--", "python", "-c", "import time; time.sleep(120)")
    assert up.returncode == 0, up.stderr
    pod_id = only_run(world).pod_id
    second = world.gpuc("run", "exp", "--", "python", "train.py")
    assert second.returncode == 4, second.stderr
    assert f"pod {pod_id}: a job is still running on it" in second.stderr
    assert "a warm pod runs one job at a time (two would share results/ and its log)" in second.stderr
    assert "would destroy the pod" not in second.stderr
    cleaning = world.gpuc("run", "exp", "--clean", "--force", "--", "python", "train.py")
    assert cleaning.returncode == 4 and "--clean would empty results/ under it" in cleaning.stderr
    assert world.gpuc("down", pod_id).returncode == 0


def test_a_clean_the_pod_refuses_starts_no_job_and_says_nothing_was_deleted() -> None:
    """`run --clean` on a pod whose push failed: the pod's reason, and that nothing was deleted (the laptop's half;
    the pod's rules are tests/instance_side/test_clean_results.py)."""
    from test_ask_reader import POD, Pod1, answer

    from gpuc.client.pods.run import clean_results
    from gpuc.core.errors import SafetyRefusal

    refused = answer("clean-results", error="the push to s3://b/x failed: AccessDenied")
    with pytest.raises(SafetyRefusal) as caught:
        clean_results(Pod1(refused, code=3), POD)
    assert caught.value.message == (
        "results/ on p1 was not emptied: the push to s3://b/x failed: AccessDenied; nothing was deleted and no job "
        "started"
    )
    done = answer(
        "clean-results",
        removed=3,
        removed_bytes=300,
        kept=["fresh.txt (not at the destination as it is now)"],
        kept_count=1,
        destination="file:///b/exp/r1",
    )
    said = clean_results(Pod1(done), POD)
    assert said == (
        "results/ on p1: 3 file(s) removed (300 bytes), each at file:///b/exp/r1 as it was (--clean); 1 kept: "
        "fresh.txt (not at the destination as it is now)"
    )


def test_a_warm_pod_that_is_ending_takes_no_more_jobs_and_says_how_to_start_another() -> None:
    from gpuc.client.pods.warm import busy_refusal
    from gpuc.client.runs import RunRecord

    run = RunRecord("r1", "gpuc-r1", "local", "exp", "lp-1", "running", 0.0, warm_s=1800.0, warm_job_s=3600.0)
    ending = busy_refusal("lp-1", "it is ending (its results sync and destroy are under way)", run)
    assert (
        ending.message == "pod lp-1: it is ending (its results sync and destroy are under way); it takes no more jobs"
    )
    assert ending.hint == "start a new warm pod: gpuc up exp --warm 30m -- CMD"
