"""Vast.ai's own bill, for `gpuc ledger reconcile`: `GET /api/v0/charges/`.

show_charges.yaml (vast-ai/docs, CONFIRMED) answers `{success, count, total, next_token, results: [...]}`,
one result per contract: `{start, end, type: "instance", source: "instance-<id>", amount, metadata,
items: [{start, end, type: gpu|disk|bwd|bwu, amount, ...}]}`, amounts rounded to 3 decimals, paginated
with `after_token`. (`/users/me/invoices` is deprecated; `/api/v1/invoices/` lists payments, not pods.)

A Vast instance bills its disk from creation to destroy and its GPU only while running (vast-cli
SKILL.md), so a stopped instance shows a disk charge that runs on past its last GPU charge. Each contract
carries ONE item per kind, so the part of the disk item after the GPU item ends is split off (pro rata
by time) into its own record: the reconciler sees disk with no compute beside it and flags it.
Whether the items' start/end are the GPU's own running window or the whole contract is UNCONFIRMED (the
doc example shows the whole contract); if it is the contract, nothing is split and a stop goes unseen, but
nothing is ever flagged falsely.

Everything that cannot be trusted raises ProviderSchemaError, never "no charges": a body without
`results`, a page whose count disagrees with it, a pagination that loops or ends short of `total`, a
contract whose amount is not the sum of its items, an item kind we do not know.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuc.core.billing import BillingKind, BillingRecord
from gpuc.core.errors import ProviderAuthError, ProviderSchemaError
from gpuc.core.ledger.months import month_window
from gpuc.core.providers.common import ProviderBilling, first_error
from gpuc.core.providers.http import require
from gpuc.core.providers.vast import KEY_ENV, VastProvider, refused
from gpuc.core.providers.vast_instances import PROVIDER
from gpuc.core.settings import Settings

PAGE_SIZE = 100  # the CLI's maximum; the server allows 500
MAX_PAGES = 100
SOURCE_RE = re.compile(r"^instance-([0-9]{1,12})$")
ITEM_KINDS: dict[str, BillingKind] = {"gpu": "gpu", "disk": "disk", "bwd": "other", "bwu": "other"}
# Contracts of these types are not pods gpuc could have started: asked away by the filter, skipped if sent.
NOT_PODS = ("volume", "serverless")
ROUNDING_USD = 0.0005  # each amount is rounded to 3 decimals


class Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ChargeItem(Wire):
    start: float
    end: float
    type: str
    amount: float


class Contract(Wire):
    start: float
    end: float
    type: str
    source: str
    amount: float
    items: list[ChargeItem]


class ChargesPage(Wire):
    success: bool | None = None
    count: int
    total: int
    next_token: str | None
    results: list[Contract]


def schema_error(what: str) -> ProviderSchemaError:
    return ProviderSchemaError(
        f"unexpected charges answer: {what}",
        provider=PROVIDER,
        hint="the Vast.ai charges API may have changed; gpuc will not guess the bill (compare it by hand "
        "with `vastai show invoices-v1 --charges`)",
    )


def parse_page(body: Any) -> ChargesPage:
    require(isinstance(body, dict), PROVIDER, "charges answer is not an object")
    if not isinstance(body.get("results"), list):
        raise schema_error("no results list")
    try:
        page = ChargesPage.model_validate(body)
    except ValidationError as exc:
        raise schema_error(first_error(exc)) from None
    if page.count != len(page.results):
        raise schema_error(f"{len(page.results)} contracts sent, count says {page.count}: a partial page")
    return page


def instance_id(contract: Contract) -> str:
    match = SOURCE_RE.match(contract.source)
    if contract.type != "instance" or match is None:
        raise schema_error(f"a contract of type {contract.type!r} from {contract.source!r}")
    return match.group(1)


def check_items(contract: Contract, pod_id: str) -> None:
    if any(i.amount < 0 for i in contract.items) or contract.amount < 0:
        raise schema_error(f"a negative amount for instance {pod_id} (a credit gpuc cannot read)")
    unknown = sorted({i.type for i in contract.items} - set(ITEM_KINDS))
    if unknown:
        raise schema_error(f"instance {pod_id}: a charge item of kind {unknown[0]!r}")
    if contract.amount > 0 and not contract.items:
        raise schema_error(f"instance {pod_id} is charged {contract.amount} with no breakdown")
    slack = ROUNDING_USD * (len(contract.items) + 1) + 1e-9
    if abs(contract.amount - sum(i.amount for i in contract.items)) > slack:
        raise schema_error(f"instance {pod_id}: the amount is not the sum of its items")


def records_of(contract: Contract, now: float) -> list[BillingRecord]:
    """A contract's items as records, with the disk billed after the last GPU charge split off."""
    pod_id = instance_id(contract)
    check_items(contract, pod_id)
    gpu_ends = [i.end for i in contract.items if i.type == "gpu" and i.amount > 0]
    gpu_end = max(gpu_ends) if gpu_ends else None
    out: list[BillingRecord] = []
    for item in contract.items:
        if item.amount <= 0:
            continue
        # A live contract may report an end in the future: nothing past now has been billed.
        end = max(item.start, min(item.end, now))
        if item.type == "disk" and gpu_end is not None:
            out += split_disk(pod_id, item.start, end, item.amount, gpu_end)
        else:
            out.append(_record(pod_id, item.start, end, item.amount, ITEM_KINDS[item.type]))
    return out


