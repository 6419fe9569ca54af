"""Whether a URL names this machine only: the watchdog a rented pod cannot reach, the emulator a test may
point a deployment at."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def loopback_host(url: str) -> str | None:
    """The host when `url` names this machine only (localhost, 127.0.0.0/8, ::1, 0.0.0.0), else None."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if address.is_loopback or address.is_unspecified else None
