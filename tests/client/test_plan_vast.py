"""`gpuc up -p vast`, the real `up` against the Vast emulator: every check before the rent holds on Vast as on
RunPod (a mutant skipping them only for Vast once survived: every refusal test used RunPod), and a
watchdog from an older gpuc is refused. Each test breaks one thing and counts what the emulator
created: nothing, not even for a moment."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.up import HealthyWatchdog, rented_settings

from gpuc.client.context import Ctx
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.client.runs import RunStore
from gpuc.core.api import WIRE_PROTOCOL, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_offers import BidUnderFloor
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.emulators.vast import VastEmulator

VAST_KEY = "f00dPLANTEDvastkey4c3b2a19087f6e5d"
VAST_URL = "https://console.vast.test/api/v0"


@pytest.fixture
def emu(clock: FakeClock) -> VastEmulator:
    return VastEmulator(api_key=VAST_KEY, clock=clock)


@pytest.fixture
def vast(emu: VastEmulator, clock: FakeClock) -> Iterator[VastProvider]:
    provider = VastProvider(VAST_KEY, url=VAST_URL, transport=emu.transport(), clock=clock, backoff=zero_backoff)
    yield provider
    provider.close()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return rented_settings(tmp_path).with_overrides(vast_api_key=SecretStr(VAST_KEY))


def ctx_for(settings: Settings, vast: VastProvider, clock: FakeClock) -> Ctx:
    return Ctx(
        settings=settings,
        runs=RunStore(settings.home),
        clock=clock,
        echo=lambda _line: None,
        watchdog=HealthyWatchdog(clock),  # type: ignore[arg-type]
        providers={"vast": vast},
    )


def yes(_question: str) -> bool:
    # Yes to the price: a check `up` skipped would go on to a real rent at the emulator.
    return True


def up_vast(ctx: Ctx) -> None:
    up(UpOptions(experiment="exp1", provider="vast", gpu="4090", max_hours=2, confirm=yes), ctx)


def rented_nothing(emu: VastEmulator, ctx: Ctx) -> bool:
    return not emu.instances and not emu.billed and ctx.runs.all() == []


class Declines:
    """A terminal that says no to the price, keeping each question it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, question: str) -> bool:
        self.asked.append(question)
        return False


def test_with_every_check_passing_up_reaches_the_question(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock
) -> None:
    """The control: the same settings, untouched, pass every check; so each refusal below is its one break."""
    no = Declines()
    ctx = ctx_for(settings, vast, clock)
    with pytest.raises(GpucError, match="not confirmed"):
        up(UpOptions(experiment="exp1", provider="vast", gpu="4090", max_hours=2, confirm=no), ctx)
    assert no.asked == ["create exp1 on vast?"] and rented_nothing(emu, ctx)


def test_vast_up_refuses_a_destination_that_fails_its_probe(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock, tmp_path: Path
) -> None:
    ctx = ctx_for(settings.with_overrides(git_remote=str(tmp_path / "no-such-remote.git")), vast, clock)
    with pytest.raises(ConfigError) as caught:
        up_vast(ctx)
    assert "GPUC_GIT_REMOTE" in caught.value.message + (caught.value.hint or "")
    assert rented_nothing(emu, ctx)


def test_vast_up_refuses_a_watchdog_a_rented_pod_cannot_reach(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock
) -> None:
    ctx = ctx_for(settings.with_overrides(watchdog_url="http://127.0.0.1:8787"), vast, clock)
    with pytest.raises(ConfigError, match="a rented pod cannot reach it"):
        up_vast(ctx)
    assert rented_nothing(emu, ctx)


def test_vast_up_refuses_a_missing_ssh_key(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock, tmp_path: Path
) -> None:
    ctx = ctx_for(settings.with_overrides(ssh_key_path=tmp_path / "no_such_key"), vast, clock)
    with pytest.raises(ConfigError, match="no ssh key at"):
        up_vast(ctx)
    assert rented_nothing(emu, ctx)


class OlderWatchdog(HealthyWatchdog):
    """A watchdog from an older gpuc: its status as it sends it, without `protocol` or with a lower one."""

    def __init__(self, clock: FakeClock, protocol: int | None) -> None:
        super().__init__(clock)
        self.protocol = protocol

    def status(self) -> StatusResponse:
        sent = super().status().model_dump(exclude={"protocol"})
        if self.protocol is not None:
            sent["protocol"] = self.protocol
        return StatusResponse.model_validate_json(json.dumps(sent))


@pytest.mark.parametrize("protocol", [None, WIRE_PROTOCOL - 1], ids=["no-protocol", "older-protocol"])
def test_up_refuses_a_watchdog_that_runs_an_older_gpuc_before_the_rent(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock, protocol: int | None
) -> None:
    """The pod runs this gpuc and sends fields an older watchdog's strict model refuses (4xx): the
    pod is silent to it and destroyed with its job. `up` refuses first, and says how to upgrade the watchdog."""
    ctx = ctx_for(settings, vast, clock)
    ctx.watchdog = OlderWatchdog(clock, protocol)  # type: ignore[assignment]
    with pytest.raises(ConfigError) as caught:
        up_vast(ctx)
    assert f"the watchdog at {settings.watchdog_url} runs an older gpuc" in caught.value.message
    assert "refuse this pod's heartbeats" in caught.value.message
    hint = caught.value.hint or ""
    assert "gpuc watchdog deploy" in hint and "gpuc watchdog serve" in hint
    assert rented_nothing(emu, ctx)


# ---- a bid under the floor: Vast refuses it; `up` says so first, with the floor and the fix ---------------


def bid_up(ctx: Ctx, bid: float, **fields: object) -> None:
    opts = {"experiment": "exp1", "provider": "vast", "gpu": "4090", "max_hours": 2, "confirm": yes, **fields}
    up(UpOptions(interruptible=True, bid=bid, **opts), ctx)  # type: ignore[arg-type]


@pytest.mark.parametrize("dry_run", [False, True])
def test_up_refuses_a_bid_under_every_offers_floor_naming_the_floor_and_the_command(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock, dry_run: bool
) -> None:
    ctx = ctx_for(settings, vast, clock)
    with pytest.raises(BidUnderFloor) as caught:
        bid_up(ctx, 0.12, dry_run=dry_run)  # the RTX 4090 passing the filters takes bids from 0.20
    assert "$0.200 per GPU-hour (offer 11684738)" in caught.value.message
    hint = caught.value.hint or ""
    assert "--bid 0.22" in hint and "gpuc offers --provider vast --interruptible --gpu 'RTX 4090'" in hint
    assert rented_nothing(emu, ctx) and emu.ops("create") == []


def test_up_refuses_a_bid_under_the_floor_of_the_offer_it_names(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock
) -> None:
    ctx = ctx_for(settings, vast, clock)
    with pytest.raises(BidUnderFloor, match=r"offer 11684741's min_bid is \$0.070 per GPU-hour"):
        bid_up(ctx, 0.05, offer_id="11684741")
    assert rented_nothing(emu, ctx) and emu.ops("create") == []


def test_a_bid_over_the_floor_rents_the_offer_it_clears_at_the_bid(
    settings: Settings, vast: VastProvider, emu: VastEmulator, clock: FakeClock
) -> None:
    no = Declines()
    lines: list[str] = []
    ctx = ctx_for(settings, vast, clock)
    ctx.echo = lines.append
    with pytest.raises(GpucError, match="not confirmed"):
        bid_up(ctx, 0.22, confirm=no)
    assert no.asked and any("$0.220/h" in line and "your bid, offer 11684738" in line for line in lines)
