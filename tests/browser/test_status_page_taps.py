"""Every button on the status page acts from a real Chromium tap, and one tap is one push.

A form with no field POSTs an empty body, which the action route reads as a channel's bare button: "destroy
now" and "destroy anyway" were refused with a 403 and did nothing. Each test here taps one button in the
browser and checks the effect where it lands: the provider's pod destroyed or stopped, the pod's next
heartbeat answer, the deadline, the pause.
"""

from __future__ import annotations

from fakes.browser import ARTIFACTS, fleet, session_url
from fakes.watchdog import World

from gpuc.core import api
from gpuc.functions.actions.verbs import PAUSE_META
from gpuc.functions.reaper.rules import ASKED_WAIT_BEATS
from gpuc.functions.server import ServerHandle
from gpuc.testkit.browser import Browser


def kept_pod(world: World, pod_id: str = "pod-k") -> None:
    """A pod whose results sync failed: kept for its results, billing."""
    world.register(pod_id, gpu="NVIDIA A100 80GB PCIe", price_per_hour=1.89)
    world.ping(pod_id)
    assert world.event(pod_id, "sync_failed", "kept alive: sync failed", kept_left_s=7200).status == 200
    assert world.pod(pod_id).kept_at is not None


def pushes(world: World) -> list[str]:
    return [m.title for m in world.outbox()]


def tap_on_page(world: World, served: ServerHandle, browser: Browser, label: str, card: str) -> str:
    """Open the status page, tap `label` in the pod's card, and return the answer page's text. Exactly one
    push goes out for the tap (one tap, one push)."""
    browser.open(session_url(world, served))
    before = len(pushes(world))
    browser.tap(label, card=card)
    text = browser.text()
    assert "refused" not in text.lower(), text
    assert "/a/" in browser.url
    assert len(pushes(world)) == before + 1, pushes(world)[before:]
    return text


def test_every_pod_card_offers_the_notifications_buttons(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    kept_pod(world)
    browser.open(session_url(world, served))
    browser.screenshot(ARTIFACTS / "status_page_buttons.png")
    assert browser.buttons(card="pod-a") == ["keep 1 h", "extend 2 h", "destroy now"]
    assert browser.buttons(card="pod-b") == ["keep 1 h", "destroy now"]
    assert browser.buttons(card="pod-k") == ["retry sync", "stop, keep disk", "destroy anyway"]
    assert "results/ exists only on the pod" in browser.text(".card:last-of-type")


def test_destroy_now_on_a_silent_pod_ends_it_at_the_provider(
    world: World, served: ServerHandle, browser: Browser
) -> None:
    fleet(world)  # pod-b: silent, marked for destroy
    text = tap_on_page(world, served, browser, "destroy now", "pod-b")
    browser.screenshot(ARTIFACTS / "status_page_after_destroy.png")
    assert "destroy of gpuc-pod-b asked from the phone" in text
    assert world.pod("pod-b").intent == "end"
    # It cannot end itself (it does not ping): the watchdog does, after two heartbeat intervals.
    world.clock.advance(ASKED_WAIT_BEATS * world.settings.heartbeat_interval_s + 1)
    for _ in range(3):
        world.ping("pod-a")
        world.reap()
        world.clock.advance(world.settings.reaper_period_s)
    assert world.pod("pod-b").state == "destroyed"
    assert "pod-b" in world.provider.destroyed and "pod-b" not in world.provider.pods
    assert world.pod("pod-a").state == "ok"  # the other pod untouched


def test_destroy_now_on_a_running_pod_tells_it_to_end(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    tap_on_page(world, served, browser, "destroy now", "pod-a")
    heard = api.HeartbeatAnswer.model_validate(world.ping("pod-a").body)
    assert heard.intent == "end"  # its agent syncs results/, then destroys itself
    assert world.pod("pod-b").intent is None


def test_destroy_anyway_on_a_kept_pod_destroys_it(world: World, served: ServerHandle, browser: Browser) -> None:
    kept_pod(world)
    text = tap_on_page(world, served, browser, "destroy anyway", "pod-k")
    assert "destroyed from the phone" in text
    assert world.pod("pod-k").state == "destroyed"
    assert "pod-k" in world.provider.destroyed and "pod-k" not in world.provider.pods


def test_stop_keep_disk_stops_the_kept_pod(world: World, served: ServerHandle, browser: Browser) -> None:
    kept_pod(world)
    text = tap_on_page(world, served, browser, "stop, keep disk", "pod-k")
    assert "stopped from the phone" in text
    assert world.provider.pods["pod-k"].status == "stopped"
    world.reap()  # the reaper's next pass reads it stopped
    browser.open(session_url(world, served))  # a stopped kept pod: only what still applies
    assert browser.buttons(card="pod-k") == ["destroy anyway"]


def test_retry_sync_asks_the_kept_pod(world: World, served: ServerHandle, browser: Browser) -> None:
    kept_pod(world)
    tap_on_page(world, served, browser, "retry sync", "pod-k")
    heard = api.HeartbeatAnswer.model_validate(world.ping("pod-k").body)
    assert heard.intent == "retry_sync"


def test_extend_2_h_moves_the_deadline(world: World, served: ServerHandle, browser: Browser) -> None:
    fleet(world)
    before = api.HeartbeatAnswer.model_validate(world.ping("pod-a").body).deadline_at
    assert before is not None
    tap_on_page(world, served, browser, "extend 2 h", "pod-a")
    after = api.HeartbeatAnswer.model_validate(world.ping("pod-a").body).deadline_at
    assert after is not None and after >= before + 2 * 3600 - 1


def test_pause_new_pods_from_the_budget_card(world: World, served: ServerHandle, browser: Browser) -> None:
    world.register("pod-x", price_per_hour=45.0, started_at=world.now - 3600)  # $45 of the $50 month
    world.ping("pod-x")
    tap_on_page(world, served, browser, "pause new pods", "This month")
    meta = world.store.get_meta(PAUSE_META)
    assert meta is not None and meta.value["paused"] is True


def test_keep_1_h_is_one_push_and_holds_the_pending_destroy(
    world: World, served: ServerHandle, browser: Browser
) -> None:
    fleet(world)
    text = tap_on_page(world, served, browser, "keep 1 h", "pod-b")
    assert "kept 1 h more from the phone" in text
    world.clock.advance(2 * world.settings.reaper_period_s)
    world.reap()
    assert world.pod("pod-b").state != "destroyed" and "pod-b" in world.provider.pods


def test_a_notifications_destroy_link_confirmed_in_the_browser_acts_once(
    world: World, served: ServerHandle, browser: Browser
) -> None:
    """The notification's "destroy now" opens its confirmation page; its button acts; opened again, the
    link says it is spent and what it did."""
    from gpuc.functions.buttons import offer

    fleet(world)
    world.use_public_url(served.url)
    link = next(o for o in offer(world.store, world.settings, world.pod("pod-b"), "pending_destroy", world.now)
                if o.verb == "destroy")  # fmt: skip
    browser.open(link.url)
    assert "Not synced" in browser.text() and world.pod("pod-b").intent is None  # opening it did nothing
    browser.tap("destroy now")
    assert "destroy of gpuc-pod-b asked from the phone" in browser.text()
    assert world.pod("pod-b").intent == "end"
    browser.open(link.url)
    browser.screenshot(ARTIFACTS / "link_spent.png")
    text = browser.text()
    assert "already used" in text and "destroy of gpuc-pod-b asked from the phone" in text, text
    assert browser.buttons() == []  # nothing left to tap
