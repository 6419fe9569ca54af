"""Taps coming back: Telegram's webhook and Slack's Request URL refuse what is not theirs and
store nothing; and end to end over real HTTP, a notification to the ntfy and Telegram stand-ins whose
button is pressed as the phone would, and the watchdog acts once."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from fakes.phone import dump, leased, tap_token
from fakes.watchdog import World, make_world

from gpuc.core.clock import FakeClock
from gpuc.core.notify.channels import NtfyChannel, TelegramChannel
from gpuc.core.notify.notifier import Notifier
from gpuc.functions.actions.telegram import SECRET_HEADER
from gpuc.functions.server import start_in_thread
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.stand_ins import Chat, NtfyStandIn, TelegramStandIn

BOT_TOKEN = "123456:PLANTED-bot-token-abcdefghijklmnop"
TG_SECRET = "PLANTED-telegram-secret-0123456789abcdef"
SLACK_SECRET = "PLANTED-slack-signing-secret-0123456789"
NTFY_TOKEN = "tk_PLANTEDntfytoken0123456789"
PLANTED = (BOT_TOKEN, TG_SECRET, SLACK_SECRET, NTFY_TOKEN)
CHAT = 42
Wired = tuple[World, NtfyStandIn, TelegramStandIn, str]  # world, ntfy, telegram, watchdog URL


def phone_world(home: Path, clock: FakeClock, notifier: Notifier | None = None, **overrides: object) -> World:
    settings: dict[str, object] = {
        "telegram_secret": TG_SECRET,
        "slack_signing_secret": SLACK_SECRET,
        "notify_urls": f"tgram://{BOT_TOKEN}/{CHAT}",
        **overrides,
    }
    return make_world(home, clock, notifier=notifier, **settings)  # type: ignore[arg-type]


def update(token: str, *, chat: int = CHAT, user: int = CHAT, chat_type: str = "private") -> bytes:
    query = {
        "id": "cq1",
        "from": {"id": user, "is_bot": False, "first_name": "Ada"},
        "message": {"message_id": 1, "date": 0, "chat": {"id": chat, "type": chat_type}},
        "chat_instance": "1",
        "data": token,
    }
    return json.dumps({"update_id": 1, "callback_query": query}).encode()


def telegram(world: World, body: bytes, secret: str | None = TG_SECRET) -> tuple[int, dict[str, object]]:
    headers = {SECRET_HEADER: secret} if secret is not None else {}
    answer = world.call("POST", "/telegram", body, headers)
    return answer.status, answer.body


@pytest.fixture
def tapped(home: Path, clock: FakeClock) -> World:
    world = phone_world(home, clock)
    world.register("p1")
    return world


# -- Telegram -------------------------------------------------------------------------------------------
def test_telegram_tap_acts_once_and_answers_the_callback(tapped: World) -> None:
    world = tapped
    body = update(tap_token(world))
    status, answer = telegram(world, body)
    assert status == 200 and answer["method"] == "answerCallbackQuery" and answer["callback_query_id"] == "cq1"
    assert str(answer["text"]).startswith("kept 1 h more") and leased(world) is not None
    status, again = telegram(world, body)  # Telegram redelivers, or someone replays it
    assert status == 200 and "already used" in str(again["text"]) and again["show_alert"] is True
    assert leased(world) is not None


@pytest.mark.parametrize("secret", [None, "", "wrong-secret", TG_SECRET + "x", TG_SECRET[:-1]])
def test_telegram_forged_secret_is_401_and_stores_nothing(tapped: World, secret: str | None) -> None:
    world = tapped
    body, before = update(tap_token(world)), dump(world.deps)
    status, answer = telegram(world, body, secret)
    assert status == 401 and "method" not in answer
    assert leased(world) is None and dump(world.deps) == before


@pytest.mark.parametrize(
    ("chat", "user", "chat_type"),
    [(99, 99, "private"), (-100, CHAT, "supergroup"), (CHAT, 7, "private")],
    ids=["other-chat", "other-group", "other-user"],
)
def test_telegram_tap_from_a_chat_not_allowed_does_nothing(tapped: World, chat: int, user: int, chat_type: str) -> None:
    world = tapped
    body, before = update(tap_token(world), chat=chat, user=user, chat_type=chat_type), dump(world.deps)
    status, answer = telegram(world, body)
    assert status == 200 and "may not act" in str(answer["text"])
    assert leased(world) is None and dump(world.deps) == before


def test_telegram_group_acts_only_for_listed_users(home: Path, clock: FakeClock) -> None:
    world = phone_world(home, clock, telegram_chats=f"-100, {CHAT}")
    world.register("p1")
    assert "may not act" in str(telegram(world, update(tap_token(world), chat=-100, user=7))[1]["text"])
    assert str(telegram(world, update(tap_token(world), chat=-100, user=CHAT))[1]["text"]).startswith("kept 1 h more")


def test_telegram_destroy_is_refused_from_a_button(tapped: World) -> None:
    world = tapped
    status, answer = telegram(world, update(tap_token(world, "destroy")))
    assert status == 200 and "confirmation page" in str(answer["text"]) and leased(world) is None


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        json.dumps({"update_id": 5, "message": {"text": "/destroy p1", "chat": {"id": CHAT}}}).encode(),
        json.dumps({"update_id": 5, "callback_query": {"id": "c", "data": "x" * 80}}).encode(),
        json.dumps({"update_id": 5, "callback_query": {"id": "c"}}).encode(),
        json.dumps({"update_id": 5, "callback_query": "zzz"}).encode(),
        b"{" * 100_000,
    ],
)
def test_telegram_anything_else_is_a_4xx_or_a_200_that_does_nothing(tapped: World, body: bytes) -> None:
    world = tapped
    before = dump(world.deps)
    status, _ = telegram(world, body)
    assert status in (200, 400, 413) and leased(world) is None and dump(world.deps) == before


def test_telegram_not_set_up_is_404(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock)
    status, answer = telegram(world, update("k.p1.0.0.0.x"), secret="anything")
    assert status == 404 and "GPUC_TELEGRAM_SECRET" in str(answer["error"])


# -- Slack ----------------------------------------------------------------------------------------------
def slack_body(token: str | None) -> bytes:
    tap: dict[str, object] = {"action_id": "gpuc_0", "type": "button", "text": {"type": "plain_text", "text": "x"}}
    if token is not None:
        tap["value"] = token
    payload = {"type": "block_actions", "user": {"id": "U1"}, "actions": [tap]}
    return urlencode({"payload": json.dumps(payload)}).encode()


def slack(
    world: World, body: bytes, *, ts: int | None = None, secret: str = SLACK_SECRET
) -> tuple[int, dict[str, object]]:
    stamp = str(int(world.now) if ts is None else ts)
    mac = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={mac}",
        "Content-Type": "application/x-www-form-urlencoded",
    }
    answer = world.call("POST", "/slack/actions", body, headers)
    return answer.status, answer.body


def test_slack_tap_acts_once(tapped: World) -> None:
    world = tapped
    body = slack_body(tap_token(world))
    status, answer = slack(world, body)
    assert status == 200 and answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    assert str(answer["text"]).startswith("kept 1 h more") and leased(world) is not None
    status, again = slack(world, body)  # a replay inside the 5-minute window: the link's nonce refuses it
    assert status == 200 and "already used" in str(again["text"]) and leased(world) is not None


@pytest.mark.parametrize("case", ["bad-signature", "old", "future", "unsigned"])
def test_slack_bad_signature_or_timestamp_is_401_and_stores_nothing(tapped: World, case: str) -> None:
    world = tapped
    body, before = slack_body(tap_token(world)), dump(world.deps)
    if case == "unsigned":
        answer = world.call("POST", "/slack/actions", body, {})
        status = answer.status
    else:
        ts = {"old": int(world.now) - 301, "future": int(world.now) + 301}.get(case)
        status, _ = slack(world, body, ts=ts, secret="wrong" if case == "bad-signature" else SLACK_SECRET)
    assert status == 401 and leased(world) is None and dump(world.deps) == before


def test_slack_url_button_click_and_garbage(tapped: World) -> None:
    world = tapped
    destroy = slack_body(tap_token(world, "destroy"))
    before = dump(world.deps)
    assert slack(world, slack_body(None)) == (200, {})  # destroy's URL button: Slack posts its click too
    assert slack(world, b"payload=%7Bnot json")[0] == 400
    assert slack(world, b"")[0] == 400
    status, answer = slack(world, destroy)
    assert status == 200 and "confirmation page" in str(answer["text"])
    assert leased(world) is None and dump(world.deps) == before


def test_slack_not_set_up_is_404(home: Path, clock: FakeClock) -> None:
    assert slack(make_world(home, clock), slack_body("x"))[0] == 404


# -- end to end, over real HTTP, against the stand-ins ----------------------------------------------------
@pytest.fixture
def wired(home: Path, clock: FakeClock) -> Iterator[Wired]:
    ntfy = NtfyStandIn(token=NTFY_TOKEN)
    # Loopback button URLs are what a local test has; the real Telegram refuses them (test below).
    tg = TelegramStandIn(BOT_TOKEN, [Chat(CHAT)], refuse_local_urls=False)
    with EmulatorServer(ntfy) as ntfy_http, EmulatorServer(tg) as tg_http:
        channels = [
            NtfyChannel(ntfy_http.url, "gpuc-alerts", NTFY_TOKEN),
            TelegramChannel(BOT_TOKEN, str(CHAT), tg_http.url),
        ]
        notifier = Notifier(home / "outbox.jsonl", channels, clock=clock, sleep=lambda s: None, secrets=PLANTED)
        world = phone_world(home, clock, notifier=notifier)
        with start_in_thread(world.settings, deps=world.deps) as server:
            world.use_public_url(server.url)  # the buttons' links point where the stand-ins can press them
            # The README's setup step: setWebhook with the secret_token.
            hooked = httpx.post(
                f"{tg_http.url}/bot{BOT_TOKEN}/setWebhook",
                json={"url": f"{server.url}/telegram", "secret_token": TG_SECRET},
            )
            assert hooked.status_code == 200
            world.register("p1")
            assert world.event("p1", "idle_warning", "idle 15 min: will destroy at 21:40").status == 200
            yield world, ntfy, tg, server.url
        notifier.close()


def test_ntfy_keep_button_pressed_acts_once(wired: Wired) -> None:
    world, ntfy, _, _ = wired  # the button POSTs to the watchdog's real /a/ route and its real verbs
    (published,) = ntfy.published
    assert [a["action"] for a in published["actions"]] == ["http", "view"]
    assert ntfy.press(0, "keep 1 h").status_code == 200
    pod = world.store.get_pod("p1")
    assert pod is not None and pod.lease_until is not None
    kept_until = pod.lease_until
    assert ntfy.press(0, "keep 1 h").status_code in (403, 410)  # the app retries, or a topic reader replays it
    again = world.store.get_pod("p1")
    assert again is not None and again.lease_until == kept_until


def test_ntfy_destroy_button_only_opens_its_page(wired: Wired) -> None:
    world, ntfy, _, _ = wired
    before = dump(world.deps)
    page = ntfy.press(0, "destroy now")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert leased(world) is None and dump(world.deps) == before  # a GET (a link scanner's too) never acts


def test_telegram_keep_button_pressed_acts_once(wired: Wired) -> None:
    world, _, tg, _ = wired
    (message,) = tg.sent
    assert [b["text"] for row in message.keyboard for b in row] == ["keep 1 h", "destroy now"]
    assert tg.press(message.message_id, "keep 1 h").status_code == 200
    assert leased(world) is not None
    assert tg.calls[-1]["method"] == "answerCallbackQuery" and str(tg.calls[-1]["text"]).startswith("kept 1 h more")
    tg.press(message.message_id, "keep 1 h")  # replayed
    assert "already used" in str(tg.calls[-1]["text"]) and leased(world) is not None


def test_telegram_forged_secret_end_to_end(wired: Wired) -> None:
    world, _, tg, _ = wired
    before = dump(world.deps)
    answer = tg.press(tg.sent[0].message_id, "keep 1 h", secret="forged-secret-000")
    assert answer.status_code == 401 and tg.calls == [] and leased(world) is None and dump(world.deps) == before
    assert tg.type_text(CHAT, "/destroy p1").status_code == 200 and leased(world) is None


def test_telegram_destroy_button_opens_its_page(wired: Wired) -> None:
    world, _, tg, server_url = wired
    page = tg.press(tg.sent[0].message_id, "destroy now")
    assert page.status_code == 200 and str(page.url).startswith(f"{server_url}/a/") and leased(world) is None


def test_no_planted_secret_in_any_output(wired: Wired, caplog: pytest.LogCaptureFixture) -> None:
    world, ntfy, tg, _ = wired
    caplog.set_level(logging.DEBUG)
    outputs = [tg.press(tg.sent[0].message_id, "keep 1 h").text, ntfy.press(0, "destroy now").text]
    outputs.append(tg.press(tg.sent[0].message_id, "keep 1 h", secret="forged").text)
    outputs.append(slack(world, slack_body("x"), secret="wrong")[1].__repr__())
    outputs += [json.dumps(m) for m in ntfy.published] + [s.text + json.dumps(s.keyboard) for s in tg.sent]
    # Every request the watchdog made to them (the user's own setWebhook call carries the secret: not ours)
    outputs += [json.dumps(c) for c in tg.calls] + [r.body for r in ntfy.requests + tg.requests if r.op != "setWebhook"]
    outputs.append((world.settings.home / "outbox.jsonl").read_text())
    outputs += [n.model_dump_json() for n in world.store.recent_notifications(100)]
    outputs.append(caplog.text)
    for secret in PLANTED:
        assert not any(secret in text for text in outputs), secret


def test_real_telegram_refuses_a_loopback_button_and_the_text_still_arrives(home: Path, clock: FakeClock) -> None:
    tg = TelegramStandIn(BOT_TOKEN, [Chat(CHAT)])  # refuses loopback URLs, as Telegram does
    with EmulatorServer(tg) as tg_http:
        notifier = Notifier(home / "outbox.jsonl", [TelegramChannel(BOT_TOKEN, str(CHAT), tg_http.url)], clock=clock)
        world = phone_world(home, clock, notifier=notifier)
        world.use_public_url("http://127.0.0.1:8787")
        world.register("p1")
        world.event("p1", "idle_warning", "idle 15 min")
        notifier.close()
    (message,) = tg.sent
    assert message.keyboard == [] and "keep 1 h: http://127.0.0.1:8787/a/" in message.text
