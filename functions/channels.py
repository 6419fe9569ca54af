"""Which notification channels are live where.

The watchdog used to read GPUC_NOTIFY_URLS once, at its start: a channel added to `.env` afterwards reached
no phone, and nothing said so. Now the local watchdog (`gpuc watchdog serve`) re-reads its channels when
`.env` changes (one stat per notification), its status lists the channels it holds (by index and kind,
never a URL: URLs carry tokens), and `channel_gaps` tells the laptop which of its own the watchdog lacks (a
deployed watchdog holds what was deployed: the fix there is a redeploy). `send_test` sends one message
through each channel and through the watchdog, and says which were accepted.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuc.core.api import ChannelInfo
from gpuc.core.errors import GpucError
from gpuc.core.loopback import loopback_host
from gpuc.core.notify.channels import Channel, DeliveryFailed
from gpuc.core.notify.message import Action, Level, Message, counted
from gpuc.core.notify.notifier import Notifier
from gpuc.core.notify.urls import parse_channels
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("gpuc.notify")

_KINDS = {
    "NtfyChannel": "ntfy",
    "PushoverChannel": "pushover",
    "TelegramChannel": "telegram",
    "SlackChannel": "slack",
    "DiscordChannel": "discord",
    "WebhookChannel": "webhook",
    "AppriseChannel": "apprise",
}
TEST_TITLE = "gpuc: test message"


def kind_of(channel: Channel) -> str:
    return _KINDS.get(type(channel).__name__, "other")


def describe(channels: Sequence[Channel]) -> list[ChannelInfo]:
    return [ChannelInfo(index=i, kind=kind_of(ch)) for i, ch in enumerate(channels, start=1)]


def settings_channels(settings: Settings) -> list[Channel]:
    """The channels a Settings names (raises ConfigError on a malformed URL, naming its position only)."""
    urls = settings.notify_urls.get_secret_value() if settings.notify_urls else None
    secret = settings.webhook_secret.get_secret_value() if settings.webhook_secret else None
    return parse_channels(urls, secret)


def held_channels(notifier: object) -> list[ChannelInfo] | None:
    """What a watchdog's notifier holds now, for its status; None when it cannot say (a test double)."""
    channels = getattr(notifier, "channels", None)
    return describe(channels) if isinstance(channels, list) else None


def is_local_watchdog(watchdog_url: str) -> bool:
    return loopback_host(watchdog_url) is not None


def gap_fix(*, local: bool) -> str:
    """How a watchdog comes to hold the channels of .env: the local one re-reads .env, a deployed one not."""
    return "restart it (stop `gpuc watchdog serve`, start it again)" if local else "redeploy: gpuc watchdog deploy"


def channel_gaps(laptop: Sequence[ChannelInfo], watchdog: Sequence[ChannelInfo] | None, *, local: bool) -> list[str]:
    """One line per channel of the laptop's .env the watchdog does not have (and per one it has that .env
    no longer lists), with the fix. Empty: the watchdog reaches every channel the laptop knows."""
    fix = gap_fix(local=local)
    if watchdog is None:
        return [f"the watchdog does not say which channels it has (an older version): {fix}"] if laptop else []
    have = {(c.index, c.kind) for c in watchdog}
    want = {(c.index, c.kind) for c in laptop}
    lines = [f"the watchdog does not have channel {i} ({k}): {fix}" for i, k in sorted(want - have)]
    lines += [
        f"the watchdog has channel {i} ({k}), which your .env no longer lists: {fix}" for i, k in sorted(have - want)
    ]
    return lines


