"""`POST /v1/hooks/vast` (functions/recovery/webhook.py): Vast's signed outbid webhook, as Vast sends it
(`X-Vast-Signature-256: sha256=<hex>`, the slug `outbid`), is a hint only: recorded and answered with no
provider call; the reaper's pass acts (woken at once on the local server). On the Vast emulator through the
real VastProvider and the real dispatch, on a FakeClock."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.functions.edge import Response
from gpuc.functions.recovery import webhook
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
    """Whether the route kept the delivery's event id (the one thing a good delivery stores besides its type)."""
    event_id = json.loads(delivery.body)["event_id"]
    return seen_id(world, event_id)


def seen_id(world: RecWorld, event_id: str) -> bool:
    db = world.store._db  # type: ignore[attr-defined]  # the SQLite store: read as it is, no method writes
    rows = db.execute("SELECT 1 FROM seen_once WHERE kind = ? AND key = ?", (webhook.SEEN_KIND, event_id))
    return rows.fetchone() is not None


def test_the_delivery_vast_sends_is_answered_with_no_provider_call_and_the_pass_acts(world: RecWorld) -> None:
    """Vast's delivery (X-Vast-Signature-256: sha256=..., notif_type `outbid`) after the wait: the answer reads
    and rents nothing (Vast's 10 s timeout; the ingest's); the next pass re-rents."""
    first = world.up()
    world.outbid()
    world.reap()  # the pause noted: the wait starts
    world.clock.advance(WAIT + 1)
    (delivery,) = world.emu.webhooks
    assert json.loads(delivery.body)["notif_type"] == "outbid" and "X-Vast-Signature-256" in delivery.headers
    calls = provider_calls(world)
    answer = deliver(world, delivery)
    assert answer.status == 200 and answer.body == {"ok": True}
    assert provider_calls(world) == calls and world.creates() == 1  # no read, no destroy, no create
    assert seen(world, delivery)
    world.reap()
    assert world.creates() == 2 and world.latest() != first.id
    assert not any(i.id == int(first.id) for i in world.emu.alive())  # the paused one destroyed, confirmed gone


def test_a_hint_never_shortens_the_wait(world: RecWorld) -> None:
    world.up()
    world.outbid()
    (delivery,) = world.emu.webhooks
    assert deliver(world, delivery).status == 200
    world.reap()  # the pass notes the pause (the hint noted nothing: it read nothing)
    assert world.run().paused_since == world.now and world.creates() == 1
    world.clock.advance(WAIT - 5)
    world.reap()
    assert world.creates() == 1  # the wait holds: a paused pod often resumes on its own
    world.clock.advance(10)
    world.reap()
    assert world.creates() == 2


def test_on_the_local_server_a_hint_wakes_the_reaper_at_once(world: RecWorld) -> None:
    """`gpuc watchdog serve`: its reaper loop passes every hour here; Vast's outbid delivery makes it pass now,
    in its own thread, after the answer (bounded polls below: nothing here is timed)."""
    import httpx

    from gpuc.functions.server import start_in_thread

    first = world.up()
    world.outbid()
    with start_in_thread(world.settings, deps=world.deps, reaper_interval_s=3600.0) as handle:
        _until(lambda: world.run().paused_since is not None)  # the loop's first pass noted the pause
        world.clock.advance(WAIT + 1)
        (delivery,) = world.emu.webhooks
        answer = httpx.post(f"{handle.url}{HOOK}", content=delivery.body, headers=delivery.headers, timeout=10)
        assert answer.status_code == 200
        _until(lambda: world.run().acting is None and len(world.run().attempts) == 2)
    assert world.creates() == 2 and world.latest() != first.id


def _until(done: Callable[[], bool], limit_s: float = 30.0) -> None:
    import time

    end = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < end, "the reaper did not pass"
        time.sleep(0.02)


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
    assert answer.status == 200 and answer.body == {"ok": True, "ignored": webhook.SEEN}
    assert provider_calls(world) == calls and world.creates() == creates  # not even a read
    assert seen(world, good)


def test_a_forged_signature_is_401_and_nothing_is_read_or_stored(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(WAIT + 1)
    (good,) = world.emu.webhooks
    forged = WebhookDelivery(dict(good.headers, **{"X-Vast-Signature-256": "sha256=" + "0" * 64}), good.body)
    calls = provider_calls(world)
    answer = deliver(world, forged)
    assert answer.status == 401 and answer.body["error"] == webhook.BAD_SIGNATURE
    assert provider_calls(world) == calls and world.creates() == 1 and not seen(world, good)
    assert deliver(world, good).status == 200  # the genuine one is still taken: the forgery spent nothing


def test_a_stale_delivery_is_401_and_nothing_is_read_or_stored(world: RecWorld) -> None:
    world.up()
    world.outbid()
    world.reap()
    world.clock.advance(webhook.WINDOW_S + 1)
    (good,) = world.emu.webhooks
    calls = provider_calls(world)
    answer = deliver(world, good)
    assert answer.status == 401 and answer.body["error"] == webhook.STALE
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
    assert not seen_id(world, "evt_other")


def test_unsigned_or_oversized_bodies_are_refused_before_anything(world: RecWorld) -> None:
    world.up()
    calls = provider_calls(world)
    assert world.call("POST", HOOK, b'{"notif_type": "outbid"}').status == 401
    now = int(world.now)
    big = json.dumps({"event_id": "evt_big", "notif_type": "outbid", "message": "x" * 5000}).encode()
    answer = world.call("POST", HOOK, big, sign_webhook(SECRET, now, big, "evt_big"))
    assert answer.status == 413
    assert provider_calls(world) == calls and not seen_id(world, "evt_big")


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
        assert answer.status == 404 and answer.body["error"] == webhook.NOT_SET_UP
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
    world.reap()  # the pass the hint asks for: it reads the pod (twice), running
    world.clock.advance(WAIT + 1)
    assert deliver(world, WebhookDelivery(*_resigned(good, int(world.now), "evt_later"))).status == 200
    world.reap()
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
    world: RecWorld, caplog: pytest.LogCaptureFixture
) -> None:
    world.up()
    world.outbid()
    (good,) = world.emu.webhooks
    forged = WebhookDelivery(dict(good.headers, **{"X-Vast-Signature-256": "sha256=" + "f" * 64}), good.body)
    with caplog.at_level(logging.INFO, logger="gpuc.functions"):
        deliver(world, forged)
        deliver(world, good)
        deliver(world, good)
    text = caplog.text
    message = json.loads(good.body)["message"]
    assert "evt_" in text and "outbid" in text
    for leak in (message, good.headers["X-Vast-Signature-256"], "f" * 64, SECRET):
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
    forged = dict(good.headers, **{"X-Vast-Signature-256": "sha256=" + "e" * 64})
    with start_in_thread(world.settings, deps=world.deps) as handle:
        refused = httpx.post(f"{handle.url}{HOOK}", content=good.body, headers=forged, timeout=10)
        taken = httpx.post(f"{handle.url}{HOOK}", content=good.body, headers=good.headers, timeout=10)
    assert (refused.status_code, taken.status_code) == (401, 200)
    world.reap()
    assert world.creates() == 2 and world.latest() != first.id
    for leak in (json.loads(good.body)["message"], good.headers["X-Vast-Signature-256"], "e" * 64, SECRET):
        assert leak not in caplog.text
