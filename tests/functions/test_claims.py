"""Pods carry their own proof; the store is a cache: the real handlers, the real reaper and
the pod's real signer and client, on a virtual clock with the reaper's intervals scaled down."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fakes.claims import KEY, OTHER_KEY, ClaimedPod
from fakes.watchdog import World, make_world

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.signing import derive_key, mint_claim, new_token, pod_token_for, sign, watchdog_id
from gpuc.functions.claims import read_claim
from gpuc.functions.reaper.owners import ALERT_EVERY_S
from gpuc.functions.store import SqliteStore

MIN = 60.0
# Scaled: a pass a minute, a pod silent for 3 min is late, a stray goes at 5 min (+ a one-minute warning).
SCALED = {
    "reaper_period_s": MIN,
    "silence_limit_s": 3 * MIN,
    "destroy_grace_s": MIN,
    "unregistered_grace_s": 5 * MIN,
}


def keyed_world(home: Path, clock: FakeClock, key: str = KEY, **overrides: Any) -> World:
    settings: dict[str, Any] = {**SCALED, **overrides}
    return make_world(home, clock, watchdog_key=key, **settings)


def lose_store(world: World, path: Path) -> None:
    """watchdog.db deleted (or a new GPUC_HOME): the same watchdog, key and URL, on an empty store."""
    world.store.close()
    world.store = world.deps.store = SqliteStore(path)


def live(world: World, pods: list[ClaimedPod], minutes: int) -> None:
    """The pods ping every minute; the reaper passes every minute."""
    for _ in range(minutes):
        world.clock.advance(MIN)
        for pod in pods:
            if world.provider.alive(pod.pod_id):
                pod.ping()
        world.reap()


@pytest.fixture
def world(home: Path, clock: FakeClock) -> World:
    return keyed_world(home, clock)


def test_a_watchdog_restarted_on_an_empty_store_destroys_no_healthy_pod_and_the_stray_by_its_grace(
    world: World, tmp_path: Path
) -> None:
    pods = [ClaimedPod(world, f"pod-{i}", tmp_path / "pods") for i in (1, 2, 3)]
    world.provider.add("stray", watchdog=world.deps.watchdog_id)  # `up` died before registering it
    live(world, pods, 3)
    lose_store(world, tmp_path / "new" / "watchdog.db")
    lost_at = world.now
    gone_at = None
    for _ in range(60):
        live(world, pods, 1)
        if gone_at is None and not world.provider.alive("stray"):
            gone_at = world.now
    assert [p.pod_id for p in pods if not world.provider.alive(p.pod_id)] == []
    grace = world.settings.unregistered_grace_s
    assert gone_at is not None and lost_at + grace <= gone_at <= lost_at + grace + 3 * MIN
    for pod in pods:
        rec = world.pod(pod.pod_id)
        assert (rec.origin, rec.state, rec.key) == ("registered", "ok", derive_key(pod.token))
        assert rec.deadline_at is not None and rec.experiment == "exp"


def test_an_agent_restart_keeps_the_latest_claim(world: World, tmp_path: Path) -> None:
    pod = ClaimedPod(world, "p1", tmp_path / "pods")
    answer = world.admin("POST", "/v1/pods/p1/deadline", api.DeadlineRequest(extend_s=3600))
    later = api.DeadlineAnswer.model_validate(answer.body).deadline_at
    assert pod.ping() is not None
    pod.agent_restart()  # the agent died and came back: the claim on disk, not the one from `up`
    claim = read_claim(world.deps, pod.claim.text or "")
    assert claim is not None and claim.deadline_at == later


def test_an_extend_after_a_store_loss_reaches_the_pod_as_a_fresh_claim(world: World, tmp_path: Path) -> None:
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    first = read_claim(world.deps, pod.first_claim)
    assert first is not None and first.deadline_at is not None
    live(world, [pod], 2)
    lose_store(world, tmp_path / "new" / "watchdog.db")
    live(world, [pod], 2)  # listed by the first pass after the loss, re-created by the next ping's claim
    answer = world.admin("POST", "/v1/pods/pod-1/deadline", api.DeadlineRequest(extend_s=2 * 3600))
    assert answer.status == 200, answer.body
    extended = api.DeadlineAnswer.model_validate(answer.body).deadline_at
    assert extended > first.deadline_at
    got = pod.ping()
    assert got is not None and got.claim is not None
    on_disk = read_claim(world.deps, (pod.state / "claim").read_text())
    assert on_disk is not None and on_disk.deadline_at == extended
    # And it holds: lost a second time, the store learns the extended deadline from the pod.
    lose_store(world, tmp_path / "again" / "watchdog.db")
    live(world, [pod], 2)
    assert world.pod("pod-1").deadline_at == extended


def _payload(claim: str) -> dict[str, object]:
    data = json.loads(base64.urlsafe_b64decode(claim.split(".")[1]))
    assert isinstance(data, dict)
    return data


def _claim_with(claim: str, **changes: object) -> str:
    """The same MAC over an altered payload."""
    version, _, mac = claim.split(".")
    data = {**_payload(claim), **changes}
    payload = base64.urlsafe_b64encode(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).decode()
    return f"{version}.{payload}.{mac}"


def _claimed_ping(world: World, pod_id: str, token: str, claim: str) -> api.HeartbeatAnswer | int:
    body = world.heartbeat_body(pod_id, 5)
    ts = int(world.now)
    headers = {
        api.H_POD: pod_id,
        api.H_TIMESTAMP: str(ts),
        api.H_SEQ: "5",
        api.H_SIGNATURE: sign(derive_key(token), ts, 5, body),
        api.H_CLAIM: claim,
    }
    answer = world.call("POST", "/v1/heartbeat", body, headers)
    return answer.status


def _forgeries(world: World, tmp_path: Path) -> dict[str, tuple[str, str, str]]:
    """(pod id in the request, token it signs with, claim it presents), each one forged."""
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    own = world.deps.watchdog_id
    assert own is not None
    other_token = pod_token_for(OTHER_KEY, "fake", "pod-1", "pod-1")
    other_claim = mint_claim(OTHER_KEY, {**_payload(pod.first_claim), "w": watchdog_id(OTHER_KEY)})
    never = float(_payload(pod.first_claim)["d"]) + 365 * 86400  # type: ignore[arg-type]
    return {
        "signed with another watchdog's key": ("pod-1", other_token, other_claim),
        "the deadline altered": ("pod-1", pod.token, _claim_with(pod.first_claim, d=never)),
        "replayed for another pod id": ("pod-2", pod.token, pod.first_claim),
        "stolen, without the pod's token": ("pod-1", new_token(), pod.first_claim),
        "naming another watchdog under this key": (
            "pod-1",
            pod.token,
            mint_claim(KEY, {**_payload(pod.first_claim), "w": "wd-x"}),
        ),
        "not a claim": ("pod-1", pod.token, "c1.e30." + "0" * 64),
    }


@pytest.mark.parametrize(
    "forgery",
    [
        "signed with another watchdog's key",
        "the deadline altered",
        "replayed for another pod id",
        "stolen, without the pod's token",
        "naming another watchdog under this key",
        "not a claim",
    ],
)
def test_a_forged_claim_is_refused_and_stores_nothing(world: World, tmp_path: Path, forgery: str) -> None:
    pod_id, token, claim = _forgeries(world, tmp_path)[forgery]
    lose_store(world, tmp_path / "new" / "watchdog.db")
    world.provider.add("pod-2", watchdog=world.deps.watchdog_id)
    assert _claimed_ping(world, pod_id, token, claim) == 401
    assert world.store.list_pods() == []  # an empty store stays empty
    world.clock.advance(1)
    world.reap()  # the reaper lists both as strays first: a forged claim must not turn one into a pod
    # Only today's bounded note on a listed stray may change (store.note_unverified_ping): nothing else.
    noted = {"unverified_ping_at"}
    before = {p.pod_id: p.model_dump(exclude=noted) for p in world.store.list_pods()}
    assert _claimed_ping(world, pod_id, token, claim) == 401
    assert {p.pod_id: p.model_dump(exclude=noted) for p in world.store.list_pods()} == before
    assert sorted((p.pod_id, p.origin, p.key) for p in world.store.list_pods()) == [
        ("pod-1", "adopted", ""),
        ("pod-2", "adopted", ""),
    ]


def test_the_genuine_claim_passes_the_same_path(world: World, tmp_path: Path) -> None:
    """The forgeries' control: the pod's own token and claim re-create it."""
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    lose_store(world, tmp_path / "new" / "watchdog.db")
    world.reap()  # the new store's first pass lists it
    assert _claimed_ping(world, "pod-1", pod.token, pod.first_claim) == 200
    assert world.pod("pod-1").key == derive_key(pod.token)


def test_a_second_watchdog_on_the_account_leaves_the_first_ones_pods_alone(
    home: Path, clock: FakeClock, tmp_path: Path
) -> None:
    # A day of passes: fewer of them, and deadlines past the test
    slower: dict[str, Any] = {"reaper_period_s": 5 * MIN, "silence_limit_s": 15 * MIN, "max_hours": 40.0}
    first = keyed_world(home, clock, **slower)
    second = keyed_world(tmp_path / "second-home", clock, key=OTHER_KEY, **slower)
    second.provider = first.provider
    second.deps.providers = first.deps.providers  # one account
    pods = [ClaimedPod(first, f"pod-{i}", tmp_path / "pods") for i in (1, 2)]
    first.provider.add("stray-of-second", watchdog=second.deps.watchdog_id)
    start = clock.now()
    passes = 0
    while clock.now() < start + ALERT_EVERY_S + 2 * 3600:
        clock.advance(5 * MIN)
        for pod in pods:
            pod.ping()
        first.reap()
        second.reap()
        passes += 1
    assert [p.pod_id for p in pods if not first.provider.alive(p.pod_id)] == []
    assert not first.provider.alive("stray-of-second")  # its own strays it still takes, by the grace
    alerts = [n for n in second.store.recent_notifications(1000) if n.kind == "other_watchdog"]
    assert len(alerts) == 2, [a.title for a in alerts]  # once a day
    assert str(first.deps.watchdog_id) in alerts[0].title and "pod-1" in alerts[0].message
    assert all(p.pod_id not in {r.pod_id for r in second.store.list_pods()} for p in pods)
    assert passes > 300


def test_a_carried_pod_is_this_watchdogs_own_though_marked_for_another(home: Path, clock: FakeClock) -> None:
    world = keyed_world(home, clock, watchdog_carried="old-1")
    world.provider.add("old-1", watchdog="wd-the-old-one")
    world.provider.add("old-2", watchdog="wd-the-old-one")
    world.run(30 * MIN)
    assert not world.provider.alive("old-1")  # never pinged here, unregistered: a stray by the grace
    assert world.provider.alive("old-2")


def test_registration_without_a_key_needs_a_watchdog_that_has_one(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock)  # no key of its own (a deployment from before claims)
    request = api.RegisterRequest(pod_id="p1", provider="fake", name="gpuc-p1", experiment="exp")
    answer = world.admin("POST", "/v1/pods", request)
    assert answer.status == 400 and "key" in answer.body["error"]
    assert world.store.list_pods() == []
    assert world.admin("GET", "/v1/status").body["watchdog_id"] is None


def test_a_derived_token_is_the_same_on_a_retried_registration(world: World, tmp_path: Path) -> None:
    pod = ClaimedPod(world, "p1", tmp_path / "pods")
    request = api.RegisterRequest(pod_id="p1", provider="fake", name="gpuc-p1", experiment="exp")
    again = api.RegisterAnswer.model_validate(world.admin("POST", "/v1/pods", request).body)
    assert again.token == pod.token
    assert world.admin("GET", "/v1/status").body["watchdog_id"] == world.deps.watchdog_id


def test_a_store_restored_from_an_old_backup_learns_the_extend_from_the_pods_claim(
    world: World, tmp_path: Path
) -> None:
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    live(world, [pod], 2)
    backup = tmp_path / "backup" / "watchdog.db"
    backup.parent.mkdir()
    with sqlite3.connect(tmp_path / "gpuc-home" / "watchdog.db") as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    answer = world.admin("POST", "/v1/pods/pod-1/deadline", api.DeadlineRequest(extend_s=6 * 3600))
    extended = api.DeadlineAnswer.model_validate(answer.body).deadline_at
    live(world, [pod], 2)  # the pod hears it
    lose_store(world, backup)  # the table restored from the backup: it knows the pod, not the extend
    assert world.pod("pod-1").deadline_at != extended
    live(world, [pod], 1)
    assert world.pod("pod-1").deadline_at == extended


def test_an_older_claim_never_undoes_what_the_store_decided_since(world: World, tmp_path: Path) -> None:
    """A budget's pull-in (or a `gpuc extend` to earlier) after the pod's last answer: the claim it still
    presents is older than the store's last sight of it, and loses."""
    pod = ClaimedPod(world, "pod-1", tmp_path / "pods")
    live(world, [pod], 2)
    sooner = world.now + 600
    assert world.store.update_if("pod-1", {}, {"deadline_at": sooner})  # as functions/reaper/budget.py does
    live(world, [pod], 1)
    assert world.pod("pod-1").deadline_at == sooner
    claim = read_claim(world.deps, pod.claim.text or "")
    assert claim is not None and claim.deadline_at == sooner  # and the pod hears the pull-in
