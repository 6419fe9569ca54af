"""The reaper's own record (F14), one meta value in the store: when it last ran, what it could not read and
since when, from when deadlines count (the last clock jump), and what broke the last failed pass. The
next pass reads it (clock jumps, blindness spells); `gpuc ls` and `gpuc doctor` read it through
/v1/status."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuc.functions.app import Deps, describe
from gpuc.functions.store import Store

log = logging.getLogger("gpuc.reaper")

META_REAPER = "reaper"


@dataclass(frozen=True)
class ReaperMeta:
    last_run: float | None = None  # the last pass that finished; a crashing reaper goes stale
    blind: tuple[str, ...] = ()  # providers the last pass could not read
    blind_since: Mapping[str, float] = field(default_factory=dict)  # provider -> first pass of this spell
    blind_why: Mapping[str, str] = field(default_factory=dict)  # provider -> why it could not be read
    epoch: float | None = None  # no deadline counts from before this (the last clock jump)
    actions: int = 0
    last_error: str | None = None  # what the last failed pass died of
    last_attempt: float | None = None

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> ReaperMeta:
        """Read tolerantly: a field an older gpuc did not write, or wrote in another shape, is left at
        its default, never a failed status or pass."""
        blind, since, why = value.get("blind"), _dict(value.get("blind_since")), _dict(value.get("blind_why"))
        error = value.get("last_error")
        return cls(
            last_run=_number(value.get("last_run")),
            blind=tuple(str(name) for name in blind) if isinstance(blind, list) else (),
            blind_since={str(name): t for name, raw in since.items() if (t := _number(raw)) is not None},
            blind_why={str(name): str(text) for name, text in why.items()},
            epoch=_number(value.get("epoch")),
            actions=int(_number(value.get("actions")) or 0),
            last_error=None if error is None else str(error),
            last_attempt=_number(value.get("last_attempt")),
        )

    def value(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "last_run": self.last_run,
            "blind": list(self.blind),
            "blind_since": dict(self.blind_since),
            "blind_why": dict(self.blind_why),
            "actions": self.actions,
            "epoch": self.epoch,
            "last_error": self.last_error,
            "last_attempt": self.last_attempt,
        }
        return {name: v for name, v in out.items() if v is not None}


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _dict(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def read_meta(store: Store) -> ReaperMeta:
    meta = store.get_meta(META_REAPER)
    return ReaperMeta.of(meta.value) if meta else ReaperMeta()


def record_run(deps: Deps, meta: ReaperMeta) -> None:
    """A pass that finished: its record replaces the last one (a failed pass's error with it)."""
    _put_meta(deps, meta)


def record_failed_run(deps: Deps, now: float, exc: BaseException) -> None:
    """A pass that crashed is not a run: last_run stays where it was, so a crashing reaper goes stale."""
    try:
        _put_meta(deps, replace(read_meta(deps.store), last_error=describe(exc, deps), last_attempt=now))
    except Exception as inner:
        log.error("reaper: could not record a failed pass: %s", type(inner).__name__)


def _put_meta(deps: Deps, meta: ReaperMeta) -> None:
    for _ in range(3):  # last writer wins; the CAS only keeps two writers from tearing it
        current = deps.store.get_meta(META_REAPER)
        if deps.store.put_meta(META_REAPER, meta.value(), current.version if current else None):
            return
