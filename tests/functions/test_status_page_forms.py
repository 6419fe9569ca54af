"""The status page's forms, submitted as a browser submits them, without a browser: every
form's fields urlencoded as its body. A form with no field POSTs an empty body, which the action route
takes for a channel's bare button: "destroy now" and "destroy anyway" were refused with a 403. The
browser tests (tests/browser) tap the same buttons in Chromium."""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urlencode

import pytest
from fakes.watchdog import World
from test_status_page import open_page, session

from gpuc.functions.edge import Response

FORM = re.compile(r'<form method="post" action="([^"]+)">(.*?)<button[^>]*>([^<]+)</button></form>')
FIELD = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


def forms(world: World) -> dict[str, tuple[str, bytes]]:
    """{label: (action, body)} for every form on the status page, its fields as a browser sends them."""
    html = open_page(world, session(world)).html or ""
    found = {}
    for action, inner, label in FORM.findall(html):
        fields = [(unescape(k), unescape(v)) for k, v in FIELD.findall(inner)]
        found[unescape(label)] = (unescape(action), urlencode(fields).encode())
    return found


def submit(world: World, action: str, body: bytes) -> Response:
    return world.call("POST", action, body, {"Content-Type": "application/x-www-form-urlencoded"})


def kept(world: World, pod_id: str) -> None:
    world.register(pod_id)
    world.ping(pod_id)
    assert world.event(pod_id, "sync_failed", "kept alive: sync failed", kept_left_s=7200).status == 200


def test_destroy_now_submitted_as_a_browser_does_acts(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    action, body = forms(world)["destroy now"]
    answer = submit(world, action, body)
    assert answer.status == 200, answer.html
    assert world.pod("p1").intent == "end"


def test_destroy_anyway_submitted_as_a_browser_does_destroys(world: World) -> None:
    kept(world, "p1")
    page = forms(world)
    assert set(page) == {"retry sync", "stop, keep disk", "destroy anyway"}
    assert submit(world, *page["destroy anyway"]).status == 200
    assert world.pod("p1").state == "destroyed" and "p1" in world.provider.destroyed


def test_a_stray_gpuc_did_not_start_has_no_button(world: World) -> None:
    world.provider.add("stray1")
    world.reap()  # the reaper adopts it: a gpuc-named pod this watchdog never registered
    assert world.pod("stray1").origin == "adopted"
    assert forms(world) == {}


@pytest.mark.parametrize("label", ["keep 1 h", "extend 2 h", "destroy now"])
def test_one_tap_is_one_push(world: World, label: str) -> None:
    """A tap's transitions (lease, deadline, destroy) each used to push: two or three a tap."""
    world.register("p1")
    world.ping("p1")
    before = len(world.outbox())
    assert submit(world, *forms(world)[label]).status == 200
    assert len(world.outbox()) == before + 1, [m.title for m in world.outbox()[before:]]


@pytest.mark.parametrize("label", ["stop, keep disk", "destroy anyway"])
def test_one_tap_on_a_kept_pod_is_one_push(world: World, label: str) -> None:
    kept(world, "p1")
    before = len(world.outbox())
    assert submit(world, *forms(world)[label]).status == 200
    assert len(world.outbox()) == before + 1, [m.title for m in world.outbox()[before:]]
