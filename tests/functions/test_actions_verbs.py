"""One tap from the phone: a tap acts once, on its one pod, through the watchdog's own transitions;
a refused, reused, expired, altered, other-pod or scanned link changes nothing."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fakes.watchdog import ADMIN, World

from gpuc.core import api
from gpuc.functions.actions import verbs
from gpuc.functions.actions.routes import FORM
from gpuc.functions.actions.verbs import act
from gpuc.functions.buttons import Offer, OfferKind, offer
from gpuc.functions.edge import Response
from gpuc.functions.links import ACT_LIFE_S, ALL_PODS, Verb, link_key, mint, new_claim

CONFIRMED = {"Content-Type": FORM}


def link(world: World, verb: Verb, pod_id: str, *, param: int = 0, life_s: int = ACT_LIFE_S) -> str:
    return mint(link_key(world.store), new_claim(verb, pod_id, world.now, param=param, life_s=life_s))


def offered(world: World, pod_id: str | None, kind: OfferKind, verb: Verb) -> Offer:
    pod = None if pod_id is None else world.pod(pod_id)
    return next(o for o in offer(world.deps.store, world.deps.settings, pod, kind, world.now) if o.verb == verb)


def tap(world: World, token: str, *, confirm: bool = True) -> Response:
    if confirm:
        return world.call("POST", f"/a/{token}", b"confirm=yes", CONFIRMED)
    return world.call("POST", f"/a/{token}")  # an ntfy `http` button: a bare POST


def look(world: World, token: str) -> Response:
    return world.call("GET", f"/a/{token}")


def snapshot(world: World) -> tuple[Any, ...]:
    pods = [p.model_dump() for p in world.store.list_pods()]
    return (
        pods,
        len(world.store.recent_notifications(1000)),
        list(world.provider.destroyed),
        world.store.get_meta(verbs.PAUSE_META),
    )


def kept_pod(world: World, pod_id: str = "p1") -> None:
    world.register(pod_id)
    world.ping(pod_id)
    assert world.event(pod_id, "sync_failed", "kept alive: sync failed", kept_left_s=7200).status == 200
    assert world.pod(pod_id).kept_at is not None


def actions(world: World, pod_id: str | None = None) -> list[str]:
    return [n.message for n in world.store.recent_notifications(1000) if n.kind == "action"]


# -- each verb changes the pod's fate -------------------------------------------------------------
def test_keep_1h_sets_the_lease_and_the_pod_hears_it(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    keep = offered(world, "p1", "pending_destroy", "keep")
    assert keep.safe and keep.url.endswith(f"/a/{keep.token}")
    answer = tap(world, keep.token)
    assert answer.status == 200, answer.html
    assert world.pod("p1").lease_until == world.now + 3600
    assert "kept 1 h more from the phone, until" in (answer.html or "")
    assert any("kept 1 h more from the phone" in m for m in actions(world))
    heard = api.HeartbeatAnswer.model_validate(world.ping("p1").body)
    assert heard.lease_until == world.now + 3600


def test_keep_from_a_bare_channel_post_acts_too(world: World) -> None:
    world.register("p1")
    assert tap(world, offered(world, "p1", "pending_destroy", "keep").token, confirm=False).status == 200
    assert world.pod("p1").lease_until is not None


def test_extend_2h_moves_the_deadline(world: World) -> None:
    world.register("p1", deadline_at=world.now + 3600)
    answer = tap(world, offered(world, "p1", "deadline", "extend").token)
    assert answer.status == 200, answer.html
    assert world.pod("p1").deadline_at == world.now + 3 * 3600
    assert world.kinds("p1").count("action") == 1  # the deadline's own notice, said as the phone's


def test_destroy_now_asks_the_pod_to_end_itself_and_keeps_asking(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.admin("POST", "/v1/pods/p1/keep", api.KeepRequest(until=world.now + 3600))
    assert tap(world, offered(world, "p1", "pending_destroy", "destroy").token).status == 200
    rec = world.pod("p1")
    assert (rec.intent, rec.lease_until, world.provider.destroyed) == ("end", None, [])
    for _ in range(2):  # a retried heartbeat hears it again, until the pod acts
        heard = api.HeartbeatAnswer.model_validate(world.ping("p1").body)
        assert (heard.intent, heard.intent_at) == ("end", rec.intent_at)
    # It heard: its own end (sync first) goes first. Still pinging, not ended: said, never killed.
    world.run(2 * world.settings.silence_limit_s, keep_alive=("p1",))
    assert world.provider.destroyed == [] and "mark" not in world.kinds("p1")
    assert world.pod("p1").state == "late" and "has not ended" in (world.pod("p1").reason or "")
    world.event("p1", "phone_destroy", "destroy asked from the phone; results: 1 file", end_at=world.now)
    rec = world.pod("p1")
    assert (rec.state, rec.ended_by, rec.intent) == ("ended", "phone", None)


def test_destroy_now_of_a_pod_that_cannot_answer_is_the_reapers_two_phases(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    world.clock.advance(60)
    assert tap(world, offered(world, "p1", "pending_destroy", "destroy").token).status == 200
    world.clock.advance(2 * world.settings.heartbeat_interval_s)
    world.reap()
    assert world.pod("p1").state == "down"  # phase one: "will destroy at", notified
    assert "mark" in world.kinds("p1")
    world.run(world.settings.destroy_grace_s + world.settings.reaper_period_s)
    assert world.provider.destroyed == ["p1"]


def test_a_pod_kept_after_the_phones_end_is_never_destroyed_by_it(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    assert tap(world, offered(world, "p1", "pending_destroy", "destroy").token).status == 200
    world.ping("p1")
    world.event("p1", "sync_failed", "kept alive: sync failed", kept_left_s=7200)  # its sync failed: kept
    assert world.pod("p1").intent is None
    world.run(3 * 3600 // 4)
    assert world.provider.destroyed == []


def test_destroy_now_on_a_kept_pod_is_refused(world: World) -> None:
    kept_pod(world)
    token = link(world, "destroy", "p1")
    before = snapshot(world)
    answer = tap(world, token)
    assert answer.status == 409 and "destroy anyway" in (answer.html or "")
    assert snapshot(world) == before


def test_retry_sync_reaches_the_kept_pod(world: World) -> None:
    kept_pod(world)
    assert tap(world, offered(world, "p1", "kept", "retry").token).status == 200
    heard = api.HeartbeatAnswer.model_validate(world.ping("p1", kept_left_s=7000).body)
    assert heard.intent == "retry_sync"


def test_stop_keep_disk_stops_the_kept_pod(world: World) -> None:
    kept_pod(world)
    answer = tap(world, offered(world, "p1", "kept", "stop").token)
    assert answer.status == 200, answer.html
    assert world.provider.pods["p1"].status == "stopped"
    assert world.provider.destroyed == []


def test_destroy_anyway_destroys_the_kept_pod_as_the_users_word(world: World) -> None:
    kept_pod(world)
    world.clock.advance(1800)
    token = offered(world, "p1", "kept", "anyway").token
    assert not offered(world, "p1", "kept", "anyway").safe
    page = look(world, token)
    assert page.status == 200 and "only on the pod" in (page.html or "")  # what is not synced
    answer = tap(world, token)
    assert answer.status == 200
    rec = world.pod("p1")
    assert (world.provider.destroyed, rec.state, rec.ended_by) == (["p1"], "destroyed", "phone")
    assert "destroyed" in world.kinds("p1")
    # The ending says what was spent: half an hour at $0.50/h.
    assert "it ran 30 min, $0.2500" in (answer.html or ""), answer.html


def test_pause_new_pods_shows_in_status_until_resumed(world: World) -> None:
    token = offered(world, None, "budget", "pause").token
    assert tap(world, token).status == 200
    status = api.StatusResponse.model_validate(world.admin("GET", "/v1/status").body)
    assert status.new_pods_paused is not None and "gpuc watchdog resume" in status.new_pods_paused
    assert world.admin("POST", "/v1/resume").status == 200
    assert api.StatusResponse.model_validate(world.admin("GET", "/v1/status").body).new_pods_paused is None


# -- refusals change nothing ----------------------------------------------------------------------
def test_a_reused_link_is_refused_and_nothing_changes(world: World) -> None:
    world.register("p1")
    token = offered(world, "p1", "pending_destroy", "keep").token
    assert tap(world, token).status == 200
    world.clock.advance(60)
    before = snapshot(world)
    again = tap(world, token)
    assert again.status == 410 and "already used" in (again.html or "")
    assert snapshot(world) == before


def test_an_expired_link_is_refused_and_nothing_changes(world: World) -> None:
    world.register("p1")
    token = offered(world, "p1", "pending_destroy", "keep").token
    world.clock.advance(ACT_LIFE_S)
    before = snapshot(world)
    for answer in (tap(world, token), look(world, token)):
        assert answer.status == 410 and "expired" in (answer.html or "")
    assert snapshot(world) == before


@pytest.mark.parametrize("verb", ["keep", "destroy"])
def test_an_altered_or_other_pod_link_is_refused_and_nothing_changes(world: World, verb: Verb) -> None:
    world.register("podA")
    world.register("podB")
    token = link(world, verb, "podA", param=3600 if verb == "keep" else 0)
    before = snapshot(world)
    other_pod = token.replace(".podA.", ".podB.")
    longer = re.sub(r"^k\.podA\.[0-9a-z]+", "k.podA.zzz", token) if verb == "keep" else token[:-2] + "AA"
    for forged in (other_pod, longer):
        for answer in (tap(world, forged), look(world, forged)):
            assert answer.status == 403, answer.html
    assert snapshot(world) == before
    assert tap(world, token).status == 200  # the real one still works


@pytest.mark.parametrize("token", ["nope", "k.p1.1.2.3", "x" * 80, "k.p1.0.0.0.%00"])
def test_a_malformed_link_is_400(world: World, token: str) -> None:
    world.register("p1")
    before = snapshot(world)
    for answer in (tap(world, token), look(world, token)):
        assert answer.status in (400, 404) and (answer.status == 404 or answer.html is not None)
    assert snapshot(world) == before


def test_a_link_for_an_unknown_pod_is_404(world: World) -> None:
    token = link(world, "keep", "ghost", param=3600)
    assert look(world, token).status == 404
    assert tap(world, token).status == 404


def test_a_status_page_link_never_acts_here(world: World) -> None:
    token = link(world, "page", ALL_PODS)
    assert tap(world, token).status == 400
    assert look(world, token).status == 400


def test_a_scanner_that_gets_every_link_changes_nothing_then_the_tap_works(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    kept_pod(world, "p2")
    links = [
        *offer(world.deps.store, world.deps.settings, world.pod("p1"), "pending_destroy", world.now),
        *offer(world.deps.store, world.deps.settings, world.pod("p1"), "deadline", world.now),
        *offer(world.deps.store, world.deps.settings, world.pod("p2"), "kept", world.now),
        *offer(world.deps.store, world.deps.settings, None, "budget", world.now),
    ]
    before = snapshot(world)
    for o in links:
        for _ in range(3):
            page = look(world, o.token)
            assert page.status == 200 and '<form method="post"' in (page.html or "")
    assert snapshot(world) == before
    assert tap(world, links[0].token).status == 200
    assert world.pod("p1").lease_until is not None


def test_destroy_acts_only_from_its_confirmation_page(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    kept_pod(world, "p2")
    destroy = offered(world, "p1", "pending_destroy", "destroy")
    anyway = offered(world, "p2", "kept", "anyway")
    assert not destroy.safe
    before = snapshot(world)
    for o in (destroy, anyway):
        answer = tap(world, o.token, confirm=False)
        assert answer.status == 403 and "confirmation page" in (answer.html or "")
        for via in ("ntfy", "telegram", "slack"):
            with pytest.raises(verbs.ActionRefused):
                act(world.deps, o.token, world.now, via)
    assert snapshot(world) == before
    assert tap(world, destroy.token).status == 200  # the refusals did not spend it


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"confirm=yes", {"Content-Type": "application/json"}, 415),
        (b"confirm=yes", {}, 415),
        (b"\xff\xfe", CONFIRMED, 400),
        (b"confirm=yes&via=page", CONFIRMED, 400),
        (b"confirm=no", CONFIRMED, 400),
        (b"%%%", CONFIRMED, 400),
    ],
)
def test_a_bad_form_is_4xx_and_spends_nothing(world: World, body: bytes, headers: dict[str, str], status: int) -> None:
    world.register("p1")
    token = offered(world, "p1", "pending_destroy", "keep").token
    before = snapshot(world)
    assert world.call("POST", f"/a/{token}", body, headers).status == status
    assert snapshot(world) == before
    assert tap(world, token).status == 200


def test_two_taps_racing_act_once(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # The worst interleaving, made deterministic: the second tap runs whole between the first one's checks
    # and its claim. The store's conditional write decides, not a lock here.
    world.register("p1")
    token = offered(world, "p1", "pending_destroy", "keep").token
    from gpuc.functions.links import claim_once

    inner: list[Response] = []

    def racing(store: Any, claim: Any, now: float) -> None:
        if not inner:
            inner.append(Response(0, {}))
            inner[0] = tap(world, token)
        claim_once(store, claim, now)

    monkeypatch.setattr("gpuc.functions.actions.verbs.claim_once", racing)
    outer = tap(world, token)
    assert sorted([outer.status, inner[0].status]) == [200, 410]
    assert len(actions(world)) == 1


def test_no_secret_in_any_page(home: Any, clock: Any) -> None:
    from fakes.watchdog import make_world

    planted = {
        "runpod_api_key": "rpa_" + "PLANTEDRUNPODKEY0000000000000000000",
        "vast_api_key": "PLANTEDVASTKEY00000000000000000000",
        "notify_urls": "ntfy://PLANTEDTOPIC@ntfy.example",
        "webhook_secret": "PLANTEDWEBHOOKSECRET000",
    }
    world = make_world(home, clock, **planted)  # type: ignore[arg-type]
    try:
        pod_token = world.register("p1")
        world.ping("p1")
        kept_pod(world, "p2")
        pages = []
        for pod_id, kind in (("p1", "pending_destroy"), ("p1", "deadline"), ("p2", "kept"), (None, "budget")):
            pod = None if pod_id is None else world.pod(pod_id)
            for o in offer(world.deps.store, world.deps.settings, pod, kind, world.now):  # type: ignore[arg-type]
                pages += [look(world, o.token), tap(world, o.token), tap(world, o.token)]
        pages += [look(world, "nope"), look(world, link(world, "keep", "ghost"))]
        key = link_key(world.store).hex()
        for page in pages:
            text = page.html or ""
            assert text, page.body
            for secret in (*planted.values(), ADMIN, pod_token, key, "PLANTED"):
                assert secret not in text
    finally:
        world.store.close()
