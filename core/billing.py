"""A provider's own billing records, as the ledger reconciliation compares them."""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal, Protocol

from pydantic import BaseModel, Field

BillingKind = Literal["gpu", "disk", "other"]


class BillingRecord(BaseModel):
    """One charge as the provider bills it: a pod, a time window (epoch seconds), an amount."""

    provider: str
    pod_id: str
    start: float
    end: float
    amount_usd: float = Field(ge=0)
    kind: BillingKind


class BillingSource(Protocol):
    def billing(self, month: str) -> list[BillingRecord]: ...


def still_billing(end: str, pod_id: str | None, live: Collection[str]) -> bool:
    """A ledger row whose pod is still running (no end; the watchdog hears it, core.ledger.intake.live_pod_ids):
    its bill grows until it ends, so `ledger reconcile` compares it then. An open row billed for a pod that
    is not running is still a mismatch (preempted or deleted outside gpuc, its end never written)."""
    return not end and pod_id is not None and pod_id in live
