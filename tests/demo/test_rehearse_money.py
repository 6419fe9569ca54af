"""The money on both sides of a rehearsal (the watchdog once never saw the budget the user set where `gpuc
doctor` says, its page said "No monthly budget set", its 80 % alert and pulled-in deadlines could not be seen;
the stand-in account started above the balance cap, so `doctor` failed out of the box, and never billed down).

As a user would: `gpuc doctor` in the rehearsal's shell fails nothing, and names where the budget goes; the budget
is written there; the watchdog's page shows it; a pod runs and the account's balance goes down; the budget is
lowered under what the month already spent, and the phone hears the watchdog's budget alert and the pulled-in
deadline, and the pod ends by it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rehearsal import Rehearsal, wait_for

from gpuc.testkit.platform import ACCOUNT_USD

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]


@pytest.fixture
def rehearsal(tmp_path: Path) -> Iterator[Rehearsal]:
    project = tmp_path / "project"
    project.mkdir()
    world = Rehearsal("runpod", tmp_path / "rehearse", project)
    yield world
    world.kill()


def page_text(world: Rehearsal) -> str:
    link = world.gpuc("page").stdout.split()[0]
    assert link.startswith(world.watchdog + "/p/"), link
    return re.sub(r"<[^>]+>", " ", httpx.get(link, timeout=10).text)


def test_the_budget_set_where_doctor_says_reaches_the_watchdog_and_the_account_bills_down(rehearsal: Rehearsal) -> None:
    doctor = rehearsal.gpuc("doctor")
    assert doctor.returncode == 0 and "✗" not in doctor.stdout, doctor.stdout  # out of the box
    assert f"${ACCOUNT_USD:.2f}, within" in doctor.stdout, doctor.stdout
    fix = re.search(r"add GPUC_MONTHLY_BUDGET=40 \(USD\) to (\S+)", doctor.stdout)
    assert fix, doctor.stdout
    env_file = Path(fix.group(1))
    assert env_file == rehearsal.home / ".env"
    assert "No monthly budget set" in page_text(rehearsal)
    with env_file.open("a") as fh:  # as the user follows doctor's fix
        fh.write("GPUC_MONTHLY_BUDGET=40\n")
    wait_for(lambda: "of $40.00" in page_text(rehearsal), 20, "the budget on the watchdog's page")

    up = rehearsal.gpuc("up", "long", "-y", "--", "python", "-c", "import time; time.sleep(600)")
    assert up.returncode == 0, up.stdout + up.stderr
    wait_for(lambda: rehearsal.account()["balance_usd"] < ACCOUNT_USD, 60, "the balance billed down")

    before = len(rehearsal.messages())
    with env_file.open("a") as fh:  # under what the month has spent: the watchdog's side of the cap acts
        fh.write("GPUC_MONTHLY_BUDGET=0.0001\n")
    rehearsal.message(lambda m: "the month's budget is SPENT" in m["title"], 60, "the budget alert")
    _, pulled = rehearsal.message(lambda m: "budget:" in m["title"] and "end by" in m["title"], 60, "the pull-in")
    assert "Deadlines pulled in" in pulled["message"], pulled
    assert len(rehearsal.messages()) > before
    wait_for(lambda: rehearsal.account()["pods"] == [], 180, "the pod ended by its pulled-in deadline")
    left = rehearsal.account()["balance_usd"]
    assert 0 < ACCOUNT_USD - left < 0.5, left  # what the pod ran, billed: cents
    balance = rehearsal.gpuc("balance")
    assert balance.returncode == 0 and f"runpod       {left:.2f}" in balance.stdout, balance.stdout
    out = rehearsal.stop()
    assert "watchdog: took GPUC_MONTHLY_BUDGET=40" in out or "GPUC_MONTHLY_BUDGET=40" in rehearsal.banner + out, out
    assert "stopped: no pod and no process left behind" in out
