"""`gpuc offers`: live offers as the user should see them, filtered to trustworthy hosts, cheapest first, with
bid advice.

The five Vast filters are on by default (the seeds learned each one the hard way): verified hosts,
reliability > 0.98, download > 200 Mb/s, download cost < $0.01/GB, storage < $0.30/GB/month; plus one GPU
per offer and CUDA >= 12.4. Each can be loosened by name (FILTER_NAMES). The Vast search applies them
server-side (`vast_query_filters`); `filter_offers` re-checks every field an offer reports, so a host that
slipped through a loose query is still dropped. They apply to Vast offers only (RunPod is one operator: no
host to vet), except `num_gpus`, which applies to every offer: RunPod's catalog is read for a pod of that many
GPUs (its price for the whole pod, its stock for that count, none past the GPU type's largest pod).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Literal, TypedDict

from pydantic import BaseModel

from gpuc.client.context import Ctx
from gpuc.client.money.choices import FILTER_NAMES, OFFER_PROVIDERS
from gpuc.core.catalog import find_gpu, gpu_matches
from gpuc.core.errors import ConfigError, GpucError, ProviderError
from gpuc.core.gpunames import search_names
from gpuc.core.models import Offer
from gpuc.core.providers.base import Provider

BID_MARKUP = 1.10
BID_WORTH_IT = 0.30  # the on-demand premium over the bid floor at which interruptible pays for its risk
BID_NOT_WORTH_IT = 0.10


class OfferFilters(BaseModel):
    verified: bool = True
    min_reliability: float | None = 0.98  # strictly greater
    min_inet_down: float | None = 200.0  # Mb/s, strictly greater
    max_inet_down_cost: float | None = 0.01  # $/GB, strictly less
    max_storage_cost: float | None = 0.3  # $/GB/month, strictly less
    num_gpus: int | None = 1
    min_cuda: float | None = 12.4  # at least

    def loosen(self, names: Iterable[str]) -> OfferFilters:
        """Drop filters by name: 'verified', 'reliability', 'inet_down', ... (FILTER_NAMES)."""
        fields = {
            "verified": ("verified", False),
            "reliability": ("min_reliability", None),
            "inet_down": ("min_inet_down", None),
            "inet_down_cost": ("max_inet_down_cost", None),
            "storage_cost": ("max_storage_cost", None),
            "num_gpus": ("num_gpus", None),
            "cuda": ("min_cuda", None),
        }
        update: dict[str, object] = {}
        for name in names:
            if name not in fields:
                hint = f"use one of: {', '.join(FILTER_NAMES)}"
                raise ConfigError(f"no offer filter is called {name!r}", hint=hint)
            field, off = fields[name]
            update[field] = off
        return self.model_copy(update=update)


# A field the offer does not report passes: the search that produced it applied the same filter.
def _below(value: float | None, floor: float | None) -> bool:
    return floor is not None and value is not None and not value > floor


def _below_or_equal(value: float | None, floor: float | None) -> bool:
    return floor is not None and value is not None and value < floor


def _above(value: float | None, ceiling: float | None) -> bool:
    return ceiling is not None and value is not None and not value < ceiling


class VastQueryFilters(TypedDict):
    verified: bool | None
    min_reliability: float | None
    min_inet_down: float | None
    max_inet_down_cost: float | None
    max_storage_cost: float | None
    num_gpus: int | None
    min_cuda: float | None


def vast_query_filters(filters: OfferFilters) -> VastQueryFilters:
    """The filters as VastProvider.offers keyword arguments (None drops one; verified=False would ask for
    unverified hosts only, so a loosened `verified` is None)."""
    return {
        "verified": True if filters.verified else None,
        "min_reliability": filters.min_reliability,
        "min_inet_down": filters.min_inet_down,
        "max_inet_down_cost": filters.max_inet_down_cost,
        "max_storage_cost": filters.max_storage_cost,
        "num_gpus": filters.num_gpus,
        "min_cuda": filters.min_cuda,
    }


def failed_filters(offer: Offer, filters: OfferFilters) -> list[str]:
    failed: list[str] = []
    if filters.num_gpus is not None and offer.gpu_count != filters.num_gpus:
        failed.append("num_gpus")
    if offer.provider != "vast":
        return failed
    checks = {
        "verified": filters.verified and offer.verified is False,
        "reliability": _below(offer.reliability, filters.min_reliability),
        "inet_down": _below(offer.inet_down_mbps, filters.min_inet_down),
        "inet_down_cost": _above(offer.inet_down_cost, filters.max_inet_down_cost),
        "storage_cost": _above(offer.storage_cost, filters.max_storage_cost),
        "cuda": _below_or_equal(offer.cuda_max, filters.min_cuda),
    }
    return failed + [name for name, failed_it in checks.items() if failed_it]


def filter_offers(offers: Iterable[Offer], filters: OfferFilters) -> tuple[list[Offer], dict[str, int]]:
    """The offers that pass every filter, and how many each filter dropped (once per failed filter)."""
    kept: list[Offer] = []
    dropped: dict[str, int] = {}
    for offer in offers:
        failed = failed_filters(offer, filters)
        for name in failed:
            dropped[name] = dropped.get(name, 0) + 1
        if not failed:
            kept.append(offer)
    return kept, dropped


def sort_offers(offers: Iterable[Offer]) -> list[Offer]:
    """Cheapest first by the total price (Vast's dph_total includes the disk the search priced)."""
    return sorted(offers, key=lambda o: (o.price_per_hour, o.provider, o.id))


def bandwidth_per_dollar(offer: Offer) -> tuple[float | None, float | None, str | None]:
    """(GB/s, GB/s per $/h per GPU, source): the offer's own measurement, else the catalog's nominal."""
    bandwidth, source = offer.gpu_mem_bw_gbps, "offer"
    if not bandwidth:
        spec = find_gpu(offer.gpu)
        bandwidth, source = (spec.bandwidth_gbps, "catalog") if spec else (None, "")
    if not bandwidth:
        return None, None, None
    per_gpu_price = offer.price_per_hour / max(1, offer.gpu_count)
    return bandwidth, (bandwidth / per_gpu_price if per_gpu_price > 0 else None), source


BidAction = Literal["bid", "on_demand", "on_demand_unless_short"]
# Providers whose spot prices are not rentable through gpuc: RunPod is removing `podRentInterruptable`
# from its public API (docs gone 2026-05). A spot price shown for them would advise a bid gpuc cannot place.
NO_INTERRUPTIBLE = frozenset({"runpod"})


def rentable_spot(offer: Offer) -> Offer:
    """The offer without spot prices when its provider cannot rent interruptible pods."""
    if offer.provider not in NO_INTERRUPTIBLE:
        return offer
    return offer.model_copy(update={"min_bid": None, "interruptible_price": None})


class BidAdvice(BaseModel):
    action: BidAction
    bid_per_hour: float | None  # what to bid (min_bid x 1.10), when bidding is advised at all
    gap_pct: float  # (on-demand - min_bid) / on-demand, in percent
    reason: str


def bid_advice(offer: Offer) -> BidAdvice | None:
    """Bid min_bid x 1.10 when on-demand costs >= 30 % more than the floor; under 10 % take on-demand;
    between, on-demand unless the job is short and checkpoints (a pause loses everything in GPU memory)."""
    floor = offer.min_bid if offer.min_bid is not None else offer.interruptible_price
    if floor is None or offer.price_per_hour <= 0:
        return None
    gap = (offer.price_per_hour - floor) / offer.price_per_hour
    bid = round(floor * BID_MARKUP, 4)
    pct = gap * 100
    if gap >= BID_WORTH_IT:
        return BidAdvice(action="bid", bid_per_hour=bid, gap_pct=pct, reason=f"bidding saves {gap:.0%}")
    if gap < BID_NOT_WORTH_IT:
        reason = f"bidding saves only {gap:.0%}"
        return BidAdvice(action="on_demand", bid_per_hour=None, gap_pct=pct, reason=reason)
    return BidAdvice(
        action="on_demand_unless_short",
        bid_per_hour=bid,
        gap_pct=pct,
        reason=f"{gap:.0%} saved: bid only for a short job that checkpoints",
    )


class OfferView(BaseModel):
    """One offer as `gpuc offers --json` prints it."""

    provider: str
    id: str
    gpu: str
    gpu_count: int
    price_per_hour: float  # on-demand total (Vast dph_total; RunPod secure price)
    community_price: float | None
    interruptible_price: float | None
    min_bid: float | None
    reliability: float | None
    inet_down_mbps: float | None
    cuda_max: float | None
    stock: str | None
    location: str | None
    bandwidth_gbps: float | None
    bandwidth_source: str | None  # "offer" (the host's measurement) or "catalog" (nominal)
    gb_s_per_dollar_hour: float | None  # bandwidth / price per GPU-hour
    bid: BidAdvice | None


def view(offer: Offer) -> OfferView:
    offer = rentable_spot(offer)
    bandwidth, per_dollar, source = bandwidth_per_dollar(offer)
    return OfferView(
        provider=offer.provider,
        id=offer.id,
        gpu=offer.gpu,
        gpu_count=offer.gpu_count,
        price_per_hour=offer.price_per_hour,
        community_price=offer.community_price,
        interruptible_price=offer.interruptible_price,
        min_bid=offer.min_bid,
        reliability=offer.reliability,
        inet_down_mbps=offer.inet_down_mbps,
        cuda_max=offer.cuda_max,
        stock=offer.stock,
        location=offer.location,
        bandwidth_gbps=bandwidth,
        bandwidth_source=source,
        gb_s_per_dollar_hour=per_dollar,
        bid=bid_advice(offer),
    )


# -- asking the providers ----------------------------------------------------------------------------
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
    from gpuc.core.providers.runpod import RunPodProvider
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
            elif isinstance(provider, RunPodProvider):
                # Priced and stocked for a pod of that many GPUs: the catalog's stock for one says nothing of 4.
                found = provider.offers(vendor_gpu, interruptible, num_gpus=max(1, filters.num_gpus or 1))
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
    """Ask every provider, all at once (core/together.py); one that fails is reported, not fatal, unless
    they all fail."""
    from gpuc.core.together import read_together

    found: list[Offer] = []
    failures: list[ProviderFailure] = []
    errors: list[GpucError] = []
    reads = read_together(
        {name: partial(fetch, name, factory, gpu, interruptible, filters) for name, factory in providers.items()}
    )
    for name, outcome in reads.items():
        try:
            found.extend(outcome.get())
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


def provider_factories(ctx: Ctx, names: tuple[str, ...]) -> dict[str, ProviderFactory]:
    """A client per provider, each closed once its offers are read."""
    return {name: partial(ctx.new_provider, name) for name in names}


def offer_providers(asked: tuple[str, ...], interruptible: bool) -> tuple[str, ...]:
    """The providers to ask: those named, else every one that has such offers. RunPod has no rentable
    interruptible offers any more (NO_INTERRUPTIBLE): asking it would only print a failure line under every
    interruptible search."""
    if asked:
        return asked
    return tuple(p for p in OFFER_PROVIDERS if not (interruptible and p in NO_INTERRUPTIBLE))
