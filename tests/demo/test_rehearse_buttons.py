"""The phone's buttons in a rehearsal act on the rehearsal's own watchdog (they all pointed at the
default port 8787, a "keep 1 h" tap failed with a ConnectError seen only in the rehearsal's terminal, the phone
showed nothing, and the idle pod was destroyed 40 s later).

An idle pod in a RunPod rehearsal (its idle warning at 3 s, its idle destroy at 30 s, set in the second shell as
a user sets any setting): the warning reaches the phone with its buttons; "keep 1 h" tapped in a real Chromium on
the phone's page keeps the pod past its idle destroy, and the page says what the tap did. Then "destroy now"
opened and confirmed as the phone's browser does ends it at the emulator. Every link every notification carried
names the rehearsal's own watchdog.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rehearsal import Rehearsal, answer_line, links, wait_for

from gpuc.testkit import browser as wd

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]

IDLE_WARN_S, IDLE_DESTROY_S = 3, 30


@pytest.fixture
def rehearsal(tmp_path: Path) -> Iterator[Rehearsal]:
    project = tmp_path / "project"
    project.mkdir()
    shell = {"GPUC_IDLE_WARN_S": str(IDLE_WARN_S), "GPUC_IDLE_DESTROY_S": str(IDLE_DESTROY_S)}
    world = Rehearsal("runpod", tmp_path / "rehearse", project, **shell)
    yield world
    world.kill()


@pytest.fixture
def browser() -> Iterator[wd.Browser]:
    found = wd.find()
    if isinstance(found, str):
        pytest.skip(f"BROWSER TESTS SKIPPED: {found}")
    driver = wd.Driver(found)
    session = driver.session()
    yield session
    session.quit()
    driver.close()


def idle_pod(world: Rehearsal) -> str:
    up = world.gpuc("up", "idle", "-y")  # no job: the pod idles
    assert up.returncode == 0, up.stdout + up.stderr
    (pod,) = [p["id"] for p in world.account()["pods"]]
    return str(pod)


def warned(world: Rehearsal) -> tuple[int, dict[str, object]]:
    return world.message(lambda m: any(a["label"] == "keep 1 h" for a in m.get("actions") or []), 60, "the warning")


def test_keep_1h_tapped_on_the_phone_keeps_an_idle_pod_past_its_idle_destroy(
    rehearsal: Rehearsal, browser: wd.Browser
) -> None:
    pod = idle_pod(rehearsal)
    warned(rehearsal)
    before = len(rehearsal.messages())
    browser.open(rehearsal.phone)
    browser.tap("keep 1 h")  # the newest message's button: a form the phone sends on
    wait_for(lambda: bool(answer_line(rehearsal.phone, "keep 1 h")), 30, "the tap's answer on the phone's page")
    said = answer_line(rehearsal.phone, "keep 1 h")
    assert "answered 200" in said and "FAILED" not in said, said
    browser.open(rehearsal.phone)
    assert said in browser.text()  # what a person reads under the message
    wait_for(lambda: len(rehearsal.messages()) > before, 30, "the keep said on the phone (one tap, one push)")
    time.sleep(IDLE_DESTROY_S + 5)  # past its idle destroy (30 s after it went idle): the lease holds it
    assert [p["id"] for p in rehearsal.account()["pods"]] == [pod], rehearsal.messages()
    for url in links(rehearsal.messages()):
        assert url.startswith(rehearsal.watchdog + "/"), (url, rehearsal.watchdog)
    down = rehearsal.gpuc("down", pod)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "stopped: no pod and no process left behind" in rehearsal.stop()


def test_destroy_now_from_the_phone_ends_the_pod_and_every_link_names_this_watchdog(rehearsal: Rehearsal) -> None:
    pod = idle_pod(rehearsal)
    _, message = warned(rehearsal)
    assert rehearsal.watchdog != "http://127.0.0.1:8787"
    (destroy,) = [a for a in message["actions"] if a["label"] == "destroy now"]  # type: ignore[attr-defined]
    # The phone opens the link (its confirmation page), then posts its form, as a browser does.
    page = httpx.get(destroy["url"], timeout=10)
    assert page.status_code == 200 and "destroy" in page.text.lower(), page.text
    done = httpx.post(destroy["url"], data={"confirm": "yes"}, timeout=10)
    assert done.status_code == 200 and "refused" not in done.text.lower(), done.text
    wait_for(lambda: rehearsal.account()["pods"] == [], 60, f"{pod} destroyed at the emulator")
    for url in links(rehearsal.messages()):
        assert url.startswith(rehearsal.watchdog + "/"), (url, rehearsal.watchdog)
    assert "stopped: no pod and no process left behind" in rehearsal.stop()
