from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from fakes.money import FakeProvider, unreachable

from gpuc.client.context import Ctx
from gpuc.client.money.commands import offers
from gpuc.client.money.offers import (
    OfferFilters,
    bandwidth_per_dollar,
    bid_advice,
    build_filters,
    collect,
    failed_filters,
    filter_offers,
    sort_offers,
    vast_query_filters,
    vendor_gpu_name,
)
from gpuc.core.errors import ConfigError, ProviderError
from gpuc.core.models import Offer


def vast(**fields: Any) -> Offer:
    good: dict[str, Any] = {
        "provider": "vast",
        "id": "100",
        "gpu": "RTX 4090",
        "price_per_hour": 0.40,
        "verified": True,
        "reliability": 0.995,
        "inet_down_mbps": 800.0,
        "inet_down_cost": 0.002,
        "storage_cost": 0.1,
        "cuda_max": 12.4,
    }
    return Offer(**{**good, **fields})


@pytest.mark.parametrize(
    ("fields", "failed"),
    [
        ({"verified": False}, ["verified"]),
        ({"reliability": 0.97}, ["reliability"]),
        ({"reliability": 0.98}, ["reliability"]),  # strictly above 0.98
        ({"inet_down_mbps": 150.0}, ["inet_down"]),
        ({"inet_down_cost": 0.02}, ["inet_down_cost"]),
        ({"storage_cost": 0.5}, ["storage_cost"]),
        ({"gpu_count": 2}, ["num_gpus"]),
        ({"cuda_max": 12.2}, ["cuda"]),
        ({}, []),
        # A field the search did not report passes: the query itself applied that filter.
        ({"verified": None, "inet_down_cost": None, "storage_cost": None}, []),
    ],
)
def test_the_five_default_filters_drop_untrustworthy_hosts(fields: dict[str, Any], failed: list[str]) -> None:
    assert failed_filters(vast(**fields), OfferFilters()) == failed


def test_each_filter_can_be_loosened_by_name() -> None:
    loose = OfferFilters().loosen(["verified", "reliability", "storage_cost"])
    assert failed_filters(vast(verified=False, reliability=0.5, storage_cost=9.0), loose) == []
    assert failed_filters(vast(inet_down_mbps=10.0), loose) == ["inet_down"]
    with pytest.raises(ConfigError) as err:
        OfferFilters().loosen(["cheapness"])
    assert err.value.hint and "reliability" in err.value.hint


def test_vast_filters_do_not_apply_to_runpod() -> None:
    runpod = Offer(provider="runpod", id="NVIDIA GeForce RTX 4090", gpu="RTX 4090", price_per_hour=0.74)
    assert failed_filters(runpod, OfferFilters()) == []
    assert failed_filters(runpod.model_copy(update={"gpu_count": 2}), OfferFilters()) == ["num_gpus"]


def test_filtering_counts_what_each_filter_dropped_and_sorting_is_by_total_price() -> None:
    offers = [
        vast(id="a", price_per_hour=0.5),
        vast(id="b", verified=False),
        vast(id="c", price_per_hour=0.3),
        vast(id="d", reliability=0.9, verified=False),
    ]
    kept, dropped = filter_offers(offers, OfferFilters())
    assert [o.id for o in sort_offers(kept)] == ["c", "a"]
    assert dropped == {"verified": 2, "reliability": 1}


def test_a_loosened_verified_filter_is_dropped_from_the_vast_query_not_inverted() -> None:
    assert vast_query_filters(OfferFilters())["verified"] is True
    query = vast_query_filters(OfferFilters().loosen(["verified", "reliability"]))
    assert query["verified"] is None and query["min_reliability"] is None
    assert query["min_inet_down"] == 200.0


@pytest.mark.parametrize(
    ("price", "min_bid", "action", "bid"),
    [
        (0.50, 0.30, "bid", 0.33),  # 40 % over the floor: bid 10 % above it
        (0.50, 0.35, "bid", 0.385),  # exactly 30 %
        (0.50, 0.47, "on_demand", None),  # 6 %: not worth a pause
        (0.50, 0.40, "on_demand_unless_short", 0.44),  # 20 %
    ],
)
def test_bid_advice_follows_the_seeds_thresholds(price: float, min_bid: float, action: str, bid: float | None) -> None:
    advice = bid_advice(vast(price_per_hour=price, min_bid=min_bid))
    assert advice is not None
    assert advice.action == action
    assert advice.bid_per_hour == (pytest.approx(bid) if bid is not None else None)
    assert advice.gap_pct == pytest.approx((price - min_bid) / price * 100)


def test_there_is_no_bid_advice_without_a_floor() -> None:
    assert bid_advice(vast(min_bid=None)) is None
    runpod_spot = Offer(provider="runpod", id="x", gpu="L4", price_per_hour=0.49, interruptible_price=0.25)
    advice = bid_advice(runpod_spot)
    assert advice is not None and advice.action == "bid"


