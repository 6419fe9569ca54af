"""Two small provider additions that ride with the billing work: RunPod's cloud type as a setting, and the
Vast host-quality fields on Offer (what `gpuc offers` re-checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError
from gpuc.core.models import PodSpec
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_offers import parse_offers
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator

KEY = "rpa_" + "PLANTEDcloudtype0123456789abcd"  # built: no token-shaped literal in the repo
REAL_OFFERS = Path(__file__).parents[1] / "providers" / "fixtures" / "vast_bundles_offers_real_2024.json"


def test_runpod_cloud_type_defaults_to_secure() -> None:
    assert Settings().runpod_cloud_type == "SECURE"
    assert load_settings().runpod_cloud_type == "SECURE"


def test_a_bad_cloud_type_is_a_config_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUC_RUNPOD_CLOUD_TYPE", "CHEAPEST")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "GPUC_RUNPOD_CLOUD_TYPE" in err.value.message and err.value.hint


@pytest.mark.parametrize(("cloud", "price"), [("SECURE", 0.74), ("COMMUNITY", 0.34), ("ALL", 0.34)])
def test_the_cloud_type_setting_reaches_the_create_call(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, cloud: str, price: float
) -> None:
    monkeypatch.setenv("GPUC_RUNPOD_CLOUD_TYPE", cloud)
    monkeypatch.setenv("RUNPOD_API_KEY", KEY)
    emulator = RunPodEmulator(api_key=KEY, clock=clock)
    provider = RunPodProvider.from_settings(
        load_settings(), transport=emulator.transport(), clock=clock, backoff=zero_backoff
    )
    try:
        assert provider.cloud_type == cloud
        pod = provider.create(PodSpec(experiment="e", run_id="cloud01", provider="runpod", gpu_type="RTX 4090"))
    finally:
        provider.close()
    (create,) = emulator.ops("create")
    sent = "COMMUNITY" if cloud == "ALL" else cloud  # v2 has no ALL: gpuc asks the cheaper cloud by name
    assert json.loads(create.body)["cloud"] == sent
    assert pod.price_per_hour == pytest.approx(price)  # the emulator's 4090: secure 0.74, community 0.34


def test_vast_offers_carry_the_host_quality_fields(clock: FakeClock) -> None:
    emulator = VastEmulator(api_key="k" * 32, clock=clock)
    vast = VastProvider("k" * 32, transport=emulator.transport(), clock=clock, backoff=zero_backoff)
    try:
        strict = vast.offers("RTX 3090")
        loose = vast.offers("RTX 3090", verified=None)
    finally:
        vast.close()
    assert [(o.verified, o.inet_down_cost, o.storage_cost) for o in strict] == [(True, 0.003, 0.15)]
    assert {o.verified for o in loose} == {True, False}


def test_the_real_vast_offer_keeps_its_quality_fields() -> None:
    (offer,) = parse_offers({"offers": json.loads(REAL_OFFERS.read_text(encoding="utf-8"))})
    assert offer.verified is True
    assert offer.inet_down_cost == 0.0
    assert offer.storage_cost == pytest.approx(0.0013333, rel=1e-3)
