"""Text from a pod reaches the phone quoted, marked as the pod's, with every URL defanged.

A Vast pod runs on a stranger's machine: its token signs whatever that machine wants to say, such as
"your RunPod key was revoked, re-enter it at https://...". Tested through the real event handler and
every channel's real payload builder, answered by httpx.MockTransport.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote_plus

import httpx
from fakes.watchdog import make_world
from hypothesis import given
from hypothesis import strategies as st

from gpuc.core.clock import FakeClock
from gpuc.core.notify.message import defang, pod_says
from gpuc.core.notify.notifier import Notifier
from gpuc.core.notify.urls import parse_channels

PHISHING = (
    "your RunPod key was revoked, re-enter it at https://runpod-login.evil.example/reset?k=1 "
    "or HTTP://www.evil.example or evil\u3002example or 203.0.113.7:8080 "
    "\x1b]0;gpuc: job exited with code 0\x07\x1b[2J\u202eevil <https://evil.example|click here> <!channel> @everyone\n"
    'gpuc: results saved "s3://elsewhere/"'
)
CHANNELS = (
    "ntfy://gpuc-alerts-x7,pushover://userkey123@apptoken456,tgram://123456:ABC-def/-100123,"
    "slack://T1/B2/X3,discord://123/tok,jsons://hooks.example.org/gpuc"
)
# What a chat client turns into a link: a scheme, or a name.tld (ntfy, Telegram, Slack and Discord all
# auto-link plain domain names), or Slack's <...> link and mention syntax.
LINKABLE = re.compile(
    r"(?i)(\b(?!hxxps?://)[a-z][a-z0-9+.-]*://|\w[.\u3002\uff0e\uff61][^\W\d_]|<|>|\d+\.\d+\.\d+\.\d+)"
)


class Phone:
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json={"ok": True})


def texts(request: httpx.Request) -> list[str]:
    """The text fields a service shows, whatever its payload format."""
    raw = request.content.decode()
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        fields = dict(part.split("=", 1) for part in raw.split("&"))
        return [unquote_plus(fields["message"]), unquote_plus(fields["title"])]
    body = json.loads(raw)
    return [str(body[k]) for k in ("message", "text", "content", "title") if k in body]


def test_a_phishing_event_reaches_every_channel_quoted_and_defanged(home: Path, clock: FakeClock) -> None:
    phone = Phone()
    notifier = Notifier(
        home / "outbox.jsonl", parse_channels(CHANNELS, "s3cret"), clock=clock, transport=httpx.MockTransport(phone)
    )
    world = make_world(home, clock, notifier=notifier)
    world.register("p1")
    assert world.event("p1", "info", PHISHING).status == 200
    assert {r.url.host for r in phone.requests} == {
        "ntfy.sh",
        "api.pushover.net",
        "api.telegram.org",
        "hooks.slack.com",
        "discord.com",
        "hooks.example.org",
    }
    for request in phone.requests:
        message = texts(request)[0]
        assert 'pod says: "your RunPod key was revoked' in message, request.url.host
        quoted = message.split('pod says: "', 1)[1].rsplit('"', 1)[0]
        assert not LINKABLE.search(quoted), (request.url.host, quoted)
        assert "hxxps://runpod-login[.]evil[.]example/reset" in quoted
        assert not [c for c in quoted if unicodedata.category(c) in ("Cc", "Cf")], request.url.host
        assert '"s3://' not in message  # the pod cannot close the quote and speak as gpuc
    discord = next(r for r in phone.requests if r.url.host == "discord.com")
    assert json.loads(discord.content)["allowed_mentions"] == {"parse": []}
    logged = world.store.recent_notifications()[-1]
    assert "https://" not in logged.message and "pod says:" in logged.message  # `gpuc ls` shows the same


@given(st.text(max_size=300))
def test_defanged_pod_text_is_one_line_with_nothing_linkable(text: str) -> None:
    out = defang(text)
    assert not LINKABLE.search(out)
    assert not [c for c in out if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co")]
    assert '"' not in out and len(out) <= 500
    assert pod_says(text).startswith('pod says: "') and pod_says(text).endswith('"')


@given(st.from_regex(r"(https?|ftp)://[a-z]{1,10}(\.[a-z]{2,6}){1,3}(/[a-z0-9]{0,8})?", fullmatch=True))
def test_every_url_is_defanged(url: str) -> None:
    out = defang(f"see {url} now")
    assert "://" not in out or out.count("xx") >= 1
    assert "." not in out.replace("[.]", "")


def test_ordinary_pod_text_stays_readable() -> None:
    assert pod_says("job exited with code 0 after 3.5 min") == 'pod says: "job exited with code 0 after 3.5 min"'
    assert defang("loss=0.125\ttook 2.0 s\nok") == "loss=0.125 took 2.0 s ok"
