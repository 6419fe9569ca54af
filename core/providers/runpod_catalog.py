"""RunPod's GPU catalog (`/v2/catalog/gpus`) read into offers: the list price and stock per cloud for the count
asked, the cheapest placement first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpuc.core.errors import ConfigError
from gpuc.core.providers.common import Number, ProviderAnswer, Whole
from gpuc.core.providers.http import require
from gpuc.core.providers.runpod_pods import PROVIDER, gpu_display, parse

if TYPE_CHECKING:
    from gpuc.core.models import Offer

CloudType = Literal["ALL", "SECURE", "COMMUNITY"]
CLOUDS: tuple[str, ...] = ("SECURE", "COMMUNITY")


class CatalogPrice(ProviderAnswer):
    secure: Number | None = None
    community: Number | None = None


class CatalogMax(ProviderAnswer):
    secure: Whole | None = None
    community: Whole | None = None


class CatalogGpu(ProviderAnswer):
    """One row of GET /v2/catalog/gpus; list prices per GPU per hour, `availability` for the count asked."""

    id: str
    name: str | None = None
    memory: Number | None = None
    secure: bool | None = None
    community: bool | None = None
    price: CatalogPrice | None = None
    maxCount: CatalogMax | None = None
    availability: str | None = None


def positive(value: float | None) -> float | None:
    # RunPod reports 0 or null for a cloud where the GPU type is not offered.
    return value if value is not None and value > 0 else None


def cloud_prices(gpu: CatalogGpu) -> dict[str, float]:
    """The on-demand $/GPU/hour of each cloud that offers this GPU."""
    price = gpu.price or CatalogPrice()
    offered = {
        "SECURE": positive(price.secure) if gpu.secure is not False else None,
        "COMMUNITY": positive(price.community) if gpu.community is not False else None,
    }
    return {cloud: p for cloud, p in offered.items() if p is not None}


def max_count(gpu: CatalogGpu, cloud: str) -> int | None:
    """maxCount: the most GPUs of this type one pod may ask for in this cloud (None: not said)."""
    ceiling = gpu.maxCount or CatalogMax()
    return ceiling.secure if cloud == "SECURE" else ceiling.community


@dataclass(frozen=True)
class Placement:
    """One cloud a pod of `count` GPUs of one type can be asked for in: its list price and its stock there."""

    gpu: CatalogGpu  # the row as the catalog answered it for this cloud and count
    cloud: str
    per_gpu: float

    @property
    def stock(self) -> str | None:
        return self.gpu.availability


def placement(gpu: CatalogGpu, cloud: str, count: int) -> Placement | None:
    price = cloud_prices(gpu).get(cloud)
    ceiling = max_count(gpu, cloud)
    if price is None or (ceiling is not None and count > ceiling):
        return None
    return Placement(gpu, cloud, price)


def ranked(choices: list[Placement]) -> list[Placement]:
    """v2 places one GPU type in one cloud, without falling back: ask first where the catalog shows stock for
    the count, cheapest first (the catalog orders the candidates; it reserves nothing)."""
    return sorted(choices, key=lambda p: (p.stock == "NONE", p.per_gpu))


def clouds_of(cloud: CloudType) -> tuple[str, ...]:
    return CLOUDS if cloud == "ALL" else (cloud,)


def offer_from_choices(choices: list[Placement], count: int) -> Offer | None:
    """The offer of the first choice: the whole pod's price for `count` GPUs and the stock for that count."""
    if not choices:
        return None
    best = choices[0]
    community = cloud_prices(best.gpu).get("COMMUNITY")
    from gpuc.core.models import Offer  # pydantic: only `offers` and `up` build one, never `ls`

    # No min_bid / interruptible_price: v2 has no spot, and a RunPod spot price is not something gpuc rents.
    return Offer(
        provider=PROVIDER,
        id=best.gpu.id,
        gpu=best.gpu.name or gpu_display(best.gpu.id) or best.gpu.id,
        gpu_count=count,
        price_per_hour=round(best.per_gpu * count, 6),
        community_price=round(community * count, 6) if community is not None else None,
        stock=best.stock.title() if best.stock else None,
    )


def parse_catalog(value: Any, cloud: CloudType = "SECURE", count: int = 1) -> list[Offer]:
    """One GET /v2/catalog/gpus answer into offers for pods of `count` GPUs, cheapest first."""
    offers = []
    for gpu in catalog_rows(value):
        if gpu.id == "unknown":
            continue  # a placeholder entry RunPod lists (runpodctl drops it too)
        choices = ranked([p for c in clouds_of(cloud) if (p := placement(gpu, c, count)) is not None])
        offer = offer_from_choices(choices, count)
        if offer is not None:
            offers.append(offer)
    return sorted(offers, key=lambda o: o.price_per_hour)


def catalog_rows(value: Any) -> list[CatalogGpu]:
    require(isinstance(value, dict) and isinstance(value.get("gpus"), list), PROVIDER, "catalog gpus is not a list")
    return [parse(CatalogGpu, item, "catalog gpu") for item in value["gpus"]]


def matches_gpu(gpu: CatalogGpu, wanted: str) -> bool:
    want = " ".join(wanted.replace("_", " ").lower().split())
    names = [gpu.id.lower(), (gpu.name or "").lower()]
    return want in names or any(want in name for name in names)


def not_offered(gpu: CatalogGpu, cloud: CloudType, count: int) -> ConfigError:
    name = gpu.name or gpu_display(gpu.id) or gpu.id
    offered = [c for c in clouds_of(cloud) if c in cloud_prices(gpu)]
    ceilings = [m for c in offered if (m := max_count(gpu, c)) is not None]
    if offered and ceilings and count > max(ceilings):
        return ConfigError(
            f"RunPod rents at most {max(ceilings)} x {name} on one pod in {' or '.join(offered)} cloud; "
            f"{count} were asked",
            hint=f"ask for --gpus {max(ceilings)} or fewer, or a GPU type sold in bigger machines "
            f"(`gpuc offers --provider runpod --num-gpus {count}`)",
        )
    return ConfigError(
        f"RunPod does not offer {name} in {cloud} cloud",
        hint="pick another GPU type (`gpuc offers --provider runpod`) or set GPUC_RUNPOD_CLOUD_TYPE",
    )
