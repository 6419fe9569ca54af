"""Wiring: what the handlers and the reaper are given (store, providers, notifier, clock, admin token),
built from Settings at the edge. Tests build `Deps` directly with fakes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpuc.core.api import NotificationRecord
from gpuc.core.clock import Clock, SystemClock
from gpuc.core.notify import Action, Level, Notifier
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import PROVIDERS, get_provider, keyed_providers
from gpuc.core.redact import redact
from gpuc.core.settings import SecretStr, Settings, save_config
from gpuc.core.signing import new_token
from gpuc.functions.actions.offers import buttons
from gpuc.functions.ingest import IngestHealth
from gpuc.functions.store import SqliteStore, Store

log = logging.getLogger("gpuc.functions")

STORE_NAME = "watchdog.db"


class Sender(Protocol):
    """What the functions need from a notifier (core.notify.Notifier). Should never raise; `announce`
    and the reaper guard against one that does anyway."""

    def send(
        self,
        title: str,
        message: str,
        *,
        pod_id: str | None = None,
        kind: str = "info",
        level: Level = "info",
        actions: Sequence[Action] = (),
    ) -> None: ...

    def flush(self) -> None: ...


class ProviderPool:
    """Provider clients by name, built on first use. `scan` names the providers the reaper lists even
    with no registered pod there (to find gpuc pods that were never registered, F11)."""

    def __init__(
        self, factory: Callable[[str], Provider], scan: Iterable[str] = (), known: Iterable[str] = ()
    ):
        self._factory = factory
        self._cache: dict[str, Provider] = {}
        self._lock = threading.Lock()
        self.scan = tuple(dict.fromkeys(scan))
        self.known = frozenset(known) | frozenset(self.scan)

    @classmethod
    def of(cls, *providers: Provider) -> ProviderPool:
        by_name = {p.name: p for p in providers}
        pool = cls(by_name.__getitem__, scan=by_name, known=by_name)
        pool._cache.update(by_name)
        return pool

    def get(self, name: str) -> Provider:
        """May raise (unknown name, missing key): the reaper treats that as blind, never as "no pods"."""
        with self._lock:
            if name not in self._cache:
                self._cache[name] = self._factory(name)
            return self._cache[name]

    def close(self) -> None:
        for provider in self._cache.values():
            provider.close()


@dataclass
class Deps:
    settings: Settings
    store: Store
    providers: ProviderPool
    notifier: Sender
    admin_token: SecretStr
    clock: Clock = field(default_factory=SystemClock)
    ingest_health: IngestHealth | None = None  # None: nothing to ask (a reaper with no ingest of its own)

    def secrets(self) -> list[str]:
        return [*self.settings.secret_values(), self.admin_token.get_secret_value()]

    def close(self) -> None:
        closer = getattr(self.notifier, "close", None)
        if callable(closer):
            closer()
        self.providers.close()
        self.store.close()


def announce(
    deps: Deps,
    now: float,
    title: str,
    message: str,
    *,
    pod_id: str | None = None,
    kind: str = "info",
    level: Level = "info",
) -> None:
    """Log the notification in the store (for status and tests), then hand it to the notifier."""
    title, message = redact(title, deps.secrets()), redact(message, deps.secrets())
    try:
        deps.store.log_notification(
            NotificationRecord(ts=now, title=title, message=message, pod_id=pod_id, kind=kind, level=level)
        )
    except Exception as exc:  # the phone still hears about it even if the log write failed
        log.error("could not log a notification: %s", type(exc).__name__)
    actions = buttons(deps.store, deps.settings, now, pod_id, kind, level)  # never raises: no buttons at worst
    try:
        deps.notifier.send(title, message, pod_id=pod_id, kind=kind, level=level, actions=actions)
    except Exception as exc:  # F13: a broken notifier never stops what comes after it (a destroy)
        log.error("notifier failed: %s", type(exc).__name__)


def watched_providers(settings: Settings) -> tuple[str, ...]:
    return tuple(dict.fromkeys([settings.provider, *keyed_providers(settings)]))


def ensure_admin_token(settings: Settings) -> SecretStr:
    """The admin token from Settings, or a new one saved (mode 600) where the laptop's client reads it."""
    if settings.admin_token is not None and settings.admin_token.get_secret_value():
        return settings.admin_token
    token = new_token()
    save_config(settings.home, admin_token=token)
    log.info("generated an admin token, saved in %s", settings.home / "config.json")
    return SecretStr(token)


def build_deps(
    settings: Settings,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    notifier: Sender | None = None,
    providers: ProviderPool | None = None,
) -> Deps:
    clock = clock or SystemClock()
    if providers is None:
        providers = ProviderPool(
            lambda name: get_provider(name, settings), scan=watched_providers(settings), known=PROVIDERS
        )
    return Deps(
        settings=settings,
        store=store or SqliteStore(settings.home / STORE_NAME),
        providers=providers,
        notifier=notifier or Notifier.from_settings(settings, clock=clock),
        admin_token=ensure_admin_token(settings),
        clock=clock,
    )
