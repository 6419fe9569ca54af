"""`gpuc pick`'s live side: the provider's prices for the picker's arithmetic (client/money/picker.py, pure),
and, for a model no single card holds, each split's price and stock read for its own count where the
provider's catalog answers per count (RunPod: its stock for one card says nothing of four on one machine)."""

from __future__ import annotations

from gpuc.client.context import Ctx
from gpuc.client.money.choices import PRICED_PROVIDERS
from gpuc.client.money.offers import OfferFilters, filter_offers
from gpuc.client.money.picker import MultiGpuRow, PickResult, PriceQuote, live_quotes, parse_model, pick, price_quotes
from gpuc.core.catalog import find_gpu
from gpuc.core.errors import ConfigError, ProviderError
from gpuc.core.models import Offer


def fetch_live_quotes(provider_name: str, ctx: Ctx) -> tuple[dict[str, PriceQuote], str | None]:
    """Live on-demand prices from one provider, or ({}, why not) when it cannot be reached."""
    try:
        provider = ctx.new_provider(provider_name)
        try:
            offers = provider.offers(None, False)
        finally:
            provider.close()
    except (ProviderError, ConfigError) as exc:
        return {}, f"live prices unavailable ({exc.message}): using the built-in table"
    trusted, _ = filter_offers(offers, OfferFilters())
    quotes = live_quotes(provider_name, trusted)
    return quotes, None if quotes else "no live offer matched a catalog card: using the built-in table"


def pick_for(
    ctx: Ctx,
    model_name: str,
    dtype: str,
    seq: int,
    batch: int,
    *,
    kv_kb: float | None = None,
    provider: str | None = None,
    offline: bool = False,
) -> PickResult:
    """`gpuc pick`: the model, the prices (live from the provider unless offline, else the dated table), the pick."""
    model = parse_model(model_name, kv_kb)
    settings = ctx.settings
    name = provider or (settings.provider if settings.provider in PRICED_PROVIDERS else "runpod")
    live: dict[str, PriceQuote] = {}
    note = "offline: using the built-in table" if offline else None
    if not offline:
        live, note = fetch_live_quotes(name, ctx)
    result = pick(model, dtype, seq, batch, price_quotes(name, live), price_note=note)
    if result.multi_gpu and not offline:
        result.multi_gpu = split_stock(name, ctx, result.multi_gpu)
    return result


NOT_AT_COUNT = "none: past its largest pod"


def split_stock(provider_name: str, ctx: Ctx, options: list[MultiGpuRow]) -> list[MultiGpuRow]:
    """Each split priced and stocked live for its own count where the provider's catalog answers per count
    (RunPod); unchanged where it does not, or when the read fails (the table's prices stand, said as such)."""
    from gpuc.core.providers.runpod import RunPodProvider  # lazy: a provider client only for a live pick

    try:
        provider = ctx.new_provider(provider_name)
    except (ProviderError, ConfigError):
        return options
    try:
        if not isinstance(provider, RunPodProvider):
            return options
        by_count: dict[int, dict[str, Offer]] = {}
        for count in sorted({o.count for o in options}):
            offers = provider.offers(None, False, num_gpus=count)
            by_count[count] = {spec.key: o for o in offers if (spec := find_gpu(o.gpu)) is not None}
    except (ProviderError, ConfigError):
        return options
    finally:
        provider.close()
    out = []
    for option in options:
        offer = by_count[option.count].get(option.gpu)
        if offer is None:
            out.append(option.model_copy(update={"stock": NOT_AT_COUNT}))
            continue
        live = {"price_per_hour": offer.price_per_hour, "price_source": f"live {provider_name}"}
        out.append(option.model_copy(update={"stock": offer.stock or "-", **live}))
    return out
