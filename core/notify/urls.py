"""GPUC_NOTIFY_URLS read into channels, one builder per scheme. Errors name the URL's position, never the
URL (it carries a token).

    ntfy://topic   ntfys://[token@]host/topic      (ntfy.sh when no host is given)
    pushover://user@token  (or pover://)            tgram://bottoken/chatid
    slack://hooks.slack.com/services/T/B/X  (or slack://T/B/X, or the https hook URL)
    discord://id/token  (or the https webhook URL)
    json://host/path  jsons://host/path  (or any other http(s) URL): generic JSON webhook, signed with
        GPUC_WEBHOOK_SECRET as X-Gpuc-Signature = HMAC-SHA256(secret, "<X-Gpuc-Timestamp>.<body>")
    anything else: an apprise URL, when the optional `apprise` extra is installed
"""

from __future__ import annotations

from collections.abc import Callable

from gpuc.core.errors import ConfigError
from gpuc.core.notify.channels import (
    AppriseChannel,
    Channel,
    DiscordChannel,
    NtfyChannel,
    PushoverChannel,
    SlackChannel,
    TelegramChannel,
    WebhookChannel,
)

SCHEMES_HINT = (
    "use ntfy://topic, ntfys://host/topic, pushover://user@token, tgram://bottoken/chatid, "
    "slack://hooks.slack.com/services/..., discord://id/token, json://host/path or jsons://host/path "
    "(or install the apprise extra: pip install 'gpuc[apprise]')"
)


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
        raise ConfigError(f"notification URL #{index} uses the unknown scheme {scheme!r}", hint=SCHEMES_HINT) from None
    return AppriseChannel(url, apprise)
