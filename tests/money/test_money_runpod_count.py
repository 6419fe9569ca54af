"""Wherever gpuc quotes or chooses a multi-GPU RunPod pod, it reads the catalog FOR THAT COUNT: RunPod's
stock for one GPU says nothing of four on one machine, and no pod may hold more than the GPU type's
`maxCount`. `gpuc offers --num-gpus 4` (it showed no RunPod offer at all: every row was for one GPU), and
`gpuc pick`'s multi-GPU splits."""

from __future__ import annotations

import pytest
from fakes.providers import RTX4090, RUNPOD_KEY, runpod_on

from gpuc.client.context import Ctx
from gpuc.client.money.livepick import NOT_AT_COUNT, pick_for
from gpuc.client.money.offers import OfferFilters, collect, fetch
from gpuc.core.clock import FakeClock
from gpuc.core.providers.base import Provider
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.emulators.runpod import RunPodEmulator


@pytest.fixture
def emu(clock: FakeClock) -> RunPodEmulator:
    return RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)


def factory(emu: RunPodEmulator, clock: FakeClock) -> RunPodProvider:
    return runpod_on(emu, clock)


def test_offers_for_4_gpus_are_priced_and_stocked_for_4(emu: RunPodEmulator, clock: FakeClock) -> None:
    emu.set_stock(RTX4090, 5)
    [one] = fetch("runpod", lambda: factory(emu, clock), "RTX 4090", False, OfferFilters())
    [four] = fetch("runpod", lambda: factory(emu, clock), "RTX 4090", False, OfferFilters(num_gpus=4))
    assert (one.gpu_count, one.price_per_hour, one.stock) == (1, 0.74, "Medium")
    assert (four.gpu_count, four.stock) == (4, "Low") and four.price_per_hour == pytest.approx(2.96)
    assert four.community_price == pytest.approx(4 * 0.34)
    counts = [r.query["count"] for r in emu.requests if r.path == "/v2/catalog/gpus"]
    assert counts == [["1"], ["4"]]


def test_offers_num_gpus_4_shows_runpod_offers_and_none_past_maxcount(emu: RunPodEmulator, clock: FakeClock) -> None:
    report = collect({"runpod": lambda: factory(emu, clock)}, "RTX 4090", False, OfferFilters(num_gpus=4))
    [offer] = report.offers
    assert offer.gpu_count == 4 and offer.price_per_hour == pytest.approx(2.96)
    assert report.dropped == {}  # before: every RunPod row was for one GPU, and --num-gpus 4 dropped them all
    nine = collect({"runpod": lambda: factory(emu, clock)}, "RTX 4090", False, OfferFilters(num_gpus=9))
    assert nine.offers == []  # no RunPod pod holds nine (maxCount 8)


def test_pick_stocks_each_split_for_its_own_count(emu: RunPodEmulator, clock: FakeClock) -> None:
    emu.set_stock("NVIDIA H100 80GB HBM3", 1)  # one free H100: no pod of two
    emu.gpus[RTX4090].max_secure = 4  # and no pod of eight 4090s at all

    def providers(name: str, settings: Settings) -> Provider:
        return factory(emu, clock)

    settings = Settings(provider="runpod", runpod_api_key=SecretStr(RUNPOD_KEY))
    result = pick_for(Ctx(settings, provider_factory=providers), "llama-3-70b", "fp16", 2048, 1)
    options = {o.gpu: o for o in result.multi_gpu}
    assert options["H100 80GB SXM"].count == 2 and options["H100 80GB SXM"].stock == "None"
    assert options["RTX 4090"].count == 8 and options["RTX 4090"].stock == NOT_AT_COUNT
    assert options["H100 80GB SXM"].price_source == "live runpod"
    counts = {q for r in emu.requests if r.path == "/v2/catalog/gpus" for q in r.query["count"]}
    assert counts >= {"1", "2", "8"}