def test_bandwidth_per_dollar_uses_the_offer_then_the_catalog() -> None:
    bandwidth, per_dollar, source = bandwidth_per_dollar(vast(gpu_mem_bw_gbps=900.0, price_per_hour=0.45))
    assert (bandwidth, source) == (900.0, "offer") and per_dollar == pytest.approx(2000.0)
    bandwidth, per_dollar, source = bandwidth_per_dollar(vast(gpu="RTX 3090", price_per_hour=0.5, gpu_count=2))
    assert (bandwidth, source) == (936.0, "catalog") and per_dollar == pytest.approx(936.0 / 0.25)
    assert bandwidth_per_dollar(vast(gpu="Mystery 9000")) == (None, None, None)


def test_an_h100_offer_buys_less_bandwidth_per_dollar_than_a_3090_offer() -> None:
    _, h100, _ = bandwidth_per_dollar(vast(gpu="H100 SXM", price_per_hour=2.07))
    _, r3090, _ = bandwidth_per_dollar(vast(gpu="RTX 3090", price_per_hour=0.15))
    assert h100 is not None and r3090 is not None and h100 < r3090


def test_the_provider_gets_its_own_spelling_of_the_gpu() -> None:
    assert vendor_gpu_name("runpod", "4090") == "NVIDIA GeForce RTX 4090"
    assert vendor_gpu_name("vast", "NVIDIA GeForce RTX 4090") == "RTX 4090"
    assert vendor_gpu_name("vast", "B200") == "B200"
    assert vendor_gpu_name("vast", None) is None


def test_collect_reports_a_failed_provider_and_keeps_the_other() -> None:
    good = FakeProvider(
        "runpod",
        offers=[
            Offer(
                provider="runpod",
                id="NVIDIA GeForce RTX 4090",
                gpu="RTX 4090",
                price_per_hour=0.74,
                min_bid=0.3,
            ),
            Offer(provider="runpod", id="NVIDIA GeForce RTX 3090", gpu="RTX 3090", price_per_hour=0.5),
        ],
    )
    bad = FakeProvider("vast", fail=unreachable("vast"))
    report = collect({"vast": lambda: bad, "runpod": lambda: good}, "4090", False, OfferFilters())
    assert [o.id for o in report.offers] == ["NVIDIA GeForce RTX 4090"]
    assert good.asked == [("NVIDIA GeForce RTX 4090", False)] and good.closed and bad.closed
    assert [f.provider for f in report.failures] == ["vast"]
    assert report.failures[0].hint == "try again later"
    offer = report.offers[0]
    assert offer.bid is None and offer.min_bid is None  # a RunPod spot price is not rentable: never advised
    assert offer.gb_s_per_dollar_hour == pytest.approx(1008 / 0.74)


def test_collect_raises_when_every_provider_fails() -> None:
    bad = FakeProvider("vast", fail=unreachable("vast"))
    with pytest.raises(ProviderError):
        collect({"vast": lambda: bad}, None, False, OfferFilters())


def test_the_cli_prints_json_with_the_documented_fields() -> None:
    fake = FakeProvider(
        "runpod",
        offers=[
            Offer(provider="runpod", id="NVIDIA L4", gpu="L4", price_per_hour=0.49, stock="High"),
            Offer(provider="runpod", id="NVIDIA GeForce RTX 3090", gpu="RTX 3090", price_per_hour=0.22),
        ],
    )
    args = ["--json", "--interruptible", "--loosen", "cuda", "--provider", "runpod"]
    result = CliRunner().invoke(offers, args, obj=Ctx(providers={"runpod": fake}))
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert set(body) == {"gpu", "interruptible", "filters", "seen", "dropped", "offers", "failures"}
    assert body["interruptible"] is True and body["filters"]["min_cuda"] is None
    assert [o["gpu"] for o in body["offers"]] == ["RTX 3090", "L4"]
    assert {"price_per_hour", "gb_s_per_dollar_hour", "bandwidth_source", "bid", "stock"} <= set(body["offers"][0])
    assert fake.asked == [(None, True)]


def test_the_cli_moves_a_bound_and_prints_a_table() -> None:
    fake = FakeProvider(
        "runpod",
        offers=[Offer(provider="runpod", id="NVIDIA L4", gpu="L4", price_per_hour=0.49, stock="High")],
    )
    args = ["--min-reliability", "0.9", "--no-verified", "--provider", "runpod"]
    result = CliRunner().invoke(offers, args, obj=Ctx(providers={"runpod": fake}))
    assert result.exit_code == 0, result.output
    assert "NVIDIA L4" in result.output and "High" in result.output
    filters = build_filters(("cuda",), True, 0.9, None, None, None, None, None)
    assert filters.min_reliability == 0.9 and not filters.verified and filters.min_cuda is None
