"""`POST /v1/hooks/vast` (functions/outbidhook.py): Vast's signed `client:outbid` webhook wakes the recovery early,
as a hint only. On the Vast emulator through the real VastProvider and the real dispatch, on a FakeClock."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.functions import outbidhook
from gpuc.functions.edge import Response
from gpuc.testkit.emulators.vast import WebhookDelivery, sign_webhook
from gpuc.testkit.spot_world import RecWorld, make_rec_world

SECRET = "vast-webhook-secret-for-tests-0123"
WAIT = 120.0  # GPUC_RECOVER_WAIT_S here: inside the webhook's 300 s window, so a delivery is still fresh after it
HOOK = "/v1/hooks/vast"


@pytest.fixture
def world(home: Path, clock: FakeClock) -> Iterator[RecWorld]:
    w = make_rec_world(home, clock, recover_wait_s=WAIT, vast_webhook_secret=SECRET)
    w.emu.webhook_secret = SECRET  # the account's secret, as Vast shows it and the user sets it
    yield w
    w.close()


def deliver(world: RecWorld, delivery: WebhookDelivery) -> Response:
    return world.call("POST", HOOK, delivery.body, dict(delivery.headers))


def provider_calls(world: RecWorld) -> int:
    return len(world.emu.requests)


def seen(world: RecWorld, delivery: WebhookDelivery) -> bool:
    """Whether the route wrote the delivery's dedupe record (the one thing a good delivery stores)."""
    return world.store.get_meta(outbidhook.SEEN_KEY + json.loads(delivery.body)["event_id"]) is not None


def test_a_genuine_outbid_after_the_wait_re_rents_at_once_without_a_reaper_pass(world: RecWorld) -> None:
    first = world.up()
    world.outbid()
    world.reap()  # the pause noted: the wait starts
    assert world.creates() == 1
    world.clock.advance(WAIT + 1)
    (delivery,) = world.emu.webhooks
    answer = deliver(world, delivery)
    assert answer.status == 200 and answer.body == {"ok": True}
    assert world.creates() == 2  # re-rented by the hint's look, no pass in between
    assert world.latest() != first.id and world.run().attempts[-1].pod_id == world.latest()
    assert world.store.get_pod(world.latest()) is not None  # watched from its first second
    assert not any(i.id == int(first.id) for i in world.emu.alive())  # the paused one destroyed, confirmed gone


def test_a_hint_at_the_outbid_starts_the_wait_and_never_shortens_it(world: RecWorld) -> None:
    world.up()
    world.outbid()
    (delivery,) = world.emu.webhooks
    assert deliver(world, delivery).status == 200
    assert world.run().paused_since == world.now  # noted by the hint, before any pass
    assert world.creates() == 1  # the wait holds: a paused pod often resumes on its own
    world.clock.advance(WAIT + 1)
    world.reap()
    assert world.creates() == 2  # the next pass re-rents, the wait counted from the hint


def test_the_same_delivery_again_is_ignored_and_nothing_acts_twice(world: RecWorld) -> None:
    world.emu.deliver_twice = True
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT + 1)
    good, again = world.emu.webhooks
    assert deliver(world, good).status == 200
    calls, creates = provider_calls(world), world.creates()
    answer = deliver(world, again)
    # 200, not 4xx: Vast delivers at least once and would retry a refusal for ever
    assert answer.status == 200 and answer.body == {"ok": True, "ignored": outbidhook.SEEN}
    assert provider_calls(world) == calls and world.creates() == creates  # not even a read
    assert seen(world, good)


def test_a_forged_signature_is_401_and_nothing_is_read_or_stored(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT + 1)
    (good,) = world.emu.webhooks
    forged = WebhookDelivery(dict(good.headers, **{"X-Vast-Signature": "0" * 64}), good.body)
    calls = provider_calls(world)
    answer = deliver(world, forged)
    assert answer.status == 401 and answer.body["error"] == outbidhook.BAD_SIGNATURE
    assert provider_calls(world) == calls and world.creates() == 1 and not seen(world, good)
    assert deliver(world, good).status == 200  # the genuine one is still taken: the forgery spent nothing


