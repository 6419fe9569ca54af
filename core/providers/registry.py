"""Build a provider client by name from Settings. The only place that knows every provider."""

from __future__ import annotations

from gpuc.core.errors import ConfigError
from gpuc.core.providers.base import Provider
from gpuc.core.settings import Settings

PROVIDERS = ("local", "runpod", "vast")
# The rented providers and the Settings field of their account key; local needs none.
KEY_FIELDS = {"runpod": "runpod_api_key", "vast": "vast_api_key"}


def has_key(name: str, settings: Settings) -> bool:
    """Can gpuc read this provider? local always; a rented one only with a non-empty account key."""
    if name not in KEY_FIELDS:
        return True
    key = getattr(settings, KEY_FIELDS[name])
    return key is not None and bool(key.get_secret_value())


def keyed_providers(settings: Settings) -> list[str]:
    """The rented providers with a key: what `ls`, `balance`, `doctor` and the reaper can read."""
    return [name for name in KEY_FIELDS if has_key(name, settings)]


def get_provider(name: str, settings: Settings) -> Provider:
    # Lazy: each client loads only when asked for; runpod and vast pull in httpx (~65 ms), which the local
    # provider, the demo and a heartbeat-only Lambda never need.
    if name == "local":
        from gpuc.core.providers.local import LocalProvider

        return LocalProvider(settings.home, settings=settings)
    if name == "runpod":
        from gpuc.core.providers.runpod import RunPodProvider

        return RunPodProvider.from_settings(settings)
    if name == "vast":
        from gpuc.core.providers.vast import VastProvider

        return VastProvider.from_settings(settings)
    raise ConfigError(f"unknown provider {name!r}", hint=f"use one of: {', '.join(PROVIDERS)}")
