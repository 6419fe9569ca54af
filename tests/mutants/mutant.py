"""One hand mutant: an exact replacement that breaks one safety check, and the tests that must fail on it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str  # the safety property it breaks, as the user would feel it
    file: str  # relative to the repository root
    original: str  # must occur exactly once in the file
    mutated: str
    tests: tuple[str, ...]