def test_a_stale_delivery_is_401_and_nothing_is_read_or_stored(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(outbidhook.WINDOW_S + 1)
    (good,) = world.emu.webhooks
    calls = provider_calls(world)
    answer = deliver(world, good)
    assert answer.status == 401 and answer.body["error"] == outbidhook.STALE
    assert provider_calls(world) == calls and world.creates() == 1 and not seen(world, good)


def test_an_event_id_header_swapped_to_dodge_the_dedupe_is_refused(world: RecWorld) -> None:
    world.up()
    world.outbid()
    (good,) = world.emu.webhooks
    assert deliver(world, good).status == 200
    calls = provider_calls(world)
    swapped = WebhookDelivery(dict(good.headers, **{"X-Vast-Event-Id": "evt_other"}), good.body)  # not signed
    answer = deliver(world, swapped)
    assert answer.status == 400 and provider_calls(world) == calls
    assert world.store.get_meta(outbidhook.SEEN_KEY + "evt_other") is None


def test_unsigned_or_oversized_bodies_are_refused_before_anything(world: RecWorld) -> None:
    world.up()
    calls = provider_calls(world)
    assert world.call("POST", HOOK, b'{"notif_type": "client:outbid"}').status == 401
    now = int(world.now)
    big = json.dumps({"event_id": "evt_big", "notif_type": "client:outbid", "message": "x" * 5000}).encode()
    answer = world.call("POST", HOOK, big, sign_webhook(SECRET, now, big, "evt_big"))
    assert answer.status == 413
    assert provider_calls(world) == calls and world.store.get_meta(outbidhook.SEEN_KEY + "evt_big") is None


def test_without_the_secret_the_route_is_404_and_does_nothing(home: Path, clock: FakeClock) -> None:
    world = make_rec_world(home, clock, recover_wait_s=WAIT)
    try:
        world.up()
        world.outbid()
        world.reap()
        world.clock.advance(WAIT + 1)
        (good,) = world.emu.webhooks
        calls = provider_calls(world)
        answer = deliver(world, good)
        assert answer.status == 404 and answer.body["error"] == outbidhook.NOT_SET_UP
        assert provider_calls(world) == calls and world.creates() == 1 and not seen(world, good)
    finally:
        world.close()


def test_a_genuine_hint_while_the_pod_runs_destroys_and_rents_nothing(world: RecWorld) -> None:
    first = world.up()
    world.outbid()
    world.emu.outbidder_leaves(first.id)  # resumed: the webhook came, the pod runs again
    world.clock.advance(WAIT + 1)
    (good,) = world.emu.webhooks
    assert deliver(world, good).status == 200
    world.clock.advance(WAIT + 1)
    assert deliver(world, WebhookDelivery(*_resigned(good, int(world.now), "evt_later"))).status == 200
    assert world.emu.ops("destroy") == [] and world.creates() == 1
    assert world.latest() == first.id and world.run().paused_since is None


def test_other_notifications_are_200_and_read_nothing(world: RecWorld) -> None:
    world.up()
    calls = provider_calls(world)
    body = json.dumps({"event_id": "evt_bill", "notif_type": "billing:low_balance", "message": "m"}).encode()
    answer = world.call("POST", HOOK, body, sign_webhook(SECRET, int(world.now), body, "evt_bill"))
    assert answer.status == 200 and "ignored" in answer.body
    assert provider_calls(world) == calls and world.creates() == 1


def test_the_log_says_the_event_and_outcome_never_the_body_or_headers(
    world: RecWorld, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A library that configured logging earlier in this worker (dictConfig's disable_existing_loggers) may have
    # switched the logger off: this test reads what the hook logs, so it is on here.
    monkeypatch.setattr(logging.getLogger("gpuc.functions"), "disabled", False)
    world.up()
    world.outbid()
    (good,) = world.emu.webhooks
    forged = WebhookDelivery(dict(good.headers, **{"X-Vast-Signature": "f" * 64}), good.body)
    with caplog.at_level(logging.INFO, logger="gpuc.functions"):
        deliver(world, forged)
        deliver(world, good)
        deliver(world, good)
    text = caplog.text
    message = json.loads(good.body)["message"]
    assert "evt_" in text and "outbid" in text
    for leak in (message, good.headers["X-Vast-Signature"], "f" * 64, SECRET):
        assert leak not in text


def _resigned(good: WebhookDelivery, now: int, event_id: str) -> tuple[dict[str, str], bytes]:
    body = json.dumps({**json.loads(good.body), "event_id": event_id, "timestamp": now}).encode()
    return sign_webhook(SECRET, now, body, event_id), body


def test_the_local_server_serves_the_route_and_logs_neither_body_nor_headers(
    world: RecWorld, caplog: pytest.LogCaptureFixture
) -> None:
    """The real loopback server (`gpuc watchdog serve`) routes it as the Lambda does (handlers.ROUTES)."""
    import httpx

    from gpuc.functions.server import start_in_thread

    caplog.set_level("DEBUG")
    first = world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT + 1)
    (good,) = world.emu.webhooks
    forged = dict(good.headers, **{"X-Vast-Signature": "e" * 64})
    with start_in_thread(world.settings, deps=world.deps) as handle:
        refused = httpx.post(f"{handle.url}{HOOK}", content=good.body, headers=forged, timeout=10)
        taken = httpx.post(f"{handle.url}{HOOK}", content=good.body, headers=good.headers, timeout=10)
    assert (refused.status_code, taken.status_code) == (401, 200)
    assert world.creates() == 2 and world.latest() != first.id
    for leak in (json.loads(good.body)["message"], good.headers["X-Vast-Signature"], "e" * 64, SECRET):
        assert leak not in caplog.text
