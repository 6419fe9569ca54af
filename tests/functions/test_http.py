"""The local watchdog server over real HTTP on loopback: bad input is a 4xx and stores nothing."""

from __future__ import annotations

import json
import logging
import socket
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakes.watchdog import ADMIN, World

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.functions.app import build_deps
from gpuc.functions.server import ServerHandle, start_in_thread


@pytest.fixture
def server(world: World) -> Iterator[ServerHandle]:
    handle = start_in_thread(world.settings, deps=world.deps)
    yield handle
    handle.stop()


@pytest.fixture
def http(server: ServerHandle) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        yield client


def raw(server: ServerHandle, data: bytes) -> tuple[int, bytes]:
    """Send bytes as they are; return the status code and the body."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks):
                head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    )
                )
                if len(body) >= length:
                    return int(head.split(b" ")[1]), body[:length]
    raise AssertionError("no complete answer")


def test_a_pod_registers_pings_and_shows_in_status(world: World, http: httpx.Client) -> None:
    auth = {"Authorization": f"Bearer {ADMIN}"}
    token = "pod-token-for-http-test"
    world.tokens["p1"] = token
    world.provider.add("p1")
    register = {
        "pod_id": "p1",
        "provider": "fake",
        "name": "gpuc-p1",
        "experiment": "exp",
        "key": __import__("gpuc.core.signing", fromlist=["derive_key"]).derive_key(token),
    }
    assert http.post("/v1/pods", json=register, headers=auth).status_code == 200
    body = world.heartbeat_body("p1", 1)
    answer = http.post("/v1/heartbeat", content=body, headers=world.signed("p1", body, 1))
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["server_time"] == world.now
    status = api.StatusResponse.model_validate(http.get("/v1/status", headers=auth).json())
    assert [(p.pod_id, p.last_seq) for p in status.pods] == [("p1", 1)]


def test_bad_json_is_400(http: httpx.Client) -> None:
    answer = http.post("/v1/pods", content=b"{oops", headers={"Authorization": f"Bearer {ADMIN}"})
    assert (answer.status_code, answer.json()) == (400, {"error": "body is not valid JSON"})


def test_a_huge_body_is_413_and_never_read(world: World, server: ServerHandle, http: httpx.Client) -> None:
    answer = http.post("/v1/heartbeat", content=b"x" * (api.MAX_BODY_BYTES + 1))
    assert answer.status_code == 413
    # A client that announces a gigabyte gets its answer without sending a byte of it
    status, body = raw(server, b"POST /v1/pods HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
    assert status == 413
    assert json.loads(body) == {"error": f"body larger than {api.MAX_BODY_BYTES} bytes"}
    assert world.store.list_pods() == []


def test_a_forged_signature_is_401_and_stores_nothing(world: World, http: httpx.Client) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    headers = {**world.signed("p1", body, 1), api.H_SIGNATURE: "0" * 64}
    answer = http.post("/v1/heartbeat", content=body, headers=headers)
    assert (answer.status_code, answer.json()) == (401, {"error": "unknown pod or bad signature"})
    assert world.pod("p1").last_seen is None


def test_odd_requests_get_a_4xx_never_a_5xx(server: ServerHandle, http: httpx.Client) -> None:
    assert http.request("BREW", "/v1/status").status_code == 405
    assert http.request("PUT", "/v1/pods").status_code == 405
    head = http.head("/v1/status")
    assert head.status_code == 405 and head.content == b""
    assert http.get("/").status_code == 404
    assert raw(server, b"POST /v1/pods HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")[0] == 411
    assert raw(server, b"POST /v1/pods HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")[0] == 400
    # What the stdlib's parser refuses is answered as JSON with a status line too
    for garbled in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1 extra words\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n"):
        status, body = raw(server, garbled)
        assert status == 400
        assert "error" in json.loads(body)


def test_one_log_line_per_request_without_bodies_or_tokens(
    world: World, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    # DEBUG: an answered request logs there; a refused one at INFO (test_honest_status.py)
    caplog.set_level(logging.DEBUG, logger="gpuc.functions.server")
    http.post(
        "/v1/notify?token=querysecret",
        json={"title": "bodysecret", "message": "m"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    lines = [r.getMessage() for r in caplog.records if r.name == "gpuc.functions.server"]
    assert len(lines) == 1
    assert lines[0].startswith("POST /v1/notify 200 ")
    for secret in (ADMIN, "querysecret", "bodysecret"):
        assert secret not in caplog.text


def test_the_reaper_runs_in_the_background(home: Path, clock: FakeClock) -> None:
    from fakes.watchdog import make_world

    world = make_world(home, clock)
    handle = start_in_thread(world.settings, deps=world.deps, reaper_interval_s=0.05)
    try:
        deadline = time.monotonic() + 10
        while world.store.get_meta("reaper") is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        handle.stop()
    meta = world.store.get_meta("reaper")
    assert meta is not None and meta.value["last_run"] == clock.now()
    world.store.close()


def test_a_server_without_an_admin_token_makes_and_saves_one(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(home=home)
    deps = build_deps(settings)
    config = home / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    monkeypatch.setenv("GPUC_HOME", str(home))
    found = load_settings().admin_token
    assert found is not None and found.get_secret_value() == deps.admin_token.get_secret_value()
    again = build_deps(load_settings())
    assert again.admin_token.get_secret_value() == deps.admin_token.get_secret_value()
    deps.close()
    again.close()


@pytest.mark.parametrize("length", ["²", "1²", "³", "1e3", "+5", "0x10"])
def test_a_content_length_that_is_not_ascii_digits_is_400(server: ServerHandle, length: str) -> None:
    # Headers are latin-1: str.isdigit() is True for "²", and int() then raises (a dropped connection)
    request = f"POST /v1/pods HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode("latin-1")
    status, body = raw(server, request)
    assert status == 400
    assert json.loads(body) == {"error": "malformed Content-Length header"}


def test_a_seq_past_2_63_and_deeply_nested_json_are_4xx_over_http(world: World, http: httpx.Client) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    headers = {**world.signed("p1", body, 1), api.H_SEQ: str(2**63)}
    answer = http.post("/v1/heartbeat", content=body, headers=headers)
    assert (answer.status_code, answer.json()) == (400, {"error": f"missing or malformed {api.H_SEQ} header"})
    nested = b'{"title": ' + b"[" * 7000 + b"NaN" + b"]" * 7000 + b', "message": "m"}'
    answer = http.post("/v1/notify", content=nested, headers={"Authorization": f"Bearer {ADMIN}"})
    assert (answer.status_code, answer.json()) == (400, {"error": "body is not valid JSON"})
    assert world.pod("p1").last_seen is None
