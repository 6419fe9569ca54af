"""`gpuc offers`: live offers from Vast.ai and RunPod, filtered to trustworthy hosts, cheapest first."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import partial

import click
from pydantic import BaseModel

from gpuc.client import table
from gpuc.client.gpunames import search_names
from gpuc.client.offers import (
    FILTER_NAMES,
    NO_INTERRUPTIBLE,
    OfferFilters,
    OfferView,
    filter_offers,
    sort_offers,
    vast_query_filters,
    view,
)
from gpuc.core.catalog import gpu_matches
from gpuc.core.errors import ConfigError, GpucError, ProviderError
from gpuc.core.models import Offer
from gpuc.core.providers.base import Provider
from gpuc.core.providers.registry import get_provider
from gpuc.core.settings import load_settings

OFFER_PROVIDERS = ("vast", "runpod")
ProviderFactory = Callable[[], Provider]


class ProviderFailure(BaseModel):
    provider: str
    error: str
    hint: str | None


class OffersReport(BaseModel):
    gpu: str | None
    interruptible: bool
    filters: OfferFilters
    seen: int  # offers the providers returned
    dropped: dict[str, int]  # filter name -> offers it dropped
    offers: list[OfferView]
    failures: list[ProviderFailure]


def vendor_gpu_name(provider: str, gpu: str | None) -> str | None:
    """The spelling each API filters on ("NVIDIA GeForce RTX 4090" / "RTX 4090") when the name picks one
    card; else the user's text."""
    names = search_names(provider, gpu)
    return names[0] if len(names) == 1 else gpu


def fetch(
    name: str, factory: ProviderFactory, gpu: str | None, interruptible: bool, filters: OfferFilters
) -> list[Offer]:
    # Lazy: `gpuc offers --help` and every TAB load this module; a provider client (httpx) only to fetch.
    from gpuc.core.providers.vast import VastProvider

    # Vast matches gpu_name exactly: "h100" is three searches ("H100 SXM", "H100 PCIE", "H100 NVL").
    spellings = search_names(name, gpu)
    provider = factory()
    offers: dict[str, Offer] = {}
    try:
        for vendor_gpu in spellings:
            if isinstance(provider, VastProvider):
                # Filter in the search itself: Vast returns at most 100 offers, cheapest first, and a filter
                # applied only afterwards would hide trustworthy hosts behind 100 cheap bad ones.
                found = provider.offers(vendor_gpu, interruptible, **vast_query_filters(filters))
            else:
                found = provider.offers(vendor_gpu, interruptible)
            offers.update((o.id, o) for o in found)
    finally:
        provider.close()
    # Providers filter by GPU loosely or not at all; the user's name decides.
    return [o for o in offers.values() if gpu is None or gpu_matches(gpu, o.gpu)]


def collect(
    providers: Mapping[str, ProviderFactory],
    gpu: str | None,
    interruptible: bool,
    filters: OfferFilters,
    limit: int | None = None,
) -> OffersReport:
    """Ask every provider; one that fails is reported, not fatal, unless they all fail."""
    found: list[Offer] = []
    failures: list[ProviderFailure] = []
    errors: list[GpucError] = []
    for name, factory in providers.items():
        try:
            found.extend(fetch(name, factory, gpu, interruptible, filters))
        except (ProviderError, ConfigError) as exc:
            failures.append(ProviderFailure(provider=name, error=exc.message, hint=exc.hint))
            errors.append(exc)
    if errors and len(errors) == len(providers):
        raise errors[0]
    kept, dropped = filter_offers(found, filters)
    ordered = sort_offers(kept)
    return OffersReport(
        gpu=gpu,
        interruptible=interruptible,
        filters=filters,
        seen=len(found),
        dropped=dropped,
        offers=[view(o) for o in ordered[:limit]],
        failures=failures,
    )


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


# The bid advice in a few words (the help text and --json carry the rule and the reason).
ADVICE = {"bid": "bid", "on_demand": "on-demand", "on_demand_unless_short": "bid if short"}
OFFER_HEADERS = ("PROVIDER", "ID", "GPU", "$/H", "COMM.", "BID", "ADVICE", "GB/s/$H", "REL", "DOWN", "STOCK")
# Columns that only some offers fill (RunPod: community price; Vast: bids, reliability, download).
OFFER_OPTIONAL = (4, 5, 6, 8, 9, 10)
# Ids are what `gpuc up --offer ID` takes: never cut; the GPU, stock and advice give way first.
OFFER_SHRINK = {2: 8, 10: 5, 6: 9}


def offer_cells(o: OfferView) -> list[str]:
    return [
        o.provider,
        o.id,
        o.gpu,
        f"{o.price_per_hour:.3f}",
        _num(o.community_price, ".3f"),
        _num(o.bid.bid_per_hour if o.bid else None, ".3f"),
        ADVICE.get(o.bid.action, o.bid.action) if o.bid else "-",
        _num(o.gb_s_per_dollar_hour, ",.0f"),
        _num(o.reliability, ".3f"),
        _num(o.inet_down_mbps, ".0f"),
        o.stock or "-",
    ]