class ReloadingNotifier:
    """A Notifier whose channels follow `.env`: before each send it stats the file, and when it changed,
    re-reads GPUC_NOTIFY_URLS and GPUC_WEBHOOK_SECRET (the environment still wins, as at the start). A file
    that no longer reads keeps the channels it had, and says so in the log."""

    def __init__(
        self,
        settings: Settings,
        environ: Mapping[str, str] | None = None,
        build: Callable[[Settings], Notifier] = Notifier.from_settings,
    ) -> None:
        self.settings, self._build = settings, build
        self._environ = dict(os.environ if environ is None else environ)
        self._path = settings.env_file
        self._stamp = _stamp(self._path)
        self._notifier = build(settings)
        self._lock = threading.Lock()

    @property
    def channels(self) -> list[Channel]:
        self.refresh()
        return self._notifier.channels

    def refresh(self) -> None:
        stamp = _stamp(self._path)
        with self._lock:
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                fresh = load_settings(self._environ)
                settings = self.settings.with_overrides(
                    notify_urls=fresh.notify_urls, webhook_secret=fresh.webhook_secret
                )
                notifier = self._build(settings)
            except GpucError as exc:
                log.error(
                    "%s changed, but its channels cannot be read (%s): keeping the old ones", self._path, exc.message
                )
                return
            old, self._notifier = self._notifier, notifier
        old.close()
        kinds = ", ".join(f"{c.index} ({c.kind})" for c in describe(notifier.channels)) or "none"
        log.info("notification channels re-read from %s: %s", self._path, kinds)

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
            self.refresh()
        except Exception as exc:  # F13: a notification never breaks its caller
            log.error("channel re-read failed: %s", type(exc).__name__)
        self._notifier.send(title, message, pod_id=pod_id, kind=kind, level=level, actions=actions)

    def flush(self) -> None:
        self._notifier.flush()

    def close(self) -> None:
        self._notifier.close()


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass(frozen=True)
class TestResult:
    route: str  # "channel 2 (telegram)" or "the watchdog": never a URL
    arrived: bool  # accepted by the channel's service (or the watchdog); whether a phone shows it, no one can tell
    detail: str


def send_test(
    settings: Settings,
    *,
    watchdog_notify: Callable[[str, str], Any] | None,
    watchdog_status: Callable[[], Any] | None = None,
    now: float,
    transport: httpx.BaseTransport | None = None,
) -> list[TestResult]:
    """One test message through each channel of `settings` (from this machine, once each), then one through
    the watchdog (`watchdog_notify(title, message)`, the admin /v1/notify), and the watchdog's channels
    compared with these (`watchdog_status()` returns its StatusResponse). Never raises for a failed route."""
    import httpx

    results: list[TestResult] = []
    channels = settings_channels(settings)
    if not channels:
        results.append(TestResult("channels", False, "GPUC_NOTIFY_URLS is not set: nothing can reach your phone"))
    body = "If you read this, gpuc can reach you here. Nothing to do."
    with httpx.Client(transport=transport, timeout=10.0) as http:
        for info, channel in zip(describe(channels), channels, strict=True):
            msg = Message(now, f"{TEST_TITLE} (channel {info.index}, {info.kind})", body, kind="test")
            route = f"channel {info.index} ({info.kind})"
            try:
                channel.deliver(msg, http)
            except DeliveryFailed as exc:
                results.append(TestResult(route, False, f"refused: {exc.detail}"))
            else:
                results.append(TestResult(route, True, "accepted by the service"))
    if watchdog_notify is not None:
        results.append(_through_watchdog(settings, channels, watchdog_notify, watchdog_status))
    return results


def _through_watchdog(
    settings: Settings,
    channels: Sequence[Channel],
    notify: Callable[[str, str], Any],
    status: Callable[[], Any] | None,
) -> TestResult:
    try:
        notify(f"{TEST_TITLE} (through the watchdog)", "If you read this, the watchdog can reach you. Nothing to do.")
    except GpucError as exc:
        return TestResult("the watchdog", False, f"not sent: {exc.message}")
    if status is None:
        return TestResult("the watchdog", True, "accepted by the watchdog")
    try:
        held = status().channels
    except GpucError as exc:
        return TestResult("the watchdog", True, f"accepted; its channels unknown ({exc.message})")
    gaps = channel_gaps(describe(channels), held, local=is_local_watchdog(settings.watchdog_url))
    if gaps:
        return TestResult("the watchdog", False, "accepted, but " + "; ".join(gaps))
    count = len(held or [])
    return TestResult("the watchdog", count > 0, f"accepted; it sends through {counted(count, 'channel')}")
