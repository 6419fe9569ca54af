"""Does the ledger match the bill? Compare ledger rows with the providers' own billing records.

Pure logic over two lists; fetching the records is a BillingSource's job (one per provider,
`billing_sources(settings)`). Findings:

- mismatch: a row whose running charges (gpu + disk records of its pod, outside the stopped-disk ones)
  differ from its cost_usd by more than 10 % (and more than one cent: per-second billing rounds);
  a closed row with no charges at all; an open row that is being billed; a row with no price.
- unmatched: charges for a pod no ledger row knows (started outside gpuc, or a lost row).
- disk while stopped: disk charged after the row's end, or in a window with no gpu charge: a stopped pod
  bills its disk, which is why gpuc destroys and never stops.
- billed below the ledger, on a provider whose pod price leaves a discount out (PRICE_LEAVES_OUT: RunPod's
  `cost`, which the ledger prices with, does not reflect a savings plan): listed with that reason, not
  flagged. A bill below the ledger costs the user nothing; a bill above it is always a mismatch.

Times are compared with `slack_s` (default 5 min) of tolerance for clocks that disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Literal

from pydantic import BaseModel

from gpuc.core.billing import BillingKind, BillingRecord, BillingSource, still_billing
from gpuc.core.clock import parse_iso
from gpuc.core.errors import ConfigError
from gpuc.core.ledger.months import check_month
from gpuc.core.ledger.rows import LedgerEntry, row_cost
from gpuc.core.providers.registry import keyed_providers
from gpuc.core.settings import Settings

TOLERANCE = 0.10
FLOOR_USD = 0.01
SLACK_S = 300.0
__all__ = ["BillingKind", "BillingRecord", "BillingSource", "reconcile"]
MismatchReason = Literal["amount", "no_charges", "open_row_billed", "unpriced_row"]


class RowMismatch(BaseModel):
    pod_id: str
    provider: str
    experiment: str
    gpu: str
    start: str
    end: str
    ledger_usd: float | None
    billed_usd: float
    diff_pct: float | None  # (billed - ledger) / ledger x 100; None when the ledger has no cost
    reason: MismatchReason


class UnmatchedCharge(BaseModel):
    provider: str
    pod_id: str
    amount_usd: float
    kinds: list[str]
    first: float
    last: float


class DiskWhileStopped(BaseModel):
    provider: str
    pod_id: str
    amount_usd: float
    first: float
    last: float
    records: int


class ReconcileReport(BaseModel):
    month: str
    providers: list[str]
    rows_checked: int
    rows_ok: int
    unlinked_rows: int  # rows with no pod id (typed by hand): nothing to compare against
    ledger_total_usd: float
    billed_total_usd: float
    mismatches: list[RowMismatch]
    unmatched: list[UnmatchedCharge]
    disk_while_stopped: list[DiskWhileStopped]
    # Rows billed below their ledger cost where the provider's pod price leaves a discount out: not flagged.
    below_ledger: list[RowMismatch] = []
    notes: list[str] = []  # why below_ledger rows are not mismatches, once per provider

    @property
    def clean(self) -> bool:
        return not (self.mismatches or self.unmatched or self.disk_while_stopped)


def _span(entry: LedgerEntry) -> tuple[float | None, float | None]:
    try:
        start = parse_iso(entry.row.start) if entry.row.start else None
        end = parse_iso(entry.row.end) if entry.row.end else None
    except ValueError:
        return None, None
    return start, end


def _overlaps(a: BillingRecord, b: BillingRecord) -> bool:
    return a.start < b.end and b.start < a.end


def stopped_disk(records: list[BillingRecord], end: float | None, slack_s: float) -> list[BillingRecord]:
    """Disk charges of one pod billed after its ledger end, or in a window where no compute was billed."""
    compute = [r for r in records if r.kind == "gpu" and r.amount_usd > 0]
    flagged = []
    for record in records:
        if record.kind != "disk" or record.amount_usd <= 0:
            continue
        after_end = end is not None and record.start >= end + slack_s
        if after_end or not any(_overlaps(record, c) for c in compute):
            flagged.append(record)
    return flagged


def _compare(
    entry: LedgerEntry, pod_id: str, running: list[BillingRecord], tolerance: float, floor_usd: float
) -> RowMismatch | None:
    row = entry.row
    billed = sum(r.amount_usd for r in running if r.kind in ("gpu", "disk"))
    ledger = row_cost(row)
    reason: MismatchReason | None = None
    if not row.end:
        reason = "open_row_billed" if billed > 0 else None
    elif ledger is None:
        reason = "unpriced_row"
    elif not running:
        reason = "no_charges" if ledger > floor_usd else None
    else:
        gap = abs(billed - ledger)
        if gap > floor_usd and (ledger <= 0 or gap / ledger > tolerance):
            reason = "amount"
    if reason is None:
        return None
    return RowMismatch(
        pod_id=pod_id,
        provider=row.provider,
        experiment=row.experiment,
        gpu=row.gpu,
        start=row.start,
        end=row.end,
        ledger_usd=ledger,
        billed_usd=billed,
        diff_pct=(billed - ledger) / ledger * 100 if ledger else None,
        reason=reason,
    )


def _group(records: Iterable[BillingRecord]) -> dict[tuple[str, str], list[BillingRecord]]:
    grouped: dict[tuple[str, str], list[BillingRecord]] = {}
    for record in records:
        grouped.setdefault((record.provider, record.pod_id), []).append(record)
    return grouped


def _disk_finding(provider: str, pod_id: str, flagged: list[BillingRecord]) -> DiskWhileStopped:
    return DiskWhileStopped(
        provider=provider,
        pod_id=pod_id,
        amount_usd=sum(r.amount_usd for r in flagged),
        first=min(r.start for r in flagged),
        last=max(r.end for r in flagged),
        records=len(flagged),
    )


def _unmatched(provider: str, pod_id: str, records: list[BillingRecord]) -> UnmatchedCharge:
    return UnmatchedCharge(
        provider=provider,
        pod_id=pod_id,
        amount_usd=sum(r.amount_usd for r in records),
        kinds=sorted({r.kind for r in records}),
        first=min(r.start for r in records),
        last=max(r.end for r in records),
    )


# Providers whose pod price (what the ledger is priced with) leaves a discount out, and what it leaves out.
PRICE_LEAVES_OUT: dict[str, str] = {
    "runpod": "the ledger prices a RunPod pod with its `cost`, which leaves out savings plans (RunPod's v2 "
    "docs): a bill below the ledger is what a plan's discount looks like, so it is listed, not flagged",
}


def discounted(mismatch: RowMismatch) -> bool:
    """Billed below the ledger (or not at all) on a provider whose price leaves a discount out."""
    below = mismatch.reason == "no_charges" or (
        mismatch.reason == "amount" and mismatch.ledger_usd is not None and mismatch.billed_usd < mismatch.ledger_usd
    )
    return below and mismatch.provider in PRICE_LEAVES_OUT


def reconcile(
    entries: list[LedgerEntry],
    records: list[BillingRecord],
    month: str,
    providers: Collection[str],
    *,
    tolerance: float = TOLERANCE,
    floor_usd: float = FLOOR_USD,
    slack_s: float = SLACK_S,
    live: Collection[str] = (),  # pods still running (core.ledger.intake.live_pod_ids): compared once they end
) -> ReconcileReport:
    check_month(month)
    charges = _group(r for r in records if r.provider in providers)
    owned = {(e.row.provider, e.pod_id): e for e in entries if e.pod_id is not None}
    in_month = [e for e in entries if e.row.date.startswith(month) and e.row.provider in providers]
    mismatches: list[RowMismatch] = []
    disk: list[DiskWhileStopped] = []
    for (provider, pod_id), pod_records in sorted(charges.items()):
        entry = owned.get((provider, pod_id))
        if entry is None:
            continue
        flagged = stopped_disk(pod_records, _span(entry)[1], slack_s)
        if flagged:
            disk.append(_disk_finding(provider, pod_id, flagged))
    checked = 0
    for entry in in_month:
        if entry.pod_id is None or still_billing(entry.row.end, entry.pod_id, live):
            continue
        checked += 1
        pod_records = charges.get((entry.row.provider, entry.pod_id), [])
        flagged_ids = {id(r) for r in stopped_disk(pod_records, _span(entry)[1], slack_s)}
        running = [r for r in pod_records if id(r) not in flagged_ids]
        mismatch = _compare(entry, entry.pod_id, running, tolerance, floor_usd)
        if mismatch:
            mismatches.append(mismatch)
    unmatched = [_unmatched(p, pod, recs) for (p, pod), recs in sorted(charges.items()) if (p, pod) not in owned]
    below = [m for m in mismatches if discounted(m)]
    mismatches = [m for m in mismatches if not discounted(m)]
    return ReconcileReport(
        month=month,
        providers=sorted(providers),
        rows_checked=checked,
        rows_ok=checked - len(mismatches) - len(below),
        unlinked_rows=sum(1 for e in in_month if e.pod_id is None),
        ledger_total_usd=sum(c for e in in_month if (c := row_cost(e.row)) is not None),
        billed_total_usd=sum(r.amount_usd for recs in charges.values() for r in recs),
        mismatches=mismatches,
        unmatched=unmatched,
        disk_while_stopped=disk,
        below_ledger=below,
        notes=[f"{p}: {PRICE_LEAVES_OUT[p]}" for p in sorted({m.provider for m in below})],
    )


# --- where billing records come from ---------------------------------------------------------------------

SourceFactory = Callable[[Settings], BillingSource]
# provider name -> how to build its source from Settings. RunPod (REST v2 pod billing history, hourly, by
# pod) and Vast (per-instance charges) are registered below: core/providers/{runpod,vast}_billing.py.
SOURCE_FACTORIES: dict[str, SourceFactory] = {}


def register_source(provider: str, factory: SourceFactory) -> None:
    SOURCE_FACTORIES[provider] = factory


def _runpod_source(settings: Settings) -> BillingSource:
    # Lazy: `gpuc ledger` loads this module; a billing client (and httpx, ~75 ms) loads only to reconcile.
    from gpuc.core.providers.runpod_billing import RunPodBilling

    return RunPodBilling.from_settings(settings)


def _vast_source(settings: Settings) -> BillingSource:
    from gpuc.core.providers.vast_billing import VastBilling  # lazy: as in _runpod_source

    return VastBilling.from_settings(settings)


register_source("runpod", _runpod_source)
register_source("vast", _vast_source)


def billing_sources(settings: Settings, only: Collection[str] | None = None) -> dict[str, BillingSource]:
    """A billing source for every configured provider account (or those in `only`)."""
    names = sorted(only) if only else keyed_providers(settings)
    if not names:
        raise ConfigError(
            "no provider account is configured: there is no bill to reconcile",
            hint="set RUNPOD_API_KEY or VAST_API_KEY in .env (mode 600)",
        )
    sources: dict[str, BillingSource] = {}
    for name in names:
        factory = SOURCE_FACTORIES.get(name)
        if factory is None:
            raise ConfigError(
                f"gpuc cannot read {name}'s billing records yet",
                hint=f"compare with {name}'s billing page by hand, or reconcile another one with --provider",
            )
        sources[name] = factory(settings)
    return sources
