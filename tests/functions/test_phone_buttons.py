"""Buttons on notifications: each channel's native form, which notifications get which, and
a notification that always goes out, buttons or not. httpx.MockTransport answers; no network."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest
from fakes.watchdog import make_world
from test_notify import Phone, notifier_for

from gpuc.core.clock import FakeClock
from gpuc.core.notify.message import Action, Message
from gpuc.core.notify.notifier import read_outbox
from gpuc.functions import buttons
from gpuc.functions.store import StoredPod

KEEP = Action("keep 1 h", "https://w.example/a/k.p1.2s.abc.1.MAC", "k.p1.2s.abc.1.MAC", True)
DESTROY = Action("destroy now", "https://w.example/a/d.p1.0.abc.2.MAC", "d.p1.0.abc.2.MAC", False)
URLS = {
    "ntfy": "ntfy://topic-x",
    "telegram": "tgram://123:bot-token/42",
    "slack": "slack://T0/B0/XXXX",
    "discord": "discord://1/tok",
    "pushover": "pushover://user@apptoken",
    "webhook": "json://hooks.example/in",
}


def sent(tmp_path: Path, clock: FakeClock, channel: str, phone: Phone | None = None) -> list[httpx.Request]:
    phone = phone or Phone()
    notifier = notifier_for(tmp_path, URLS[channel], phone, clock)
    notifier.send("gpuc: will destroy p1 at 21:40", "idle 15 min", pod_id="p1", kind="mark", actions=[KEEP, DESTROY])
    return phone.requests


def test_ntfy_safe_verb_is_an_http_post_and_destroy_opens_its_page(tmp_path: Path, clock: FakeClock) -> None:
    (request,) = sent(tmp_path, clock, "ntfy")
    actions = json.loads(request.content)["actions"]
    assert actions == [
        {"action": "http", "label": "keep 1 h", "url": KEEP.url, "method": "POST", "clear": True},
        {"action": "view", "label": "destroy now", "url": DESTROY.url},
    ]


def test_ntfy_never_more_than_three_buttons(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier = notifier_for(tmp_path, URLS["ntfy"], phone, clock)
    notifier.send("t", "m", actions=[KEEP, KEEP, KEEP, DESTROY])
    body = json.loads(phone.requests[0].content)
    assert len(body["actions"]) == 3
    assert body["message"].endswith(f"destroy now: {DESTROY.url}")  # the fourth is still reachable


def test_telegram_safe_verb_is_a_callback_and_destroy_a_url_button(tmp_path: Path, clock: FakeClock) -> None:
    (request,) = sent(tmp_path, clock, "telegram")
    keyboard = json.loads(request.content)["reply_markup"]["inline_keyboard"]
    assert keyboard == [
        [{"text": "keep 1 h", "callback_data": KEEP.token}],
        [{"text": "destroy now", "url": DESTROY.url}],
    ]
    assert len(KEEP.token.encode()) <= 64


def test_slack_buttons_carry_the_token_and_destroy_opens_its_page(tmp_path: Path, clock: FakeClock) -> None:
    (request,) = sent(tmp_path, clock, "slack")
    body = json.loads(request.content)
    keep, destroy = body["blocks"][1]["elements"]
    assert keep["value"] == KEEP.token and "url" not in keep
    assert destroy["url"] == DESTROY.url and "value" not in destroy
    assert body["text"].startswith("*gpuc: will destroy p1")  # the notification's own text stays


@pytest.mark.parametrize("channel", ["discord", "pushover", "webhook"])
def test_channels_without_buttons_get_a_link_line_to_the_confirmation_page(
    tmp_path: Path, clock: FakeClock, channel: str
) -> None:
    (request,) = sent(tmp_path, clock, channel)
    raw = request.content.decode()
    if channel == "pushover":
        text = parse_qs(raw)["message"][0]
    else:
        text = json.loads(raw).get("content") or json.loads(raw)["message"]
    assert f"keep 1 h: {KEEP.url}" in text and f"destroy now: {DESTROY.url}" in text


def test_a_refused_keyboard_still_delivers_the_notification_as_text(tmp_path: Path, clock: FakeClock) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if b"reply_markup" in request.content:
            return httpx.Response(400, json={"ok": False, "description": "Bad Request: BUTTON_URL_INVALID"})
        return httpx.Response(200, json={"ok": True})

    requests = sent(tmp_path, clock, "telegram", Phone(answer))
    assert len(requests) == 2
    text = json.loads(requests[1].content)["text"]
    assert "reply_markup" not in json.loads(requests[1].content) and f"keep 1 h: {KEEP.url}" in text


def test_the_outbox_keeps_the_buttons(tmp_path: Path, clock: FakeClock) -> None:
    sent(tmp_path, clock, "ntfy")
    (msg,) = read_outbox(tmp_path / "outbox.jsonl")
    assert msg.actions == (KEEP, DESTROY)
    assert Message.from_dict({"ts": 1.0, "title": "old", "message": "line"}).actions == ()  # older outboxes


# -- which notification gets which buttons (functions/buttons.py) -------------
def _pod(**fields: object) -> StoredPod:
    base: dict[str, object] = {
        "pod_id": "p1",
        "provider": "fake",
        "name": "gpuc-p1",
        "experiment": "e",
        "state": "ok",
        "registered_at": 0.0,
    }
    return StoredPod.model_validate({**base, **fields})


@pytest.mark.parametrize(
    ("pod", "kind", "level", "expected"),
    [
        (_pod(), "idle_warning", "warning", "pending_destroy"),
        (_pod(state="down"), "mark", "warning", "pending_destroy"),
        (_pod(state="down", alerted="deadline@123"), "mark", "warning", "deadline"),
        (_pod(), "deadline_warning", "warning", "deadline"),
        (_pod(kept_at=5.0), "sync_failed", "error", "kept"),
        (_pod(kept_at=5.0, state="down"), "mark", "warning", "kept"),
        (None, "budget", "warning", "budget"),
        (None, "budget", "info", None),  # the all-clear
        (_pod(), "job_exit", "info", None),
        (_pod(state="ended"), "idle_warning", "warning", None),
        (_pod(origin="adopted", state="down"), "mark", "warning", None),  # a pod gpuc did not start
    ],
)
def test_offer_kind(pod: StoredPod | None, kind: str, level: str, expected: str | None) -> None:
    assert buttons.offer_kind(pod, kind, level) == expected  # type: ignore[arg-type]


def test_an_idle_warning_goes_out_with_keep_and_destroy(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock)
    world.use_public_url("https://watchdog.example/")
    world.register("p1")
    assert world.event("p1", "idle_warning", "idle 15 min").status == 200
    msg = world.outbox()[-1]
    assert msg.kind == "idle_warning"
    assert [(a.label, a.safe) for a in msg.actions] == [("keep 1 h", True), ("destroy now", False)]
    assert all(a.url == f"https://watchdog.example/a/{a.token}" for a in msg.actions)


def test_buttons_that_fail_to_mint_never_cost_the_notification(
    home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> bytes:
        raise RuntimeError("store unreachable")

    monkeypatch.setattr(buttons, "link_key", broken)
    world = make_world(home, clock)
    world.register("p1")
    world.event("p1", "idle_warning", "idle 15 min")
    assert world.outbox()[-1].kind == "idle_warning" and world.outbox()[-1].actions == ()


def test_a_pod_url_in_the_text_is_still_defanged_next_to_the_buttons(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock)
    world.register("p1")
    world.event("p1", "idle_warning", "re-enter your key at https://evil.example/login")
    msg = world.outbox()[-1]
    assert msg.actions and "https://evil" not in msg.plain().message and "hxxps://evil[.]example" in msg.message
