"""One reaper pass as it goes: what it may do (blind providers, a hold on every destroy, what the rules
read) and what it did (the report, its destroys against the cap)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpuc.core.api import ReapAction, ReapReport
from gpuc.functions.app import Deps
from gpuc.functions.reaper.rules import Rules
from gpuc.functions.store import StoredPod

ActionKind = Literal["warn", "mark", "cancel", "destroy", "alert", "skip", "confirm", "stop"]


@dataclass
class Pass:
    deps: Deps
    now: float
    dry_run: bool
    report: ReapReport
    blind: dict[str, str] = field(default_factory=dict)  # provider -> why: nothing is done on its pods
    hold: str | None = None  # why no destroy happens in this whole pass (clock jump, young store)
    young: bool = False  # the hold is the store's youth (alerted only when it defers a destroy)
    epoch: float | None = None  # no deadline counts from before this (the last clock jump)
    fleet_suspect: bool = False
    ingest: str | None = None  # what went wrong with the watchdog's own ingest in the silence window
    recovering: frozenset[str] = frozenset()  # live recovering runs (rules.Rules.recovering)
    destroys: int = 0
    capped: int = 0
    held: int = 0

    @property
    def rules(self) -> Rules:
        return Rules(self.now, self.deps.settings, self.epoch, self.fleet_suspect, self.ingest, self.recovering)

    def act(self, pod_id: str, provider: str, action: ActionKind, reason: str) -> None:
        self.report.actions.append(ReapAction(pod_id=pod_id, provider=provider, action=action, reason=reason))

    def act_on(self, rec: StoredPod, action: ActionKind, reason: str) -> None:
        self.act(rec.pod_id, rec.provider, action, reason)

    def go_blind(self, provider: str, why: str) -> None:
        self.blind.setdefault(provider, why)
        self.report.blind = True
        self.report.blind_providers = sorted(self.blind)
