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
from gpuc.core.errors import GpucError, ProviderError
from gpuc.core.notify.message import Action, Level, provider_says
from gpuc.core.notify.notifier import Notifier
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import PROVIDERS, get_provider, keyed_providers
from gpuc.core.redact import redact
from gpuc.core.settings import Settings
from gpuc.core.settingsload import save_config
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import new_token, new_watchdog_key, watchdog_id
from gpuc.core.termsafe import clean_line
from gpuc.functions.bucket import ResultsBucket
from gpuc.functions.buttons import buttons
from gpuc.functions.ingest import IngestHealth
from gpuc.functions.store import SqliteStore, Store

log = logging.getLogger("gpuc.functions")

STORE_NAME = "watchdog.db"


class Sender(Protocol):
    """What the functions need from a notifier (core.notify.notifier.Notifier). Should never raise; `announce`
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

    def __init__(self, factory: Callable[[str], Provider], scan: Iterable[str] = (), known: Iterable[str] = ()):
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
    # The watchdog's own key (core.signing): pods' claims and ping tokens. None: a deployment from before
    # claims (its SSM holds none): pods register with their own keys, and a lost store is F11's stray case.
    watchdog_key: SecretStr | None = None
    # Starts a reaper pass soon, in the reaper's own thread (the local server's loop); None: the schedule's next
    # pass (AWS). Vast's outbid hint and a recovery stop call it; never a pass inside an HTTP answer.
    wake: Callable[[], None] | None = None
    # The results bucket with this watchdog's key (functions/bucket.py): built at the first grant a pod asks for.
    bucket: ResultsBucket | None = None

    @property
    def watchdog_id(self) -> str | None:
        return None if self.watchdog_key is None else watchdog_id(self.watchdog_key.get_secret_value())

    @property
    def carried_ids(self) -> frozenset[str]:
        """Pods carried in from another watchdog (`deploy --carry`): marked for it, owned by this one."""
        return frozenset(p.strip() for p in (self.settings.watchdog_carried or "").split(",") if p.strip())

    def secrets(self) -> list[str]:
        key = [] if self.watchdog_key is None else [self.watchdog_key.get_secret_value()]
        return [*self.settings.secret_values(), self.admin_token.get_secret_value(), *key]

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


def describe(exc: BaseException, deps: Deps) -> str:
    """An error as a notification or a log line may say it: our own message, or only the type (a provider
    library's text may echo a key), redacted and cut short."""
    if isinstance(exc, ProviderError):
        # It quotes the provider's own words (Vast's `msg`, RunPod's problem `detail`), and on Vast a stranger's
        # host shapes some of them: defanged as provider_says does, after the redaction (defanging would hide
        # a key's shape from it). The alert's own words around it stay gpuc's, never defanged.
        return provider_says(redact(exc.message, deps.secrets()), 300)
    text = exc.message if isinstance(exc, GpucError) else type(exc).__name__
    return clean_line(redact(text, deps.secrets()))[:300]


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


def ensure_watchdog_key(settings: Settings, *, mint: bool = True) -> SecretStr | None:
    """The watchdog's key from Settings, or (`serve`: mint) a new one saved beside the admin token in
    config.json, mode 600. Never in the store: a lost store must not lose what proves the pods. On AWS the
    key is deploy's to make (SSM): a Lambda container must never mint one of its own."""
    if settings.watchdog_key is not None and settings.watchdog_key.get_secret_value():
        return settings.watchdog_key
    if not mint:
        return None
    key = new_watchdog_key()
    save_config(settings.home, watchdog_key=key)
    log.info("generated this watchdog's key (pod claims), saved in %s", settings.home / "config.json")
    return SecretStr(key)


def build_deps(
    settings: Settings,
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    notifier: Sender | None = None,
    providers: ProviderPool | None = None,
    mint_key: bool = True,
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
        watchdog_key=ensure_watchdog_key(settings, mint=mint_key),
    )
