"""Phone notifications: an outbox file that always receives, plus channels from GPUC_NOTIFY_URLS.

Rules copied from healthchecks' transports: 3 tries with backoff on transient errors (429, 5xx,
network), stop at once on a permanent one (a 404 webhook, a blocked bot), at most 6 messages a minute
per destination (the excess goes out later as one "N more" message). `send` never raises: a dead phone
channel must never block a destroy (F13). URLs carry tokens, so logs name a channel by kind and host
only, and every text is redacted.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuc.core.clock import Clock, SystemClock
from gpuc.core.notify.channels import Channel, DeliveryFailed
from gpuc.core.notify.message import Action, Level, Message
from gpuc.core.notify.urls import parse_channels
from gpuc.core.redact import redact

if TYPE_CHECKING:
    import httpx

    from gpuc.core.settings import Settings

log = logging.getLogger("gpuc.notify")
OUTBOX_NAME = "outbox.jsonl"
TRIES = 3
BACKOFF_S = (1.0, 3.0)
RATE_PER_MINUTE = 6


@dataclass
class _Bucket:
    """Token bucket: RATE_PER_MINUTE per destination (healthchecks' TokenBucket)."""

    tokens: float = float(RATE_PER_MINUTE)
    updated: float | None = None
    held: list[str] = field(default_factory=list)

    def take(self, now: float) -> bool:
        if self.updated is not None:
            self.tokens = min(float(RATE_PER_MINUTE), self.tokens + (now - self.updated) * RATE_PER_MINUTE / 60)
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
        return Message(self.clock.now(), f"gpuc: {len(titles)} more notifications", text, None, "group", "info")

    def _deliver(self, channel: Channel, msg: Message) -> bool:
        for attempt in range(TRIES):
            try:
                channel.deliver(msg, self._client())
                return True
            except DeliveryFailed as exc:
                if exc.dead:
                    self._dead.add(channel.destination)
                    log.error("notify via %s failed for good (%s): channel disabled", channel.label, exc.detail)
                    return False
                log.warning("notify via %s failed (%s), try %d/%d", channel.label, exc.detail, attempt + 1, TRIES)
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
