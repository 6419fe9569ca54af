"""Phone notifications: an outbox file that always receives, plus channels from GPUC_NOTIFY_URLS.

    ntfy://topic   ntfys://[token@]host/topic      (ntfy.sh when no host is given)
    pushover://user@token  (or pover://)            tgram://bottoken/chatid
    slack://hooks.slack.com/services/T/B/X  (or slack://T/B/X, or the https hook URL)
    discord://id/token  (or the https webhook URL)
    json://host/path  jsons://host/path  (or any other http(s) URL): generic JSON webhook, signed with
        GPUC_WEBHOOK_SECRET as X-Gpuc-Signature = HMAC-SHA256(secret, "<X-Gpuc-Timestamp>.<body>")
    anything else: an apprise URL, when the optional `apprise` extra is installed

Rules copied from healthchecks' transports: 3 tries with backoff on transient errors (429, 5xx,
network), stop at once on a permanent one (a 404 webhook, a blocked bot), at most 6 messages a minute
per destination (the excess goes out later as one "N more" message). `send` never raises: a dead phone
channel must never block a destroy (F13). URLs carry tokens, so logs name a channel by kind and host
only, and every text is redacted.

A message may carry `actions`: the watchdog's capability links, rendered natively where a
channel has buttons (ntfy `http`/`view` actions, Telegram inline keyboard, Slack block buttons) and as link
lines elsewhere. A channel that refuses the buttons gets the text with link lines instead.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.errors import ConfigError
from gpuc.core.redact import redact
from gpuc.core.signing import sign_webhook

if TYPE_CHECKING:
    import httpx

    from gpuc.core.settings import Settings

log = logging.getLogger("gpuc.notify")
# httpx logs every request's URL at INFO, and a Telegram channel's URL holds its bot token
# (api.telegram.org/bot<token>/sendMessage): under `watchdog serve` or Lambda's INFO logging that is the
# token in the logs. Its warnings still show.
logging.getLogger("httpx").setLevel(logging.WARNING)

# "low": news that costs nothing now (a balance above the cap): it must not wake a lock screen, or a user
# mutes the topic and misses "sync FAILED: pod kept, billing".
Level = Literal["low", "info", "warning", "error"]
OUTBOX_NAME = "outbox.jsonl"
TRIES = 3
BACKOFF_S = (1.0, 3.0)
RATE_PER_MINUTE = 6
NOTIFY_TIMEOUT_S = 10.0
_DISABLE_STATUSES = frozenset({401, 403, 404, 410})
# Bodies of a 400 that mean "this destination is dead", not "this message was bad" (Slack, Telegram,
# Pushover wording, per healthchecks' transports).
_DEAD_MARKERS = ("invalid_token", "chat not found", "bot was blocked", "user key is invalid", "no_service")
SCHEMES_HINT = (
    "use ntfy://topic, ntfys://host/topic, pushover://user@token, tgram://bottoken/chatid, "
    "slack://hooks.slack.com/services/..., discord://id/token, json://host/path or jsons://host/path "
    "(or install the apprise extra: pip install 'gpuc[apprise]')"
)


POD_TEXT_MAX = 500
# Every channel auto-links plain URLs and domain names (ntfy's app, Telegram, Slack mrkdwn, Discord), and
# pod text is whatever a stranger's machine chose to send: "your RunPod key was revoked, re-enter it at
# https://...". So a scheme loses its "tt", a dot between a name and a letter becomes "[.]", an IPv4
# address's dots too, and "<" / ">" (Slack's <url|text> links and <!channel> mentions) become look-alikes.
_SCHEME = re.compile(r"(?i)\b([a-z][a-z0-9+.-]{0,30}):(//|\\\\)")
_NAME_DOT = re.compile(r"(?<=\w)[.\u3002\uff0e\uff61](?=[^\W\d_])")
_IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
_ANY_DOT = re.compile(r"[\u3002\uff0e\uff61]")  # the ideographic and fullwidth full stops browsers map to "."


def counted(count: int, noun: str) -> str:
    """ "1 pod", "2 pods": what a notification counts, in words a person reads (never "pod(s)")."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def pod_says(text: str, limit: int = POD_TEXT_MAX) -> str:
    """Text that came from a pod, as every notification shows it: quoted and marked as the pod's, on one
    line, control and invisible characters stripped, every URL defanged (`hxxps://evil[.]example`), so
    nothing a pod says can pass for gpuc's own words, become a link or a button, or move a terminal."""
    return f'pod says: "{defang(text, limit)}"'


