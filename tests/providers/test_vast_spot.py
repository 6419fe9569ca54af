"""Vast's interruptible life in the emulator, and what gpuc's Vast provider does with it."""

from __future__ import annotations

import json

import pytest
from fakes.providers import VAST_URL, spec

from gpuc.core.errors import ConfigError, ProviderError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_offers import BidUnderFloor
from gpuc.functions.recovery.webhook import check_delivery, wants_look
from gpuc.testkit.emulators.common import EmuRequest
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState

OFFER = "11684738"


def bid_pod(vast: VastProvider, bid: float = 0.22) -> str:
    return vast.create(spec("vast", offer_id=OFFER, interruptible=True, bid_per_gpu=bid)).id


def test_an_outbid_pauses_the_instance_kills_its_processes_and_keeps_billing_its_disk(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    killed: list[str] = []
    vast_emu.on_pause = killed.append
    pod_id = bid_pod(vast)
    vast_emu.outbid(pod_id, by=0.30)
    assert vast.get(pod_id).status == "paused"  # type: ignore[union-attr]
    assert killed == [pod_id]
    inst = vast_emu.instances[int(pod_id)]
    assert inst.disk == 30.0 and vast_emu.alive() == [inst]  # disk kept: it still exists, and bills
    with pytest.raises(ValueError, match="does not outbid"):
        vast_emu.outbid(pod_id, by=0.10)


def test_a_paused_bid_resumes_when_the_higher_bid_leaves_or_it_is_raised(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    pod_id = bid_pod(vast)
    vast_emu.outbid(pod_id, by=0.30)
    vast_emu.outbidder_leaves(pod_id)
    assert [vast.get(pod_id).status for _ in range(3)][-1] == "running"  # type: ignore[union-attr]
    vast_emu.outbid(pod_id, by=0.30)
    body = json.dumps({"client_id": "me", "price": 0.31}).encode()
    auth = {"authorization": f"Bearer {vast_emu.api_key}"}
    raised = vast_emu.handle(EmuRequest("PUT", f"/api/v0/instances/bid_price/{pod_id}/", {}, auth, body))
    assert raised.status == 200 and vast_emu.instances[int(pod_id)].actual == "loading"


def test_on_demand_is_never_outbid(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER, price_per_hour=0.34))
    with pytest.raises(ValueError, match="on-demand"):
        vast_emu.outbid(pod.id)


def test_a_losing_bid_the_server_creates_anyway_is_destroyed_and_confirmed_gone(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    # A server that does not honour cancel_unavail: the create errs, yet names a STOPPED instance that
    # bills its disk (dstack PR #4036). gpuc destroys it before it reports the refusal.
    server = VastEmulator(api_key=vast_emu.api_key, clock=vast_emu.clock, ignore_cancel_unavail=True)
    p = VastProvider(
        vast_emu.api_key, url=VAST_URL, transport=server.transport(), clock=vast.clock, backoff=zero_backoff
    )
    server.offers[int(OFFER)].winning_bid = 0.30
    with pytest.raises(ProviderError) as caught:
        p.create(spec("vast", offer_id=OFFER, interruptible=True, bid_per_gpu=0.22))
    p.close()
    assert server.alive() == [] and len(server.destroyed) == 1
    assert "confirmed gone" in (caught.value.hint or "")
    assert len(server.ops("create")) == 1  # never a second create


def test_outbid_webhooks_are_signed_delivered_at_least_once_and_only_a_hint(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    vast_emu.deliver_twice = True
    pod_id = bid_pod(vast)
    vast_emu.outbid(pod_id)
    first, again = vast_emu.webhooks
    seen: set[str] = set()

    def first_time(event_id: str) -> bool:
        new = event_id not in seen
        seen.add(event_id)
        return new

    now = vast_emu.clock.now()
    good = check_delivery(first.headers, first.body, secret=vast_emu.webhook_secret, now=now, first_time=first_time)
    assert wants_look(good)
    replay = check_delivery(again.headers, again.body, secret=vast_emu.webhook_secret, now=now, first_time=first_time)
    assert replay == "already seen (at-least-once delivery): ignored" and not wants_look(replay)
    assert json.loads(first.body)["notif_type"] == "outbid"  # the short slug; `client:outbid` is the subscription
    assert first.headers["X-Vast-Signature-256"].startswith("sha256=") and "X-Vast-Signature" not in first.headers
    assert (first.headers["X-Vast-Delivery-Attempt"], again.headers["X-Vast-Delivery-Attempt"]) == ("1", "2")


# ---- the bid's floor: refused before anything is rented ---------------------------------------------


def test_a_bid_under_every_offers_floor_is_refused_before_renting_with_the_floor_and_the_command(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    with pytest.raises(BidUnderFloor) as caught:
        vast.create(spec("vast", interruptible=True, bid_per_gpu=0.12))  # the 4090 passing the filters: 0.20
    said = caught.value.message
    assert "$0.200 per GPU-hour (offer 11684738)" in said and "nothing was rented" in said
    hint = caught.value.hint or ""
    assert "--bid 0.22" in hint and "gpuc offers --provider vast --interruptible --gpu 'RTX 4090'" in hint
    assert vast_emu.ops("create") == []


def test_a_bid_takes_the_cheapest_offer_whose_floor_it_clears(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.add_offer(VastOfferState(11684799, "RTX 4090", 0.30, 0.25))  # cheaper on demand, a higher floor
    pod = vast.create(spec("vast", interruptible=True, bid_per_gpu=0.22))
    assert vast_emu.ops("create")[-1].path == f"/api/v0/asks/{OFFER}/" and pod.price_per_hour == 0.22


def test_a_multi_gpu_bid_is_weighed_per_machine_against_the_offers_floor(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    # The emulator's 2 x RTX 4090 offer: min_bid 0.30 for the machine, 0.15 per GPU.
    with pytest.raises(BidUnderFloor, match=r"\$0.150 per GPU-hour \(offer 11684746\)") as caught:
        vast.create(spec("vast", interruptible=True, bid_per_gpu=0.14, gpu_count=2))
    assert "--num-gpus 2" in (caught.value.hint or "") and "--bid 0.165" in (caught.value.hint or "")
    vast.create(spec("vast", interruptible=True, bid_per_gpu=0.15, gpu_count=2))
    assert json.loads(vast_emu.ops("create")[-1].body)["price"] == 0.30


def test_a_pinned_offer_the_server_refuses_for_its_floor_says_so(vast: VastProvider, vast_emu: VastEmulator) -> None:
    with pytest.raises(ProviderError, match="bid below min_bid") as caught:
        vast.create(spec("vast", offer_id=OFFER, interruptible=True, bid_per_gpu=0.12))
    assert "min_bid" in (caught.value.hint or "") and "nothing was created" in (caught.value.hint or "")
    assert vast_emu.alive() == []


def test_a_bid_out_of_vasts_range_is_refused_before_the_create(vast: VastProvider, vast_emu: VastEmulator) -> None:
    with pytest.raises(ConfigError, match="outside what Vast takes"):
        vast.create(spec("vast", offer_id=OFFER, interruptible=True, bid_per_gpu=200.0))
    assert vast_emu.ops("create") == []


def test_one_offer_is_found_by_its_id_while_it_is_rentable(vast: VastProvider, vast_emu: VastEmulator) -> None:
    found = vast.offer(OFFER, interruptible=True)
    assert found is not None and (found.id, found.min_bid) == (OFFER, 0.20)
    assert json.loads(vast_emu.ops("offers")[-1].body)["id"] == {"eq": int(OFFER)}
    vast.create(spec("vast", offer_id=OFFER))
    assert vast.offer(OFFER) is None  # rented: no longer offered
