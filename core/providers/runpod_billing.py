"""RunPod's own bill, for `gpuc ledger reconcile`: REST v2 `GET /v2/billing/pods`.

The v2 spec (rp-docs api-reference-v2/openapi.json, CONFIRMED) answers
`{"records": [{startTime, endTime, podId, totalAmount, gpuAmount, cpuAmount, diskAmount}], "metadata":
{query, recordCount, uniquePodCount, totals}}`, one record per pod per bucket. We ask for hourly buckets:
a stopped pod bills its volume and nothing else, so an hour with a disk amount and no compute amount is
disk billed while stopped, and the reconciler can only see that if the buckets are finer than the stop.
(The reference's `timeBilledMs`/`diskSpaceBilledGb` shape is REST v1's, which retires on 2026-11-15.)

Everything that cannot be trusted raises ProviderSchemaError: a body without `records`, a record count that
disagrees with the records sent, a total that is not the sum of its parts, a negative amount. Never "no
charges": an empty bill read from a body we did not understand would make every ledger row look wrong in
the user's favour, or hide a pod billing in the dark.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuc.core.billing import BillingKind, BillingRecord
from gpuc.core.clock import iso, parse_iso
from gpuc.core.errors import ProviderSchemaError
from gpuc.core.ledger.months import month_window
from gpuc.core.providers.common import ProviderBilling, first_error
from gpuc.core.providers.http import require
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_pods import PROVIDER
from gpuc.core.settings import Settings

BUCKET = "hour"
# Parts are rounded on RunPod's side (how finely is UNCONFIRMED): a total may miss their sum by this much.
SUM_TOLERANCE_USD = 0.011


class Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PodBillingRecord(Wire):
    startTime: str
    endTime: str
    podId: str
    totalAmount: float
    gpuAmount: float
    cpuAmount: float
    diskAmount: float


class PodBillingMetadata(Wire):
    recordCount: int | None = None  # required by the spec; its absence is checked where it matters


class PodBillingPage(Wire):
    records: list[PodBillingRecord] | None
    metadata: PodBillingMetadata


def schema_error(what: str) -> ProviderSchemaError:
    return ProviderSchemaError(
        f"unexpected pod billing answer: {what}",
        provider=PROVIDER,
        hint="the RunPod billing API may have changed; gpuc will not guess the bill (compare it by hand "
        "on RunPod's billing page)",
    )


def parse_page(body: Any) -> list[PodBillingRecord]:
    """The records of one answer, after checking it is the shape the v2 spec documents."""
    require(isinstance(body, dict), PROVIDER, "pod billing answer is not an object")
    if "records" not in body or "metadata" not in body:
        raise schema_error("no records and metadata")
    try:
        page = PodBillingPage.model_validate(body)
    except ValidationError as exc:
        raise schema_error(first_error(exc)) from None
    count = page.metadata.recordCount
    if page.records is None:
        # runpodctl reads `records: null` as an empty bill; we do only when the count says so too.
        if count != 0:
            raise schema_error("records is null and the record count is not 0")
        return []
    if count is not None and count != len(page.records):
        raise schema_error(f"{len(page.records)} records sent, metadata says {count}: a partial answer")
    return page.records


def records_of(wire: PodBillingRecord) -> list[BillingRecord]:
    """One bucket of one pod as our records: compute (GPU + CPU) and disk, kept apart so a bucket with disk
    and no compute reads as a stopped pod billing its volume."""
    parts = (wire.gpuAmount, wire.cpuAmount, wire.diskAmount, wire.totalAmount)
    if min(parts) < 0:
        raise schema_error(f"a negative amount for pod {wire.podId} (a credit gpuc cannot read)")
    if abs(wire.totalAmount - sum(parts[:3])) > SUM_TOLERANCE_USD:
        raise schema_error(
            f"pod {wire.podId}: totalAmount {wire.totalAmount} is not gpu + cpu + disk "
            "(a cost component gpuc does not know)"
        )
    try:
        start, end = parse_iso(wire.startTime), parse_iso(wire.endTime)
    except ValueError:
        raise schema_error(f"pod {wire.podId}: a bucket time that is not RFC 3339") from None
    if end <= start:
        raise schema_error(f"pod {wire.podId}: a bucket that ends before it starts")
    compute = wire.gpuAmount + wire.cpuAmount
    out = []
    if compute > 0:
        out.append(_record(wire.podId, start, end, compute, "gpu"))
    if wire.diskAmount > 0:
        out.append(_record(wire.podId, start, end, wire.diskAmount, "disk"))
    return out


def _record(pod_id: str, start: float, end: float, amount: float, kind: BillingKind) -> BillingRecord:
    return BillingRecord(provider=PROVIDER, pod_id=pod_id, start=start, end=end, amount_usd=amount, kind=kind)


class RunPodBilling(ProviderBilling[RunPodProvider]):
    """RunPod's pod billing (REST v2), in hourly buckets."""

    @classmethod
    def from_settings(cls, settings: Settings) -> RunPodBilling:
        return cls(lambda: RunPodProvider.from_settings(settings))

    def fetch(self, provider: RunPodProvider, month: str) -> list[BillingRecord]:
        start, end = month_window(month)
        # An endTime in the future is not documented; "now", rounded up to the hour, is its default.
        now_hour = (provider.clock.now() // 3600 + 1) * 3600
        end = min(end, now_hour)
        if end <= start:
            return []  # the month has not begun: nothing can have been billed in it yet
        params = {"startTime": iso(start), "endTime": iso(end), "bucketSize": BUCKET}
        reply = provider.http.request("GET", f"{provider.rest_url}/billing/pods", params=params)
        return [record for wire in parse_page(reply.body) for record in records_of(wire)]
