"""Scrub secrets from anything gpuc prints or logs: known values first, then token-shaped strings."""

from __future__ import annotations

import re
from collections.abc import Iterable

_TOKEN_PATTERNS = re.compile(
    r"(hf_[A-Za-z0-9]{8,}|rpa_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|ghp_[A-Za-z0-9]{8,}|"
    r"github_pat_[A-Za-z0-9_]{8,}|AKIA[0-9A-Z]{12,}|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,})"
)
MASK = "***"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    for value in sorted(_forms(secrets), key=len, reverse=True):
        text = text.replace(value, MASK)
    return _TOKEN_PATTERNS.sub(MASK, text)


def _forms(secrets: Iterable[str]) -> set[str]:
    """Each value as it may show: itself, without the line end it was read with, and as repr writes it
    inside a message (`b'key\\n'`)."""
    out: set[str] = set()
    for value in secrets:
        for form in (value, value.strip(), repr(value)[1:-1]):
            if len(form) >= 4:
                out.add(form)
    return out


def redacted_traceback(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """The traceback GPUC_DEBUG=1 prints, every secret value and token shape masked: its messages quote
    what the code held (an HTTP client's "invalid header value" quotes the whole key)."""
    import traceback  # lazy: the error path only

    return redact("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), secrets)
