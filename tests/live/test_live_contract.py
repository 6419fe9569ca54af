"""The provider contracts gpuc relies on, read from the real APIs (reads only: list, balance, one offer
search, and the facts `gpuc doctor --live` reports). Run with `make live`."""

from __future__ import annotations

import pytest
from livekeys import LIVE, needs_key

from gpuc.client.setup.doctor_live import live_report
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings

pytestmark = [pytest.mark.live, pytest.mark.skipif(not LIVE, reason="live contract tests: run `make live`")]


def test_runpod_lists_reads_its_balance_and_offers(settings: Settings) -> None:
    needs_key(settings, "runpod_api_key", "RUNPOD_API_KEY")
    provider = RunPodProvider.from_settings(settings)
    try:
        pods = provider.list_pods()  # REST v2 GET /v2/pods (every page)
        assert all(p.provider == "runpod" and p.id for p in pods)
        assert provider.balance().balance_usd >= 0
        offers = provider.offers()
        assert offers and all(o.min_bid is None and o.price_per_hour > 0 for o in offers)
    finally:
        provider.close()


def test_vast_lists_full_rows_reads_its_credit_and_searches(settings: Settings) -> None:
    needs_key(settings, "vast_api_key", "VAST_API_KEY")
    provider = VastProvider.from_settings(settings)
    try:
        pods = provider.list_pods()  # raises if a row lacks extra_env: ownership must be readable
        assert all(p.provider == "vast" and p.id.isdigit() for p in pods)
        assert provider.balance().balance_usd is not None
        assert provider.offers("RTX 4090", min_reliability=None, min_inet_down=None) is not None
    finally:
        provider.close()


PROVIDERS = [("runpod", "runpod_api_key", "RUNPOD_API_KEY"), ("vast", "vast_api_key", "VAST_API_KEY")]


@pytest.mark.parametrize(("name", "field", "env"), PROVIDERS)
def test_the_live_doctor_reads_without_failing(settings: Settings, name: str, field: str, env: str) -> None:
    needs_key(settings, field, env)
    from gpuc.core.providers.registry import get_provider

    report = live_report({name: lambda: get_provider(name, settings)})
    failed = [c for c in report.checks if c.status == "fail"]
    assert failed == [], failed
    for fact in report.facts:  # printed with -s: what this account confirmed or refuted
        print(f"{fact.provider}: {fact.status}: {fact.fact} ({fact.detail})")
