"""The status page in a real browser at phone size: what a person sees, taps, and what that changes."""

from __future__ import annotations

import json

from fakes.browser import ARTIFACTS, fleet, session_url
from fakes.watchdog import ADMIN, World

from gpuc.functions.server import ServerHandle
from gpuc.testkit.browser import PHONE, Browser


def snapshot(world: World) -> str:
    """Everything a click could change: the pods' records, the meta records (links spent), notifications."""
    pods = [p.model_dump(mode="json") for p in world.store.list_pods()]
    notes = [n.model_dump(mode="json") for n in world.store.recent_notifications(1000)]
    metas = {k: (m.value if (m := world.store.get_meta(k)) else None) for k in ("reaper", "budget")}
    return json.dumps([pods, notes, metas], sort_keys=True)


def test_the_page_at_phone_size_shows_the_pods_and_the_budget(
    world: World, served: ServerHandle, browser: Browser
) -> None:
    fleet(world)
    browser.open(session_url(world, served))
    browser.screenshot(ARTIFACTS / "status_page_phone.png")
    text = browser.text()
    for expected in ("pod-a", "pod-b", "RTX 4090", "$0.69/h", "$1.89/h", "of $50.00", "destroy at", "keep 1 h"):
        assert expected in text, (expected, text)
    assert "The reaper's last pass" in text
    assert "anyone with its link can see your pods" in text
    assert browser.page_width() <= PHONE["width"], "the page scrolls sideways on a 360 px phone"
    assert "<script" not in browser.source().lower()  # works without JavaScript: there is none


def test_a_tap_on_keep_1_h_changes_the_pods_fate(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    page = session_url(world, served)
    browser.open(page)
    browser.tap("keep 1 h", card="pod-b")
    browser.screenshot(ARTIFACTS / "status_page_after_keep.png")
    assert "/a/" in browser.url
    assert "kept" in browser.text().lower()
    lease = world.pod("pod-b").lease_until
    assert lease is not None and lease >= world.now + 3600 - 1
    world.reap()  # the reaper's veto: a lease holds the pending destroy
    assert world.pod("pod-b").state != "destroyed"
    browser.open(page)  # the session link is reusable until it expires
    browser.screenshot(ARTIFACTS / "status_page_kept.png")
    assert "kept until" in browser.text()


def test_a_get_of_every_link_on_the_page_changes_nothing(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    page = session_url(world, served)
    browser.open(page)
    targets = browser.hrefs() + browser.form_actions()
    assert len(targets) >= 3, targets  # keep, destroy now (pod-b), extend (pod-a)
    before = snapshot(world)
    for url in targets:
        browser.open(url)  # what a link scanner or a chat preview does
    browser.open(page)
    assert snapshot(world) == before
    assert world.pod("pod-b").lease_until is None


def test_an_expired_session_shows_a_clear_page(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    page = session_url(world, served, life_s=600)
    world.clock.advance(601)
    browser.open(page)
    browser.screenshot(ARTIFACTS / "status_page_expired.png")
    text = browser.text()
    assert "expired" in text and "gpuc page" in text
    assert "pod-a" not in text


def test_an_altered_session_is_refused_and_shows_nothing(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    page = session_url(world, served)
    browser.open(page[:-2] + ("AA" if not page.endswith("AA") else "BB"))
    assert "not made by this watchdog" in browser.text()
    assert "pod-a" not in browser.text()


def test_gpuc_page_link_opens_in_the_browser(world: World, served: ServerHandle, browser: Browser) -> None:
    """The link the laptop's `gpuc page` gets from POST /v1/page-link is the page."""
    import httpx

    fleet(world)
    answer = httpx.post(
        f"{served.url}/v1/page-link", json={"for_s": 7200}, headers={"Authorization": f"Bearer {ADMIN}"}
    ).json()
    assert answer["expires_at"] == int(world.now) + 7200
    assert ADMIN not in answer["url"]
    browser.open(answer["url"])
    assert "pod-a" in browser.text()