def render(report: OffersReport) -> str:

    lines: list[str] = []
    if report.offers:
        rows = [offer_cells(o) for o in report.offers]
        headers, rows, kept = table.drop_empty(OFFER_HEADERS, rows, OFFER_OPTIONAL)
        shrink = {kept.index(i): floor for i, floor in OFFER_SHRINK.items() if i in kept}
        right = [kept.index(i) for i in (3, 4, 5, 7, 8, 9) if i in kept]
        lines = table.render(headers, rows, shrink=shrink, right=right)
    else:
        lines.append("no offer passed the filters")
    if report.dropped:
        dropped = ", ".join(f"{k} {v}" for k, v in sorted(report.dropped.items()))
        lines.append(f"{report.seen} seen; dropped by filter: {dropped} (loosen one with --loosen NAME)")
    lines.extend(f"{f.provider}: {f.error}" + (f" ({f.hint})" if f.hint else "") for f in report.failures)
    return "\n".join(lines)


def build_filters(
    loosen: tuple[str, ...],
    no_verified: bool,
    min_reliability: float | None,
    min_inet_down: float | None,
    max_inet_down_cost: float | None,
    max_storage_cost: float | None,
    num_gpus: int | None,
    min_cuda: float | None,
) -> OfferFilters:
    given = {
        "min_reliability": min_reliability,
        "min_inet_down": min_inet_down,
        "max_inet_down_cost": max_inet_down_cost,
        "max_storage_cost": max_storage_cost,
        "num_gpus": num_gpus,
        "min_cuda": min_cuda,
    }
    filters = OfferFilters().model_copy(update={k: v for k, v in given.items() if v is not None})
    return filters.loosen([*loosen, *(["verified"] if no_verified else [])])


def provider_factories(names: tuple[str, ...]) -> dict[str, ProviderFactory]:
    settings = load_settings()
    return {name: partial(get_provider, name, settings) for name in names}


@click.command("offers")
@click.option("--gpu", default=None, help='A card: "4090", "RTX 4090", "NVIDIA A100 80GB PCIe", "h100".')
@click.option("--interruptible", is_flag=True, help="Interruptible (bid) offers, Vast only (RunPod has none).")
@click.option("--provider", "providers", multiple=True, type=click.Choice(OFFER_PROVIDERS), help="[all]")
@click.option("--loosen", multiple=True, type=click.Choice(FILTER_NAMES), help="Drop a filter by name.")
@click.option("--no-verified", is_flag=True, help="Include Vast hosts that are not verified.")
@click.option("--min-reliability", type=float, default=None, help="Vast host reliability above [0.98].")
@click.option("--min-inet-down", type=float, default=None, help="Download Mb/s above [200].")
@click.option("--max-inet-down-cost", type=float, default=None, help="Download $/GB below [0.01].")
@click.option("--max-storage-cost", type=float, default=None, help="Storage $/GB/month below [0.3].")
@click.option("--num-gpus", type=int, default=None, help="GPUs per offer [1].")
@click.option("--min-cuda", type=float, default=None, help="Host's max CUDA at least [12.4].")
@click.option("--limit", type=int, default=20, show_default=True, help="Show the cheapest N (0 = all).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (fields below).")
def offers(
    gpu: str | None,
    interruptible: bool,
    providers: tuple[str, ...],
    loosen: tuple[str, ...],
    no_verified: bool,
    min_reliability: float | None,
    min_inet_down: float | None,
    max_inet_down_cost: float | None,
    max_storage_cost: float | None,
    num_gpus: int | None,
    min_cuda: float | None,
    limit: int,
    as_json: bool,
) -> None:
    """Live offers from Vast.ai and RunPod, filtered, sorted by total $/h, with bid advice (Vast only:
    RunPod spot pods are no longer rentable through its public API, so no RunPod spot price is shown).

    Vast offers pass five filters by default: verified, reliability > 0.98, download > 200 Mb/s,
    download < $0.01/GB, storage < $0.30/GB/month (plus 1 GPU, CUDA >= 12.4). Loosen one by name
    (--loosen reliability, --no-verified) or move its bound (--min-reliability 0.95).
    Bid advice: bid min_bid x 1.10 when on-demand costs >= 30 % more than min_bid; under 10 %
    take on-demand; between, on-demand unless the job is short and checkpoints.

    \b
    --json fields: gpu, interruptible, filters {verified, min_reliability, min_inet_down,
    max_inet_down_cost, max_storage_cost, num_gpus, min_cuda}, seen, dropped {filter: count},
    failures[] {provider, error, hint}, offers[] (cheapest first): provider, id, gpu, gpu_count,
    price_per_hour (Vast dph_total / RunPod secure), community_price, interruptible_price,
    min_bid, reliability, inet_down_mbps, cuda_max, stock, location, bandwidth_gbps,
    bandwidth_source ("offer" or "catalog"), gb_s_per_dollar_hour (per GPU),
    bid {action: bid|on_demand|on_demand_unless_short, bid_per_hour, gap_pct, reason} or null.
    """
    filters = build_filters(
        loosen,
        no_verified,
        min_reliability,
        min_inet_down,
        max_inet_down_cost,
        max_storage_cost,
        num_gpus,
        min_cuda,
    )
    if interruptible and not providers:
        # RunPod has no rentable interruptible offers any more (see client/offers.py NO_INTERRUPTIBLE):
        # asking it would only print a failure line under every interruptible search.
        providers = tuple(p for p in OFFER_PROVIDERS if p not in NO_INTERRUPTIBLE)
    factories = provider_factories(providers or OFFER_PROVIDERS)
    report = collect(factories, gpu, interruptible, filters, limit or None)
    click.echo(json.dumps(report.model_dump(), indent=2) if as_json else render(report))
