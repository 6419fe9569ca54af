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
    for value in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(value, MASK)
    return _TOKEN_PATTERNS.sub(MASK, text)
