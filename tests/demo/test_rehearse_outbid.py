"""An outbid rehearsed as docs/interruptible.md shows it, step by step (the Vast rehearsal once had no
way to outbid a pod, so recovery could be seen only as two lines of `gpuc drill`).

The steps are read from the page itself (its "Rehearse an outbid first" section: the job and the commands), run
in a Vast rehearsal's second shell, and what each step promises is checked where the user sees it: `gpuc ls`
(paused at attempt 1/3, then attempt 2/3 running), the job's log (resumed from the last push), the phone
("recovering" with a stop button on the rehearsal's own watchdog), the ledger (one row for the run, closed with
its attempts), and `gpuc down` during a recovery (the second outbid's wait) ending it: no attempt 3 is rented.
The page's other way to stop, the phone's button, is tapped in a second test: it answers, and no further attempt
is rented either.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rehearsal import Rehearsal, answer_line, wait_for

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]

DOC = Path(__file__).resolve().parents[2] / "docs" / "interruptible.md"
RECOVER_WAIT_S = 10  # the rehearsal's wait before a re-rent, as the page says
NO_RERENT_S = 2 * RECOVER_WAIT_S + 5  # watched after a stop: a re-rent would have come by then (a pass is 0.5 s)


def rehearsal_steps() -> tuple[str, list[list[str]]]:
    """The section's job and its `gpuc ...` commands, as the page shows them."""
    text = DOC.read_text()
    section = text.split("## Rehearse an outbid first", 1)[1].split("\n## ", 1)[0]
    job = re.search(r"```python\n(.*?)```", section, re.S)
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert job and len(blocks) == 2, section
    assert blocks[0].strip() == "gpuc demo --provider vast --serve"
    assert f"wait before a re-rent is {RECOVER_WAIT_S} s" in section
    commands = [line.split("#")[0].split()[1:] for line in blocks[1].splitlines() if line.startswith("gpuc ")]
    return job.group(1), commands


@pytest.fixture
def rehearsal(tmp_path: Path) -> Iterator[Rehearsal]:
    job, _ = rehearsal_steps()
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text(job)
    world = Rehearsal("vast", tmp_path / "rehearse", project)
    yield world
    world.kill()


def said(done: Any) -> str:
    return str(done.stdout + done.stderr)


def pods(world: Rehearsal) -> list[dict[str, Any]]:
    return list(world.account()["pods"])


def outbid_and_recovered(world: Rehearsal, up: list[str], outbid: list[str], ls: list[str]) -> dict[str, Any]:
    """up, a push, the outbid, `ls` paused at attempt 1/3, then attempt 2/3 running from the last push; the phone's
    "recovering" message."""
    started = world.gpuc(*up)
    assert started.returncode == 0, said(started)
    assert "ONE envelope of $0.23" in said(started)  # as the page says
    (first,) = [p["id"] for p in pods(world)]
    wait_for(lambda: len(list((world.home / "bucket").rglob("step-*.json"))) >= 3, 120, "a push with a few steps")

    outbidden = world.gpuc(*outbid)
    assert outbidden.returncode == 0, said(outbidden)
    assert f"on instance {first}" in outbidden.stderr and "paused" in outbidden.stderr, said(outbidden)
    paused = world.gpuc(*ls)
    assert "paused" in paused.stdout and "attempt 1/3" in paused.stdout, said(paused)

    def second_attempt() -> bool:
        listed = world.gpuc(*ls).stdout
        return "attempt 2/3" in listed and first not in listed and "running" in listed

    wait_for(second_attempt, 120, "attempt 2/3 running in gpuc ls")
    (second,) = [p["id"] for p in pods(world)]
    log = world.home / "sshd" / "pods" / second / "workspace" / ".gpuc" / "job.log"  # where the page says
    wait_for(lambda: log.is_file() and "starting at step" in log.read_text(), 120, "attempt 2's job started")
    resumed = int(re.findall(r"starting at step (\d+)", log.read_text())[0])
    assert resumed > 0, resumed  # from the last push, not from scratch

    _, recovering = world.message(lambda m: m["title"] == "lora recovering (outbid)", 60, "recovering")
    assert "outbid: recovering, attempt 2 of 3" in recovering["message"], recovering
    (stop,) = [a for a in recovering["actions"] if a["label"] == "stop recovery"]
    assert stop["url"].startswith(world.watchdog + "/a/"), stop  # the rehearsal's own watchdog, not :8787
    return recovering