def provider_says(text: str, limit: int = 120) -> str:
    """A provider's own words about a pod (Vast's status texts come from the host's machine, a stranger's),
    as an alert quotes them: defanged as a pod's are. gpuc's own words around them are never defanged."""
    return defang(text, limit)


def defang(text: str, limit: int = POD_TEXT_MAX) -> str:
    """One line of pod text that no channel can turn into a link, a mention or a control sequence."""
    chars = []
    for ch in text:
        if ch in "\t\n\r\v\f\x85\u2028\u2029":
            chars.append(" ")
        elif unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co"):
            chars.append(ch)
    clean = " ".join("".join(chars).split())
    clean = _SCHEME.sub(_defang_scheme, clean)
    clean = _IPV4.sub(lambda m: m.group(0).replace(".", "[.]"), clean)
    clean = _NAME_DOT.sub("[.]", clean)
    clean = _ANY_DOT.sub("[.]", clean)
    clean = clean.replace("<", "\u2039").replace(">", "\u203a").replace('"', "'")
    return clean if len(clean) <= limit else clean[: limit - 1] + "\u2026"


def _defang_scheme(match: re.Match[str]) -> str:
    scheme = match.group(1)
    if scheme.lower() in ("http", "https"):
        return f"{scheme[0]}xx{scheme[3:]}://"
    return f"{scheme}[:]//"


class Action(NamedTuple):
    """A button on a notification. `url` is the watchdog's `/a/<token>`: a GET shows its
    confirmation page and never acts, a POST acts. `token` is the same link as a Telegram callback_data or
    a Slack button value. `safe`: it may act straight from the channel's own button; otherwise (destroy)
    the button only opens the confirmation page. Every part is the watchdog's own, never a pod's text."""

    label: str
    url: str
    token: str
    safe: bool


NTFY_ACTIONS_MAX = 3  # ntfy shows at most 3 action buttons


