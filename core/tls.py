"""The one TLS context of a gpuc process, shared by every HTTPS client it opens (the providers' httpx
clients, the watchdog's status read): loading the trusted roots costs ~50 ms of CPU each time, and
`gpuc ls` in a real home opens three clients.

The roots are httpx 0.28's (`httpx.create_ssl_context()` with verify=True and trust_env=True): SSL_CERT_FILE,
else SSL_CERT_DIR, else certifi's bundle; so a client sharing this context trusts what httpx's own would.
"""

from __future__ import annotations

import functools
import os
import ssl


@functools.cache
def tls_context() -> ssl.SSLContext:
    if os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])
    if os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=os.environ["SSL_CERT_DIR"])
    import certifi  # httpx's own dependency

    return ssl.create_default_context(cafile=certifi.where())