def split_disk(pod_id: str, start: float, end: float, amount: float, gpu_end: float) -> list[BillingRecord]:
    """The disk item as [start, gpu_end) (billed beside compute) and [gpu_end, end) (billed after it)."""
    if not start < gpu_end < end:
        return [_record(pod_id, start, end, amount, "disk")]
    after = amount * (end - gpu_end) / (end - start)
    return [
        _record(pod_id, start, gpu_end, amount - after, "disk"),
        _record(pod_id, gpu_end, end, after, "disk"),
    ]


def _record(pod_id: str, start: float, end: float, amount: float, kind: BillingKind) -> BillingRecord:
    return BillingRecord(provider=PROVIDER, pod_id=pod_id, start=start, end=end, amount_usd=amount, kind=kind)


class VastBilling(ProviderBilling[VastProvider]):
    """Vast's charges (/api/v0/charges/), a page at a time."""

    def __init__(self, connect: Callable[[], VastProvider], page_size: int = PAGE_SIZE) -> None:
        super().__init__(connect)
        self.page_size = page_size

    @classmethod
    def from_settings(cls, settings: Settings) -> VastBilling:
        return cls(lambda: VastProvider.from_settings(settings))

    def fetch(self, provider: VastProvider, month: str) -> list[BillingRecord]:
        start, end = month_window(month)
        if start > provider.clock.now():
            return []  # the month has not begun: nothing can have been billed in it yet
        now = provider.clock.now()
        return [
            record
            for contract in self.contracts(provider, int(start), int(end) - 1)
            if contract.type not in NOT_PODS
            for record in records_of(contract, now)
        ]

    def contracts(self, provider: VastProvider, first_s: int, last_s: int) -> list[Contract]:
        """Every page. A page that breaks the chain raises: a shorter bill is never read as a smaller one."""
        seen: dict[str, Contract] = {}
        tokens: set[str] = set()
        token: str | None = None
        total: int | None = None
        for _ in range(MAX_PAGES):
            page = self._page(provider, first_s, last_s, token)
            total = page.total if total is None else total
            for contract in page.results:
                if contract.source in seen:
                    raise schema_error(f"{contract.source} listed twice: the pagination broke")
                seen[contract.source] = contract
            token = page.next_token
            if token is None:
                if len(seen) != total:
                    raise schema_error(f"{len(seen)} contracts over all pages, total says {total}")
                return list(seen.values())
            if token in tokens or not page.results:
                raise schema_error("the same next_token came back, or an empty page had one: it loops")
            tokens.add(token)
        raise schema_error(f"the charges go on past {MAX_PAGES} pages: the pagination looks broken")

    def _page(self, provider: VastProvider, first_s: int, last_s: int, token: str | None) -> ChargesPage:
        # GET arguments are JSON-encoded (vast-cli _build_url); `day` bounds are inclusive unix seconds.
        filters = {"day": {"gte": first_s, "lte": last_s}, "type": {"in": ["instance"]}}
        params = {
            "select_filters": json.dumps(filters),
            "format": "table",
            "latest_first": json.dumps(False),
            "limit": json.dumps(self.page_size),
        }
        if token is not None:
            params["after_token"] = token
        # show_charges.yaml: a key that matches no user is a 404 here, not a 401.
        reply = provider.http.request("GET", f"{provider.api.v0}/charges/", params=params, accept=(404,))
        if reply.status == 404 and isinstance(reply.body, dict) and reply.body.get("error") == "auth_error":
            raise ProviderAuthError(
                provider.http.redact(str(reply.body.get("msg") or "the API key was refused")),
                provider=PROVIDER,
                status=404,
                request_id=reply.request_id,
                hint=f"check {KEY_ENV} (environment or .env): is it current, and allowed to read billing?",
            )
        if reply.status == 404 or (isinstance(reply.body, dict) and reply.body.get("success") is False):
            raise refused(provider.http, reply, "charges refused")
        return parse_page(reply.body)