@dataclass(frozen=True)
class Message:
    ts: float
    title: str
    message: str
    pod_id: str | None = None
    kind: str = "info"
    level: Level = "info"
    actions: tuple[Action, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["actions"] = [action._asdict() for action in self.actions]
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Message:
        actions = tuple(Action(**a) for a in raw.pop("actions", ()))
        return cls(**raw, actions=actions)

    def plain(self) -> Message:
        """The text-only form: each action a link line to its confirmation page (the channels without
        buttons, and the fallback when a channel refuses a message's buttons)."""
        if not self.actions:
            return self
        lines = "".join(f"\n{action.label}: {action.url}" for action in self.actions)
        return replace(self, message=f"{self.message}{lines}", actions=())


class DeliveryFailed(Exception):
    """One failed attempt. `permanent` stops the retries; `dead` also disables the channel."""

    def __init__(self, detail: str, *, permanent: bool = False, dead: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.permanent = permanent or dead
        self.dead = dead


class Channel(ABC):
    """One destination. `label` is safe to log (kind and host, never a token or a topic)."""

    label: str = "channel"

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = tuple(s for s in secrets if s)

    @property
    def destination(self) -> str:
        """Rate-limit key: in memory only, never logged."""
        return f"{type(self).__name__}:{'|'.join(self.secrets)}:{self.label}"

    @abstractmethod
    def deliver(self, msg: Message, http: httpx.Client) -> None:
        """Send once; raise DeliveryFailed on any failure."""


class HttpChannel(Channel):
    def post(self, http: httpx.Client, url: str, **kwargs: Any) -> httpx.Response:
        import httpx  # loaded already (the client exists); kept off the module for the reason in _client

        from gpuc.core.transport import Deadline

        # One deadline for the whole exchange (core/transport.py), not a timeout per socket read.
        deadline = Deadline(time.monotonic() + NOTIFY_TIMEOUT_S)
        try:
            response = http.post(url, extensions={"timeout": deadline}, **kwargs)
        except httpx.HTTPError as exc:
            raise DeliveryFailed(f"{type(exc).__name__}") from None
        check_response(response)
        return response

    def buttons_or_text(self, msg: Message, send: Callable[[Message], None]) -> None:
        """Send with native buttons; if the service refuses the message as such (Telegram answers 400 to a
        button whose URL is a loopback address), send it again as text with link lines: a button must
        never cost the notification itself."""
        try:
            send(msg)
        except DeliveryFailed as exc:
            if not msg.actions or not exc.permanent or exc.dead:
                raise
            send(msg.plain())


def check_response(response: httpx.Response) -> None:
    status = response.status_code
    if status < 300:
        return
    if status == 429 or status >= 500:
        raise DeliveryFailed(f"HTTP {status}")
    body = response.text[:500].lower()
    dead = status in _DISABLE_STATUSES or any(marker in body for marker in _DEAD_MARKERS)
    raise DeliveryFailed(f"HTTP {status}", permanent=True, dead=dead)


def _emoji(level: str) -> str:
    return {"error": "rotating_light", "warning": "warning"}.get(level, "white_check_mark")


class NtfyChannel(HttpChannel):
    def __init__(self, base_url: str, topic: str, token: str | None = None) -> None:
        super().__init__([topic, token or ""])
        self.base_url, self.topic, self.token = base_url.rstrip("/"), topic, token
        self.label = f"ntfy {base_url.split('://', 1)[-1]}"

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        self.buttons_or_text(msg, lambda m: self._publish(m, http))

    def _publish(self, msg: Message, http: httpx.Client) -> None:
        priority = {"error": 5, "warning": 4, "low": 2}.get(msg.level, 3)
        payload: dict[str, Any] = {
            "topic": self.topic,
            "title": msg.title,
            "message": msg.message,
            "priority": priority,
            "tags": [_emoji(msg.level)],
        }
        if msg.actions:
            payload["actions"] = [ntfy_action(a) for a in msg.actions[:NTFY_ACTIONS_MAX]]
            if len(msg.actions) > NTFY_ACTIONS_MAX:
                payload["message"] = msg.message + "".join(
                    f"\n{a.label}: {a.url}" for a in msg.actions[NTFY_ACTIONS_MAX:]
                )
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.post(http, f"{self.base_url}/", json=payload, headers=headers)


def ntfy_action(action: Action) -> dict[str, Any]:
    """A safe verb is an `http` action: the ntfy app POSTs to the link (no body) when tapped, and the
    notification clears once it succeeded. Any other verb is a `view` action: it opens the confirmation
    page in the browser, whose GET never acts."""
    if action.safe:
        return {"action": "http", "label": action.label, "url": action.url, "method": "POST", "clear": True}
    return {"action": "view", "label": action.label, "url": action.url}


class PushoverChannel(HttpChannel):
    url = "https://api.pushover.net/1/messages.json"
    label = "pushover"

    def __init__(self, user: str, token: str) -> None:
        super().__init__([user, token])
        self.user, self.token = user, token

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        form = {
            "token": self.token,
            "user": self.user,
            "title": msg.title[:250],
            "message": _with_links(msg.plain().message, msg.message, 1024) or msg.title,
            "priority": {"error": "1", "low": "-1"}.get(msg.level, "0"),
        }
        self.post(http, self.url, data=form)


TELEGRAM_API = "https://api.telegram.org"


class TelegramChannel(HttpChannel):
    label = "telegram"

    def __init__(self, bot_token: str, chat_id: str, api: str = TELEGRAM_API) -> None:
        super().__init__([bot_token])
        self.bot_token, self.chat_id, self.api = bot_token, chat_id, api.rstrip("/")

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        self.buttons_or_text(msg, lambda m: self._send(m, http))

    def _send(self, msg: Message, http: httpx.Client) -> None:
        url = f"{self.api}/bot{self.bot_token}/sendMessage"
        payload: dict[str, Any] = {"chat_id": self.chat_id, "text": f"{msg.title}\n{msg.message}"[:4096]}
        if msg.actions:
            payload["reply_markup"] = {"inline_keyboard": [[telegram_button(a)] for a in msg.actions]}
        self.post(http, url, json=payload)


def telegram_button(action: Action) -> dict[str, str]:
    """A safe verb comes back to the watchdog's webhook as a callback_query carrying the token (<= 64
    bytes, Telegram's callback_data limit); any other verb opens its confirmation page."""
    if action.safe:
        return {"text": action.label, "callback_data": action.token}
    return {"text": action.label, "url": action.url}


class SlackChannel(HttpChannel):
    label = "slack"

    def __init__(self, url: str) -> None:
        super().__init__([url.split("/services/", 1)[-1]])
        self.url = url

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        self.buttons_or_text(msg, lambda m: self._send(m, http))

    def _send(self, msg: Message, http: httpx.Client) -> None:
        text = f"*{msg.title}*\n{msg.message}"[:3000]
        payload: dict[str, Any] = {"text": text}
        if msg.actions:
            buttons = [slack_button(i, a) for i, a in enumerate(msg.actions)]
            payload["blocks"] = [
                {"type": "section", "text": {"type": "mrkdwn", "text": text}},
                {"type": "actions", "elements": buttons},
            ]
        self.post(http, self.url, json=payload)


def slack_button(index: int, action: Action) -> dict[str, Any]:
    """A safe verb's tap comes back to /slack/actions, signed, with the token as the button's value; any
    other verb's button opens its confirmation page (Slack still posts the click, which acts on nothing)."""
    button: dict[str, Any] = {
        "type": "button",
        "action_id": f"gpuc_{index}",
        "text": {"type": "plain_text", "text": action.label[:75]},
    }
    if action.safe:
        button["value"] = action.token
    else:
        button.update(url=action.url, style="danger")
    return button


class DiscordChannel(HttpChannel):
    label = "discord"

    def __init__(self, url: str) -> None:
        super().__init__([url.split("/webhooks/", 1)[-1]])
        self.url = url

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        # No @everyone / @here / <@id> from any text, whoever wrote it: mentions are never parsed.
        content = _with_links(f"**{msg.title}**\n{msg.plain().message}", f"**{msg.title}**\n{msg.message}", 2000)
        self.post(http, self.url, json={"content": content, "allowed_mentions": {"parse": []}})


def _with_links(with_links: str, text: str, limit: int) -> str:
    """`with_links` cut to `limit`, the text giving way first: a link line cut in half opens nothing."""
    if len(with_links) <= limit:
        return with_links
    links = with_links[len(text) :]
    if len(links) >= limit:
        return text[:limit]
    return text[: limit - len(links) - 1] + "\u2026" + links


class WebhookChannel(HttpChannel):
    def __init__(self, url: str, secret: str | None) -> None:
        super().__init__([url.split("://", 1)[-1].split("/", 1)[-1], secret or ""])
        self.url, self.secret = url, secret
        self.label = f"webhook {url.split('://', 1)[-1].split('/', 1)[0]}"

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        # The actions go both ways: as link lines in `message` (for a receiver that forwards the text) and
        # as `actions` (label, url, token, safe) for one that renders buttons.
        fields = {**msg.as_dict(), "message": msg.plain().message}
        body = json.dumps(fields, separators=(",", ":")).encode()
        timestamp = int(msg.ts)
        headers = {"Content-Type": "application/json", "X-Gpuc-Timestamp": str(timestamp)}
        if self.secret:
            headers["X-Gpuc-Signature"] = sign_webhook(self.secret, timestamp, body)
        self.post(http, self.url, content=body, headers=headers)


class AppriseChannel(Channel):
    label = "apprise"

    def __init__(self, url: str, apprise_module: Any) -> None:
        super().__init__([url.split("://", 1)[-1]])
        self.label = f"apprise {url.split('://', 1)[0]}"
        self._apprise = apprise_module.Apprise()
        if not self._apprise.add(url):
            raise ConfigError(
                f"apprise does not accept the {url.split('://', 1)[0]}:// URL in GPUC_NOTIFY_URLS",
                hint="check the URL against the apprise documentation",
            )

    def deliver(self, msg: Message, http: httpx.Client) -> None:
        if not self._apprise.notify(title=msg.title, body=msg.plain().message or msg.title):
            raise DeliveryFailed("apprise reported a failure")


def parse_channels(spec: str | None, webhook_secret: str | None = None) -> list[Channel]:
    """Channels from a comma-separated list of URLs. Errors name the position, never the URL."""
    out: list[Channel] = []
    for index, raw in enumerate((spec or "").split(","), start=1):
        if raw.strip():
            out.append(parse_channel(raw.strip(), webhook_secret, index))
    return out


def parse_channel(url: str, webhook_secret: str | None = None, index: int = 1) -> Channel:
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or not rest:
        raise ConfigError(f"notification URL #{index} in GPUC_NOTIFY_URLS is not a URL", hint=SCHEMES_HINT)
    builder = _BUILDERS.get(scheme)
    if builder is not None:
        return builder(scheme, rest, webhook_secret, index)
    return _apprise_channel(url, scheme, index)


def _bad(index: int, scheme: str, shape: str) -> ConfigError:
    return ConfigError(f"notification URL #{index} ({scheme}://) is malformed", hint=f"write it as {shape}")


def _ntfy(scheme: str, rest: str, secret: str | None, index: int) -> Channel:
    token, _, location = rest.rpartition("@")
    host, _, topic = location.partition("/")
    if not topic:
        host, topic = "ntfy.sh", host
    topic = topic.strip("/")
    if not topic or "/" in topic:
        raise _bad(index, scheme, f"{scheme}://topic or {scheme}://[token@]host/topic")
    secure = scheme == "ntfys" or host == "ntfy.sh"
    return NtfyChannel(f"{'https' if secure else 'http'}://{host}", topic, token or None)


def _pushover(scheme: str, rest: str, secret: str | None, index: int) -> Channel:
    user, _, token = rest.partition("@")
    token = token.strip("/")
    if not user or not token or "/" in token:
        raise _bad(index, scheme, "pushover://USER_KEY@APP_TOKEN")
    return PushoverChannel(user, token)


def _telegram(scheme: str, rest: str, secret: str | None, index: int) -> Channel:
    token, _, chat = rest.strip("/").partition("/")
    if not token or not chat or "/" in chat:
        raise _bad(index, scheme, "tgram://BOT_TOKEN/CHAT_ID")
    return TelegramChannel(token, chat)


def _slack(scheme: str, rest: str, secret: str | None, index: int) -> Channel:
    if rest.startswith("hooks.slack.com/services/"):
        return SlackChannel(f"https://{rest}")
    parts = rest.strip("/").split("/")
    if len(parts) != 3 or not all(parts):
        raise _bad(index, scheme, "slack://hooks.slack.com/services/T.../B.../XXX or slack://T.../B.../XXX")
    return SlackChannel("https://hooks.slack.com/services/" + "/".join(parts))


def _discord(scheme: str, rest: str, secret: str | None, index: int) -> Channel:
    parts = rest.strip("/").split("/")
    if len(parts) != 2 or not all(parts):
        raise _bad(index, scheme, "discord://WEBHOOK_ID/WEBHOOK_TOKEN")
    return DiscordChannel(f"https://discord.com/api/webhooks/{parts[0]}/{parts[1]}")


def _webhook(scheme: str, rest: str, secret: str | None, index: int) -> Channel:
    host = rest.split("/", 1)[0]
    if not host:
        raise _bad(index, scheme, f"{scheme}://host/path")
    real_scheme = "https" if scheme in ("jsons", "https") else "http"
    url = f"{real_scheme}://{rest}"
    if scheme in ("http", "https"):
        if host == "hooks.slack.com":
            return SlackChannel(url)
        if host in ("discord.com", "discordapp.com") and "/api/webhooks/" in rest:
            return DiscordChannel(url)
    return WebhookChannel(url, secret)


_BUILDERS: dict[str, Callable[[str, str, str | None, int], Channel]] = {
    "ntfy": _ntfy,
    "ntfys": _ntfy,
    "pushover": _pushover,
    "pover": _pushover,
    "tgram": _telegram,
    "slack": _slack,
    "discord": _discord,
    "json": _webhook,
    "jsons": _webhook,
    "http": _webhook,
    "https": _webhook,
}


def _apprise_channel(url: str, scheme: str, index: int) -> Channel:
    try:
        import apprise  # optional: the `apprise` extra
    except ImportError:
        raise ConfigError(
            f"notification URL #{index} uses the unknown scheme {scheme!r}", hint=SCHEMES_HINT
        ) from None
    return AppriseChannel(url, apprise)


@dataclass
class _Bucket:
    """Token bucket: RATE_PER_MINUTE per destination (healthchecks' TokenBucket)."""

    tokens: float = float(RATE_PER_MINUTE)
    updated: float | None = None
    held: list[str] = field(default_factory=list)

    def take(self, now: float) -> bool:
        if self.updated is not None:
            self.tokens = min(
                float(RATE_PER_MINUTE), self.tokens + (now - self.updated) * RATE_PER_MINUTE / 60
            )
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class Notifier:
    """Outbox first (always), then every channel. Thread-safe; `send` and `flush` never raise."""

    def __init__(
        self,
        outbox: Path,
        channels: Sequence[Channel] = (),
        *,
        clock: Clock | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        secrets: Iterable[str] = (),
    ) -> None:
        self.outbox = outbox
        self.channels = list(channels)
        self.clock = clock or SystemClock()
        self._transport = transport
        self._sleep = sleep
        # Messages are scrubbed of the user's secrets; log lines also of every channel's own tokens. A topic
        # such as "gpuc" is not scrubbed from message text, where it would mangle every title.
        self._secrets = [s for s in secrets if s]
        self._log_secrets = self._secrets + [s for ch in self.channels for s in ch.secrets]
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}
        self._dead: set[str] = set()

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        clock: Clock | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> Notifier:
        """Raises ConfigError on a malformed GPUC_NOTIFY_URLS: better at start-up than at 3 am."""
        urls = settings.notify_urls.get_secret_value() if settings.notify_urls else None
        secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
        channels = parse_channels(urls, secret)
        return cls(
            settings.home / OUTBOX_NAME,
            channels,
            clock=clock,
            transport=transport,
            sleep=sleep,
            secrets=settings.secret_values(),
        )

    def send(
        self,
        title: str,
        message: str,
        *,
        pod_id: str | None = None,
        kind: str = "info",
        level: Level = "info",
        actions: Sequence[Action] = (),
    ) -> None:
        try:
            text = self._clean(message)
            msg = Message(self.clock.now(), self._clean(title), text, pod_id, kind, level, tuple(actions))
            self._append(msg)
            for channel in self.channels:
                self._fan_out(channel, msg)
        except Exception as exc:  # a notification must never break its caller (F13)
            log.error("notification failed: %s", self._clean_log(f"{type(exc).__name__}: {exc}"))

    def flush(self) -> None:
        """Send each destination's held-back messages as one "N more" message, when the limit allows."""
        try:
            for channel in self.channels:
                held = self._release_held(channel)
                if held:
                    self._deliver(channel, self._grouped(held))
        except Exception as exc:
            log.error("notification flush failed: %s", type(exc).__name__)

    def close(self) -> None:
        if self._http is not None and self._transport is not None:  # the shared client stays the process's
            self._http.close()
        self._http = None

    def _clean(self, text: str) -> str:
        return redact(text, self._secrets)

    def _clean_log(self, text: str) -> str:
        return redact(text, self._log_secrets)

    def _append(self, msg: Message) -> None:
        self.outbox.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(msg.as_dict(), ensure_ascii=False) + "\n").encode()
        with self._lock:
            fd = os.open(self.outbox, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)  # one write of one line: a crash never leaves half a record mid-file
            finally:
                os.close(fd)

    def _fan_out(self, channel: Channel, msg: Message) -> None:
        if channel.destination in self._dead:
            return
        with self._lock:
            bucket = self._buckets.setdefault(channel.destination, _Bucket())
            if not bucket.take(msg.ts):
                bucket.held.append(msg.title)
                return
            held, bucket.held = bucket.held, []
        if held:
            msg = replace(msg, message=f"{msg.message}\n(+{len(held)} more: {'; '.join(held)})")
        self._deliver(channel, msg)

    def _release_held(self, channel: Channel) -> list[str]:
        with self._lock:
            bucket = self._buckets.get(channel.destination)
            if channel.destination in self._dead or bucket is None or not bucket.held:
                return []
            if not bucket.take(self.clock.now()):
                return []
            held, bucket.held = bucket.held, []
            return held

    def _grouped(self, titles: list[str]) -> Message:
        text = "; ".join(titles)
        return Message(
            self.clock.now(), f"gpuc: {len(titles)} more notifications", text, None, "group", "info"
        )

    def _deliver(self, channel: Channel, msg: Message) -> bool:
        for attempt in range(TRIES):
            try:
                channel.deliver(msg, self._client())
                return True
            except DeliveryFailed as exc:
                if exc.dead:
                    self._dead.add(channel.destination)
                    log.error(
                        "notify via %s failed for good (%s): channel disabled", channel.label, exc.detail
                    )
                    return False
                log.warning(
                    "notify via %s failed (%s), try %d/%d", channel.label, exc.detail, attempt + 1, TRIES
                )
                if exc.permanent:
                    return False
            except Exception as exc:
                log.warning("notify via %s failed (%s)", channel.label, type(exc).__name__)
            if attempt + 1 < TRIES:
                self._sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
        return False

    def _client(self) -> httpx.Client:
        if self._http is None:
            # Lazy: every Lambda cold start (a heartbeat's too) loads this module; httpx (~60 ms) only to send.
            from gpuc.core.transport import new_client, shared_client

            # The process's one client; a test's in-process server gets a client of its own.
            self._http = new_client(self._transport) if self._transport is not None else shared_client()
        return self._http


def read_outbox(path: Path) -> list[Message]:
    """Every message in an outbox file, oldest first; a torn last line (a crash mid-write) is skipped."""
    if not path.exists():
        return []
    out: list[Message] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(Message.from_dict(json.loads(line)))
        except (ValueError, TypeError):
            continue
    return out
