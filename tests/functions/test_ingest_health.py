"""A flooded or failing ingest is not silence (F18).

When real heartbeats fail because the watchdog's own ingest refused them (overloaded, erroring), the
reaper must not take the pods for dead: silence kills are held, like provider blindness, with one alert,
a nag and one all-clear. Locally the server counts what it refused or failed; on AWS the reaper reads the
ingest's CloudWatch metrics (tests/aws/test_unauth_aws.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest
from fakes.watchdog import World

from gpuc.core import api
from gpuc.functions import server as srv
from gpuc.functions.ingest import IngestLog
from gpuc.functions.server import ServerHandle, start_in_thread

MIN = 60.0


def test_the_ingest_log_counts_per_minute_in_a_window_and_forgets() -> None:
    log = IngestLog()
    t = 1_790_000_000.0
    assert log.trouble(t - 600, t) is None
    log.record("overloaded", t - 300)
    log.record("overloaded", t - 290)
    log.record("server error", t - 200)
    assert log.trouble(t - 600, t) == "refused or failed 3 requests (overloaded 2, server error 1)"
    assert log.trouble(t - 100, t) is None  # outside the window
    log.record("overloaded", t + IngestLog.KEEP_S + 120)
    assert log.trouble(t - 600, t) is None  # older than KEEP_S is forgotten: bounded memory


def silent_pod(world: World) -> None:
    world.register("p1")
    world.ping("p1")


def test_a_silent_pod_is_not_destroyed_while_the_ingest_was_refusing_heartbeats(world: World) -> None:
    log = IngestLog()
    world.deps.ingest_health = log
    silent_pod(world)
    period = world.settings.reaper_period_s
    for _ in range(10):  # 50 minutes of flood: every heartbeat of p1 refused
        for minute in range(int(period // 60)):
            log.record("overloaded", world.now + minute * MIN)
        world.clock.advance(period)
        world.reap()
    assert world.provider.destroyed == []
    assert world.pod("p1").state == "late"
    assert "ingest" in (world.pod("p1").reason or "")
    alerts = [n for n in world.store.recent_notifications(100) if n.kind == "ingest"]
    assert len(alerts) == 1 and "overloaded" in alerts[0].message
    flood_end = world.now
    for _ in range(12):  # the flood is over and p1 is really dead: the hold ends, F5 applies
        world.clock.advance(period)
        world.reap()
        if world.provider.destroyed:
            break
    s = world.settings
    assert world.provider.destroyed == ["p1"]
    assert world.now - flood_end <= s.silence_limit_s + 2 * period + s.destroy_grace_s + period
    titles = [n.title for n in world.store.recent_notifications(100) if n.kind == "ingest"]
    assert titles[-1] == "gpuc: the watchdog's ingest is healthy again"


def test_an_unreadable_ingest_health_holds_silence_kills(world: World) -> None:
    class Broken:
        def trouble(self, since: float, now: float) -> str | None:
            raise OSError("metrics unreachable")

    world.deps.ingest_health = Broken()
    silent_pod(world)
    world.run(3600)
    assert world.provider.destroyed == []
    assert any("could not be checked" in n.message for n in world.store.recent_notifications(100))


def test_ingest_trouble_does_not_hold_other_rules(world: World) -> None:
    """An ended pod is destroyed whatever the ingest did: the hold is for silence only."""
    log = IngestLog()
    world.deps.ingest_health = log
    world.register("p1")
    assert world.admin("POST", "/v1/pods/p1/end", api.EndRequest(end_at=world.now)).status == 200
    for _ in range(6):
        log.record("overloaded", world.now)
        world.clock.advance(world.settings.reaper_period_s)
        world.reap()
    assert world.provider.destroyed == ["p1"]


@pytest.fixture
def served(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerHandle]:
    monkeypatch.setattr(srv, "MAX_IN_FLIGHT", 2)
    handle = start_in_thread(world.settings, deps=world.deps)
    yield handle
    handle.stop()


def test_the_local_server_refuses_past_its_capacity_and_says_so_to_the_reaper(
    world: World, served: ServerHandle
) -> None:
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    world.register("p1")
    world.reap()  # the reaper sees it running: from now on its silence counts
    world.clock.advance(5 * MIN)
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(2)]  # a flood holds every slot
    try:
        body = world.heartbeat_body("p1", 1)
        answer = httpx.post(f"{served.url}/v1/heartbeat", content=body, headers=world.signed("p1", body, 1), timeout=10)
        assert answer.status_code == 429 and answer.json() == {"error": "overloaded: retry in a few seconds"}
    finally:
        for sock in idle:
            sock.close()
    assert world.pod("p1").last_seen is None  # the heartbeat never landed
    health = world.deps.ingest_health
    assert isinstance(health, IngestLog)
    assert "overloaded 1" in (health.trouble(world.now - 600, world.now) or "")
    world.clock.advance(5 * MIN)
    world.reap()
    assert world.provider.destroyed == [] and world.pod("p1").state == "late"  # held, alerted
    assert "ingest" in (world.pod("p1").reason or "")


def test_a_server_error_counts_and_a_client_that_drops_its_connection_does_not(
    world: World, served: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    health = world.deps.ingest_health
    assert isinstance(health, IngestLog)
    server = served._server
    try:
        raise ConnectionResetError("peer reset")
    except ConnectionResetError:
        server.handle_error(None, ("203.0.113.9", 1))  # anyone can reset a connection: no trouble
    assert health.trouble(world.now - 600, world.now) is None
    world.register("p1")

    def broken(pod_id: str) -> None:
        raise RuntimeError("database is locked")

    monkeypatch.setattr(world.store, "get_auth", broken)
    body = world.heartbeat_body("p1", 1)
    answer = httpx.post(f"{served.url}/v1/heartbeat", content=body, headers=world.signed("p1", body, 1), timeout=10)
    assert answer.status_code == 500
    assert "server error 1" in (health.trouble(world.now - 600, world.now) or "")
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        server.handle_error(None, ("203.0.113.9", 1))
    assert "handler crashed 1" in (health.trouble(world.now - 600, world.now) or "")


def test_an_answer_slower_than_the_pods_wait_counts_only_on_the_pods_routes(world: World, served: ServerHandle) -> None:
    """A pod gives up after watchdog_timeout_s: its heartbeat failed though the server answered later. A
    `gpuc reap` or a status call may take longer and no pod waits for it. (A timeout of a nanosecond makes
    every answer "slow" without racing the real clock.)"""
    world.deps.settings = world.settings.with_overrides(watchdog_timeout_s=1e-9)
    health = world.deps.ingest_health
    assert isinstance(health, IngestLog)
    status = httpx.get(f"{served.url}/v1/status", headers={"Authorization": "Bearer wrong"}, timeout=10)
    assert status.status_code == 401
    assert health.trouble(world.now - 600, world.now) is None
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    answer = httpx.post(f"{served.url}/v1/heartbeat", content=body, headers=world.signed("p1", body, 1), timeout=10)
    assert answer.status_code == 200
    assert "slower than the pods wait 1" in (health.trouble(world.now - 600, world.now) or "")


def test_a_flood_of_forged_pings_over_http_gets_only_4xx_and_stores_nothing(world: World, served: ServerHandle) -> None:
    """Past its capacity (2 here) the server says 429, like a throttled Lambda: never a 5xx, nothing stored."""
    from concurrent.futures import ThreadPoolExecutor

    world.provider.add("stray")
    world.reap()
    before = [p.model_dump() for p in world.store.list_pods()]

    def forged(i: int) -> int:
        pod_id = "stray" if i % 10 == 0 else f"made{i:05d}up"
        headers = {
            api.H_POD: pod_id,
            api.H_TIMESTAMP: str(int(world.now)),
            api.H_SEQ: "1",
            api.H_SIGNATURE: f"{i:064x}",
        }
        body = world.heartbeat_body(pod_id, 1)
        return http.post(f"{served.url}/v1/heartbeat", content=body, headers=headers).status_code

    # One client for the flood (httpx.post builds one per call, its TLS context included: most of the time).
    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=24)) as http, ThreadPoolExecutor(24) as pool:
        statuses = set(pool.map(forged, range(480)))
    assert statuses <= {401, 429}, statuses
    after = world.store.list_pods()
    assert [p.pod_id for p in after] == ["stray"]
    stray = after[0].model_dump()
    assert {k: v for k, v in stray.items() if k != "unverified_ping_at"} == {
        k: v for k, v in before[0].items() if k != "unverified_ping_at"
    }
