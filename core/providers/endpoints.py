"""Where the providers' APIs are, and the variables that move them (the tests point them at the emulators).

Standard library only: the pod's `ask key-scope` (instance_side/ask.py) calls them without the provider
clients, which bring pydantic and httpx.
"""

from __future__ import annotations

RUNPOD_GRAPHQL_URL = "https://api.runpod.io/graphql"
RUNPOD_REST_URL = "https://api.runpod.io/v2"
VAST_URL = "https://console.vast.ai/api/v0"
RUNPOD_GRAPHQL_ENV = "GPUC_RUNPOD_GRAPHQL_URL"
RUNPOD_REST_ENV = "GPUC_RUNPOD_REST_URL"
VAST_URL_ENV = "GPUC_VAST_URL"


def vast_host(url: str) -> str:
    """GPUC_VAST_URL may be the host (as vast-cli's VAST_URL) or end in /api/v0: accept both."""
    url = url.rstrip("/")
    return url[: -len("/api/v0")] if url.endswith("/api/v0") else url
