"""One class per phone service (ntfy, Pushover, Telegram, Slack, Discord, a signed JSON webhook, apprise),
each rendering a Message its own way: the watchdog's buttons natively where the service has buttons, link
lines elsewhere. A failed attempt is a DeliveryFailed; the Notifier retries it."""

from __future__ import annotations

import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gpuc.core.errors import ConfigError
from gpuc.core.notify.message import NTFY_ACTIONS_MAX, Action, Message
from gpuc.core.signing import sign_webhook

if TYPE_CHECKING:
    import httpx

# httpx logs every request's URL at INFO, and a Telegram channel's URL holds its bot token
# (api.telegram.org/bot<token>/sendMessage): under `watchdog serve` or Lambda's INFO logging that is the
# token in the logs. Its warnings still show.
logging.getLogger("httpx").setLevel(logging.WARNING)

NOTIFY_TIMEOUT_S = 10.0
_DISABLE_STATUSES = frozenset({401, 403, 404, 410})
# Bodies of a 400 that mean "this destination is dead", not "this message was bad" (Slack, Telegram,
# Pushover wording, per healthchecks' transports).
_DEAD_MARKERS = ("invalid_token", "chat not found", "bot was blocked", "user key is invalid", "no_service")


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