def no_rerent(world: Rehearsal, paused: str) -> None:
    """For NO_RERENT_S, never a pod at the emulator other than `paused` (the outbid attempt): nothing rented."""
    end = time.monotonic() + NO_RERENT_S
    while time.monotonic() < end:
        others = [p for p in pods(world) if p["id"] != paused]
        assert others == [], f"an attempt was rented after the stop: {others}"
        time.sleep(0.3)


def one_row(world: Rehearsal, ledger: list[str]) -> str:
    book = world.gpuc(*ledger)
    assert book.returncode == 0, said(book)
    rows = (world.home / "gpu-ledger.csv").read_text().splitlines()[1:]
    assert len(rows) == 1 and "1 row(s)" in book.stdout, said(book)  # ONE row for the run, whatever its attempts
    return str(book.stdout)


def test_the_outbid_rehearsal_runs_as_the_docs_show_it(rehearsal: Rehearsal) -> None:
    _, steps = rehearsal_steps()
    assert [s[0] for s in steps] == ["up", "demo", "ls", "ledger", "demo", "down", "ledger"], steps
    up, outbid, ls, ledger, outbid_again, down, closed = steps
    outbid_and_recovered(rehearsal, up, outbid, ls)
    assert "running, so far" in one_row(rehearsal, ledger)

    again = rehearsal.gpuc(*outbid_again)  # attempt 2 outbid: the recovery waits RECOVER_WAIT_S to rent attempt 3
    assert again.returncode == 0, said(again)
    (second,) = [p["id"] for p in pods(rehearsal)]
    # `down` must land inside the recovery's RECOVER_WAIT_S: the pause is read at the emulator (one HTTP call),
    # not with `gpuc ls` (seconds per process on a loaded machine; the first outbid above showed ls already).
    assert [p["state"] for p in pods(rehearsal)] == ["stopped"], pods(
        rehearsal
    )  # Vast: actual stopped, intended running
    ended = rehearsal.gpuc(*down)  # during the recovery's wait
    assert ended.returncode == 0, said(ended)
    # The stopped recovery destroys the paused attempt too: whichever of the two comes first, `down` says it.
    gone = (f"{second}: destroyed", f"{second}: already gone, confirmed gone")
    assert "no further attempt is rented" in said(ended) and any(g in said(ended) for g in gone), said(ended)
    wait_for(lambda: pods(rehearsal) == [], 60, "the paused attempt destroyed at the emulator")
    no_rerent(rehearsal, second)  # what a stop that did not hold would rent after RECOVER_WAIT_S

    def closed_row() -> bool:
        return "open rows" not in rehearsal.gpuc(*closed).stdout

    wait_for(closed_row, 60, "the run's one row closed")
    one_row(rehearsal, closed)
    row = (rehearsal.home / "gpu-ledger.csv").read_text().splitlines()[1]
    assert "interruptible, 2 attempts (2 outbids)" in row, row  # the second outbid, stopped in its wait, counts
    assert "stopped: no pod and no process left behind" in rehearsal.stop()


def test_the_phones_stop_button_stops_the_recovery(rehearsal: Rehearsal) -> None:
    _, steps = rehearsal_steps()
    up, outbid, ls, _, outbid_again, down, _ = steps
    recovering = outbid_and_recovered(rehearsal, up, outbid, ls)
    index = rehearsal.messages().index(recovering)
    tapped = httpx.post(f"{rehearsal.phone}/tap", data={"m": str(index), "label": "stop recovery"}, timeout=10)
    assert tapped.status_code == 303  # the phone's page sends it on, as the ntfy app does
    wait_for(lambda: "answered 200" in answer_line(rehearsal.phone, "stop recovery"), 30, "the stop's answer")

    again = rehearsal.gpuc(*outbid_again)  # the pod the stop let run on, outbid: nothing re-rents it now
    assert again.returncode == 0, said(again)
    (second,) = [p["id"] for p in pods(rehearsal)]
    no_rerent(rehearsal, second)
    ended = rehearsal.gpuc(*down)
    assert ended.returncode == 0, said(ended)
    wait_for(lambda: pods(rehearsal) == [], 60, "no pod left at the emulator")
    assert "stopped: no pod and no process left behind" in rehearsal.stop()
