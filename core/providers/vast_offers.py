"""Vast's offers: the search (POST /bundles/, with the `offers` defaults and the always-on filters) read into
Offers, and an interruptible bid held against the offers' floors before anything is rented."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuc.core.errors import ConfigError
from gpuc.core.providers.common import Number, ProviderAnswer, Whole
from gpuc.core.providers.http import require
from gpuc.core.providers.vast_instances import PROVIDER, parse

if TYPE_CHECKING:
    from gpuc.core.models import Offer

BID_MARGIN = 1.10  # docs/interruptible.md's bid advice: bid min_bid × 1.10


# `offers` defaults (docs/providers.md); each is a keyword of VastProvider.offers, None drops the filter.
DEFAULT_FILTERS: dict[str, tuple[str, float | bool]] = {
    "verified": ("eq", True),
    "reliability": ("gt", 0.98),
    "inet_down": ("gt", 200.0),
    "inet_down_cost": ("lt", 0.01),
    "storage_cost": ("lt", 0.3),
}
# Always on: an offer we cannot rent is not an offer (vast-cli's defaults); and one open port at least, which
# `ssh_direct` needs ("`direct_port_count>=1` ... needed for direct SSH", Vast's CLI hello-world): without
# it the pod is reached through Vast's proxy only, "slow for data transfer" (or not at all).
RENTABLE = {"external": {"eq": False}, "rentable": {"eq": True}, "rented": {"eq": False}}
DIRECT_PORTS = {"direct_port_count": {"gte": 1}}


class VastOffer(ProviderAnswer):
    id: Whole
    gpu_name: str
    num_gpus: Whole = 1
    dph_total: Number
    min_bid: Number | None = None
    reliability2: Number | None = None
    reliability: Number | None = None
    inet_down: Number | None = None
    gpu_mem_bw: Number | None = None
    cuda_max_good: Number | None = None
    geolocation: str | None = None
    verification: str | None = None
    inet_down_cost: Number | None = None
    storage_cost: Number | None = None


def offer_from(offer: VastOffer) -> Offer:
    from gpuc.core.models import Offer  # pydantic: only `offers` and `up` build one, never `ls`

    return Offer(
        provider=PROVIDER,
        id=str(offer.id),
        gpu=offer.gpu_name,
        gpu_count=offer.num_gpus,
        price_per_hour=offer.dph_total,
        min_bid=offer.min_bid,
        reliability=offer.reliability2 if offer.reliability2 is not None else offer.reliability,
        inet_down_mbps=offer.inet_down,
        gpu_mem_bw_gbps=offer.gpu_mem_bw,
        cuda_max=offer.cuda_max_good,
        location=offer.geolocation,
        verified=offer.verification == "verified" if offer.verification is not None else None,
        inet_down_cost=offer.inet_down_cost,
        storage_cost=offer.storage_cost,
    )


def parse_offers(body: Any) -> list[Offer]:
    """`{"offers": [...]}`, cheapest first. The docs' example has one object instead of a list: accept it."""
    require(isinstance(body, dict) and "offers" in body, PROVIDER, "bundles answer has no offers")
    raw = body["offers"]
    items = [raw] if isinstance(raw, dict) else raw
    require(isinstance(items, list), PROVIDER, "offers is neither a list nor an object")
    return sorted((offer_from(parse(VastOffer, item, "offer")) for item in items), key=lambda o: o.price_per_hour)


def bundles_query(
    gpu: str | None,
    interruptible: bool,
    filters: Mapping[str, tuple[str, Any] | None],
    allocated_storage: float,
) -> dict[str, Any]:
    query: dict[str, Any] = {
        key: {op: value} for key, rule in filters.items() if rule is not None for op, value in [rule]
    }
    query.update(RENTABLE)
    query.update(DIRECT_PORTS)
    if gpu:
        query["gpu_name"] = {"eq": gpu.replace("_", " ")}  # server names use spaces: "RTX 4090"
    query["order"] = [["dph_total", "asc"]]
    if interruptible:
        query["type"] = "bid"
    # On-demand is the spec's default type, left out: its enum spells it "ondemand", the CLI and the spec's
    # own example "on-demand" (which the server takes is UNCONFIRMED; `doctor --live` reads it).
    query["allocated_storage"] = allocated_storage
    query["limit"] = 100
    return query


class BidUnderFloor(ConfigError):
    """A bid under the floor of every offer passing the filters: refused before anything is rented."""


def offer_for_bid(
    found: Sequence[Offer], bid_per_gpu: float, gpu: str, gpu_count: int, *, named: bool = False
) -> Offer:
    """The first offer (cheapest first) whose floor the bid clears. `min_bid` is the offer's, like the
    create's `price` ("Bid price per machine"): the bid per GPU x the GPUs is what is compared (that the
    floor is per offer, not per GPU, is UNCONFIRMED; the official SKILL.md passes it as the bid price). An
    offer that shows no floor is tried: Vast refuses an under-floor bid with 400 invalid_price, renting
    nothing. `named`: the one offer the user named, said as such."""
    require(bool(found), PROVIDER, "no offer to bid on")
    bid = bid_per_gpu * gpu_count
    for offer in found:
        if offer.min_bid is None or bid >= offer.min_bid:
            return offer
    lowest = min(found, key=lambda o: o.min_bid or 0.0)
    raise bid_under_floor(lowest, bid_per_gpu, gpu, gpu_count, named=named)


def bid_under_floor(
    offer: Offer, bid_per_gpu: float, gpu: str, gpu_count: int, *, named: bool = False
) -> BidUnderFloor:
    floor = (offer.min_bid or 0.0) / gpu_count
    more = f" --num-gpus {gpu_count}" if gpu_count > 1 else ""
    search = f"gpuc offers --provider vast --interruptible --gpu {shlex.quote(gpu)}{more}"
    whose = (
        f"offer {offer.id}'s min_bid is ${floor:.3f} per GPU-hour"
        if named
        else f"the lowest min_bid among the offers passing the filters is ${floor:.3f} per GPU-hour (offer {offer.id})"
    )
    return BidUnderFloor(
        f"a bid of ${bid_per_gpu:.3f} per GPU-hour is under Vast's floor for {gpu} x{gpu_count}: {whose}, and "
        "Vast refuses a bid under it; nothing was rented",
        hint=f"bid at least the floor, e.g. --bid {round(floor * BID_MARGIN, 3):g} (the floor + 10 %, as `gpuc "
        f"offers` advises); `{search}` shows each offer's min_bid",
    )
