"""Notification channels: request shapes, retries, permanent errors, the rate limit, the outbox,
and secrets kept out of logs and errors. No test touches the network: httpx.MockTransport answers."""

from __future__ import annotations

import json
import logging
import stat
import sys
import types
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote_plus

import httpx
import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError
from gpuc.core.notify.channels import WebhookChannel
from gpuc.core.notify.notifier import BACKOFF_S, Notifier, read_outbox
from gpuc.core.notify.urls import parse_channel, parse_channels
from gpuc.core.settings import Settings
from gpuc.core.signing import sign_webhook

Handler = Callable[[httpx.Request], httpx.Response]


class Phone:
    """A fake of every notification service: records requests, answers with `answer`."""

    def __init__(self, answer: Handler | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.answer = answer or (lambda request: httpx.Response(200, json={"ok": True}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.answer(request)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)


def notifier_for(tmp_path: Path, urls: str, phone: Phone, clock: FakeClock, **kw: object) -> Notifier:
    sleeps: list[float] = kw.pop("sleeps", [])  # type: ignore[assignment]
    channels = parse_channels(urls, kw.pop("secret", None))  # type: ignore[arg-type]
    return Notifier(tmp_path / "outbox.jsonl", channels, clock=clock, transport=phone.transport, sleep=sleeps.append)


@pytest.mark.parametrize(
    ("url", "expected_url"),
    [
        ("ntfy://gpuc-alerts-x7", "https://ntfy.sh/"),
        ("ntfy://ntfy.lan/gpuc", "http://ntfy.lan/"),
        ("ntfys://tk_secret@ntfy.example.com/gpuc", "https://ntfy.example.com/"),
        ("pushover://userkey123@apptoken456", "https://api.pushover.net/1/messages.json"),
        ("pover://userkey123@apptoken456", "https://api.pushover.net/1/messages.json"),
        ("tgram://123456:ABC-def/-100123", "https://api.telegram.org/bot123456:ABC-def/sendMessage"),
        ("slack://hooks.slack.com/services/T1/B2/X3", "https://hooks.slack.com/services/T1/B2/X3"),
        ("slack://T1/B2/X3", "https://hooks.slack.com/services/T1/B2/X3"),
        ("https://hooks.slack.com/services/T1/B2/X3", "https://hooks.slack.com/services/T1/B2/X3"),
        ("discord://123/tok", "https://discord.com/api/webhooks/123/tok"),
        ("https://discord.com/api/webhooks/123/tok", "https://discord.com/api/webhooks/123/tok"),
        ("json://example.com/hook", "http://example.com/hook"),
        ("jsons://example.com/hook", "https://example.com/hook"),
        ("https://example.com/any/hook", "https://example.com/any/hook"),
    ],
)
def test_each_channel_posts_to_its_service(tmp_path: Path, clock: FakeClock, url: str, expected_url: str) -> None:
    phone = Phone()
    notifier_for(tmp_path, url, phone, clock).send("gpuc: destroyed gpuc-abcd", "p1: silent", level="warning")
    assert len(phone.requests) == 1
    request = phone.requests[0]
    assert request.method == "POST"
    assert str(request.url) == expected_url
    assert "gpuc: destroyed gpuc-abcd" in unquote_plus(request.content.decode())


def test_ntfy_sends_topic_priority_and_token(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier_for(tmp_path, "ntfys://tk_secret@ntfy.example.com/gpuc", phone, clock).send("t", "m", level="error")
    body = json.loads(phone.requests[0].content)
    assert (body["topic"], body["title"], body["message"], body["priority"]) == ("gpuc", "t", "m", 5)
    assert phone.requests[0].headers["Authorization"] == "Bearer tk_secret"


def test_pushover_and_telegram_payloads(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier_for(tmp_path, "pushover://U@T,tgram://1:A/42", phone, clock).send("title", "message")
    form = dict(httpx.QueryParams(phone.requests[0].content.decode()))
    assert (form["user"], form["token"], form["title"], form["message"]) == ("U", "T", "title", "message")
    assert json.loads(phone.requests[1].content) == {"chat_id": "42", "text": "title\nmessage"}


def test_the_generic_webhook_is_signed(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier_for(tmp_path, "jsons://example.com/hook", phone, clock, secret="whsec").send("t", "m", pod_id="p1")
    request = phone.requests[0]
    timestamp = int(request.headers["X-Gpuc-Timestamp"])
    assert request.headers["X-Gpuc-Signature"] == sign_webhook("whsec", timestamp, request.content)
    assert json.loads(request.content)["pod_id"] == "p1"
    unsigned = parse_channel("json://example.com/hook", None)
    assert isinstance(unsigned, WebhookChannel) and unsigned.secret is None


def test_discord_and_telegram_texts_are_cut_to_their_limits(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier_for(tmp_path, "discord://1/t,tgram://1:A/42", phone, clock).send("t", "x" * 10_000)
    assert len(json.loads(phone.requests[0].content)["content"]) == 2000
    assert len(json.loads(phone.requests[1].content)["text"]) == 4096


@pytest.mark.parametrize(
    "url",
    [
        "ntfy://",
        "pushover://nouser",
        "tgram://tokenonly",
        "slack://a/b",
        "discord://only-id",
        "nourl",
        "json:///x",
    ],
)
def test_a_malformed_url_is_a_config_error_that_does_not_echo_it(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_channels(f"ntfy://fine-topic,{url}")
    assert "#2" in info.value.message
    assert info.value.hint
    rest = url.partition("://")[2]
    if rest:
        assert rest not in str(info.value)


def test_an_unknown_scheme_without_apprise_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # apprise is an optional extra: a None entry in sys.modules makes `import apprise` fail as if it
    # were absent, whether or not this machine has it installed.
    monkeypatch.setitem(sys.modules, "apprise", None)
    with pytest.raises(ConfigError) as info:
        parse_channels("mailto://user:hunter2@example.com")
    assert "mailto" in info.value.message
    assert "hunter2" not in str(info.value)
    assert "apprise" in (info.value.hint or "")


class _FakeApprise:
    """Stands in for apprise.Apprise, so the with-apprise path runs whether or not the extra is installed."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.sent: list[tuple[str, str]] = []

    def add(self, url: str) -> bool:
        self.urls.append(url)
        return url.startswith("mailto://")

    def notify(self, title: str, body: str) -> bool:
        self.sent.append((title, body))
        return True


def test_an_unknown_scheme_goes_to_apprise_when_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "apprise", types.SimpleNamespace(Apprise=_FakeApprise))
    [channel] = parse_channels("mailto://user:hunter2@example.com")
    assert type(channel).__name__ == "AppriseChannel"
    assert "hunter2" not in channel.label
    with pytest.raises(ConfigError) as info:
        parse_channels("bogus://user:hunter2@example.com")
    assert "bogus" in info.value.message and "hunter2" not in str(info.value)


def test_a_transient_error_is_tried_three_times_with_backoff(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone(lambda r: httpx.Response(503))
    sleeps: list[float] = []
    notifier = notifier_for(tmp_path, "ntfy://topic-x", phone, clock, sleeps=sleeps)
    notifier.send("t", "m")
    assert len(phone.requests) == 3
    assert sleeps == list(BACKOFF_S)
    notifier.send("t2", "m")  # not disabled: the next message tries again
    assert len(phone.requests) == 6


def test_a_network_error_is_retried_too(tmp_path: Path, clock: FakeClock) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    phone = Phone(refuse)
    notifier_for(tmp_path, "discord://1/tok", phone, clock).send("t", "m")
    assert len(phone.requests) == 3


@pytest.mark.parametrize(
    ("url", "answer"),
    [
        ("https://hooks.slack.com/services/T/B/X", httpx.Response(404, text="no_service")),
        ("discord://1/tok", httpx.Response(404)),
        (
            "tgram://1:A/42",
            httpx.Response(403, json={"description": "Forbidden: bot was blocked by the user"}),
        ),
        ("tgram://1:A/42", httpx.Response(400, json={"description": "Bad Request: chat not found"})),
        ("pushover://U@T", httpx.Response(400, json={"errors": ["user key is invalid"]})),
        ("json://example.com/hook", httpx.Response(401)),
    ],
)
def test_a_dead_destination_stops_at_once_and_is_disabled(
    tmp_path: Path, clock: FakeClock, url: str, answer: httpx.Response
) -> None:
    phone = Phone(lambda r: answer)
    notifier = notifier_for(tmp_path, url, phone, clock)
    notifier.send("t", "m")
    notifier.send("t2", "m")
    assert len(phone.requests) == 1
    assert [m.title for m in read_outbox(tmp_path / "outbox.jsonl")] == ["t", "t2"]


def test_a_bad_message_is_not_retried_but_the_channel_stays(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone(lambda r: httpx.Response(400, text="message too long"))
    notifier = notifier_for(tmp_path, "ntfy://topic-x", phone, clock)
    notifier.send("t", "m")
    notifier.send("t2", "m")
    assert len(phone.requests) == 2


def test_at_most_six_a_minute_per_destination_the_rest_grouped(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier = notifier_for(tmp_path, "ntfy://topic-a,ntfy://topic-b", phone, clock)
    for i in range(8):
        notifier.send(f"m{i}", "x")
    topics = [json.loads(r.content)["topic"] for r in phone.requests]
    assert topics.count("topic-a") == topics.count("topic-b") == 6  # each destination has its own budget
    clock.advance(10)  # one token back per 10 s
    notifier.flush()
    grouped = [json.loads(r.content) for r in phone.requests[12:]]
    assert [(g["title"], g["message"]) for g in grouped] == [("gpuc: 2 more notifications", "m6; m7")] * 2
    notifier.flush()
    assert len(phone.requests) == 14  # nothing held any more
    assert len(read_outbox(tmp_path / "outbox.jsonl")) == 8  # the outbox has every message


def test_held_messages_ride_along_with_the_next_one(tmp_path: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier = notifier_for(tmp_path, "ntfy://topic-a", phone, clock)
    for i in range(7):
        notifier.send(f"m{i}", "x")
    clock.advance(60)
    notifier.send("m7", "body")
    last = json.loads(phone.requests[-1].content)
    assert (last["title"], last["message"]) == ("m7", "body\n(+1 more: m6)")


def test_the_outbox_is_private_and_survives_a_torn_line(tmp_path: Path, clock: FakeClock) -> None:
    notifier = notifier_for(tmp_path, "", Phone(), clock)
    notifier.send("one", "m", pod_id="p1", kind="mark", level="warning")
    outbox = tmp_path / "outbox.jsonl"
    assert stat.S_IMODE(outbox.stat().st_mode) == 0o600
    with outbox.open("a") as fh:
        fh.write('{"ts": 1, "title": "tor')
    messages = read_outbox(outbox)
    assert [(m.title, m.pod_id, m.kind, m.level) for m in messages] == [("one", "p1", "mark", "warning")]
    assert read_outbox(tmp_path / "absent.jsonl") == []


def test_send_never_raises_and_never_logs_a_token(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    token = "987654:SECRETBOTTOKEN"

    def explode(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect to {request.url}", request=request)

    caplog.set_level(logging.DEBUG)
    notifier = notifier_for(tmp_path, f"tgram://{token}/42", Phone(explode), clock)
    notifier.send("t", "m")
    assert "SECRETBOTTOKEN" not in caplog.text
    assert "telegram" in caplog.text
    notifier.outbox = tmp_path / "file-not-dir" / "x"  # make even the outbox write fail
    (tmp_path / "file-not-dir").write_text("")
    notifier.send("t", "m")  # does not raise
    assert "SECRETBOTTOKEN" not in caplog.text


def test_messages_are_scrubbed_of_the_users_secrets(tmp_path: Path, clock: FakeClock) -> None:
    settings = Settings(home=tmp_path, hf_token="hf_realtokenvalue123", notify_urls="ntfy://topic-z")  # type: ignore[arg-type]
    phone = Phone()
    notifier = Notifier.from_settings(settings, clock=clock, transport=phone.transport)
    notifier.send("leak?", "token is hf_realtokenvalue123 and sk-abcdefghijkl")
    assert b"hf_realtokenvalue123" not in phone.requests[0].content
    assert b"sk-abcdefghijkl" not in phone.requests[0].content
    assert "hf_realtokenvalue123" not in (tmp_path / "outbox.jsonl").read_text()


def test_from_settings_with_no_urls_writes_only_the_outbox(tmp_path: Path, clock: FakeClock) -> None:
    notifier = Notifier.from_settings(Settings(home=tmp_path), clock=clock)
    assert notifier.channels == []
    notifier.send("t", "m")
    assert read_outbox(tmp_path / "outbox.jsonl")[0].ts == clock.now()
