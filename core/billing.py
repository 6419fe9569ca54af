"""A provider's own billing records, as the ledger reconciliation compares them."""

from __future__ import annotations

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
