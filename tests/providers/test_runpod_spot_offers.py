"""RunPod spot is being removed from the public API: `gpuc offers` never shows a RunPod spot price as
rentable, and an interruptible search does not ask RunPod at all (asked alone, it says why, in one line)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gpuc.client.cli import cli
from gpuc.client.context import Ctx
from gpuc.client.money.commands import offers
from gpuc.client.money.offers import OfferFilters, collect
from gpuc.core.errors import ConfigError
from gpuc.core.providers.base import Provider
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings


def test_runpod_offers_carry_no_spot_price_and_no_bid_advice(runpod: RunPodProvider, vast: VastProvider) -> None:
    report = collect({"runpod": lambda: runpod, "vast": lambda: vast}, "4090", False, OfferFilters())
    rp = [o for o in report.offers if o.provider == "runpod"]
    assert rp and all(o.min_bid is None and o.interruptible_price is None and o.bid is None for o in rp)
    assert any(o.bid is not None for o in report.offers if o.provider == "vast")  # Vast bids stay advised


def test_an_interruptible_search_of_runpod_alone_says_why(runpod: RunPodProvider) -> None:
    with pytest.raises(ConfigError, match="no longer offered") as caught:
        collect({"runpod": lambda: runpod}, None, True, OfferFilters())
    assert "--provider vast" in (caught.value.hint or "")


def test_the_cli_asks_only_vast_for_interruptible_offers(runpod: RunPodProvider, vast: VastProvider) -> None:
    asked: list[str] = []
    made: dict[str, Provider] = {"runpod": runpod, "vast": vast}

    def emulated(name: str, settings: Settings) -> Provider:
        asked.append(name)
        return made[name]

    result = CliRunner().invoke(
        offers, ["--json", "--interruptible", "--gpu", "4090"], obj=Ctx(provider_factory=emulated)
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert asked == ["vast"] and body["failures"] == []
    assert body["offers"] and {o["provider"] for o in body["offers"]} == {"vast"}
    alone = CliRunner().invoke(
        cli, ["offers", "--interruptible", "--provider", "runpod"], obj=Ctx(provider_factory=emulated)
    )
    # A ConfigError: the entry point prints it as one line plus its fix (client/cli.py report_error)
    assert isinstance(alone.exception, ConfigError) and "no longer offered" in alone.exception.message
