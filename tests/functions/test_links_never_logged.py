"""No capability link reaches a log, a notification, an error body or a metric, on any server.

The path of /a/<token> and /p/<token> IS the capability: every refused one was written to `gpuc watchdog
serve`'s log, and the logged links still worked afterwards. Each test plants links, opens them the ways a
person, a scanner and an attacker do (a GET, a refused POST, a spent link, an altered link), then greps
everything the server wrote for them. Logs name the route and a short hash instead.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakes.watchdog import ADMIN, World

from gpuc.core import api
from gpuc.core.signing import derive_key, new_token
from gpuc.functions import aws as lam
from gpuc.functions.app import STORE_NAME
from gpuc.functions.links import (
    ALL_PODS,
    Verb,
    link_key,
    mint,
    new_claim,
    path_for_log,
    scrub_links,
    short_hash,
)
from gpuc.functions.server import start_in_thread
from gpuc.functions.store import SqliteStore, Store

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def links(store: Store, now: float, pod_id: str) -> dict[str, str]:
    key = link_key(store)

    def make(verb: Verb, pod: str, life_s: int = 1800, param: int = 0) -> str:
        return mint(key, new_claim(verb, pod, now, param=param, life_s=life_s))

    keep = make("keep", pod_id, param=3600)
    return {
        "keep": keep,  # acted on, then opened and posted again: a spent link
        "destroy": make("destroy", pod_id),  # posted bare (a channel's button): refused 403
        "look": make("extend", pod_id, param=7200),  # only opened: a GET
        "unknown": make("keep", "no-such-pod"),  # a 404
        "altered": keep[:-2] + ("AA" if not keep.endswith("AA") else "BB"),  # a 403
        "page": make("page", ALL_PODS, life_s=3600),  # the status page
        "page_expired": make("page", ALL_PODS, life_s=1),
    }


def visit(http: httpx.Client, planted: dict[str, str]) -> dict[str, httpx.Response]:
    """Every way a link is met; the answers, for their bodies and what the spent page says."""
    got = {
        "look": http.get(f"/a/{planted['look']}"),
        "refused": http.post(f"/a/{planted['destroy']}"),  # a bare POST: refused
        "acted": http.post(f"/a/{planted['keep']}", content=b"confirm=yes", headers=FORM),
        "spent_post": http.post(f"/a/{planted['keep']}", content=b"confirm=yes", headers=FORM),
        "spent_get": http.get(f"/a/{planted['keep']}"),
        "unknown": http.get(f"/a/{planted['unknown']}"),
        "altered_get": http.get(f"/a/{planted['altered']}"),
        "altered_post": http.post(f"/a/{planted['altered']}", content=b"confirm=yes", headers=FORM),
        "page": http.get(f"/p/{planted['page']}"),
        "page_expired": http.get(f"/p/{planted['page_expired']}"),
        "mistyped": http.get(f"/A/{planted['look']}"),  # a mistyped link is still a link
        "trailing": http.get(f"/a/{planted['look']}/x"),
        "malformed": http.post(f"/a/{planted['look']}", content=b"confirm=maybe", headers=FORM),
    }
    assert got["acted"].status_code == 200, got["acted"].text
    assert got["refused"].status_code == 403 and got["altered_get"].status_code == 403
    return got


def tokens_of(planted: dict[str, str]) -> list[str]:
    # The MAC alone is a third of a link and enough to look for: a log that cut the path still leaks it.
    return [*planted.values(), *(t.rsplit(".", 1)[1] for t in planted.values())]


def assert_spent_page_says_so(got: dict[str, httpx.Response]) -> None:
    for name in ("spent_post", "spent_get"):
        answer = got[name]
        assert answer.status_code == 410, (name, answer.text)
        assert "already used" in answer.text and "kept 1 h more from the phone" in answer.text, answer.text
        assert "acts once" not in answer.text or "Opening it again does nothing" in answer.text


@pytest.fixture
def every_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.DEBUG):  # the root: every logger gpuc or the stdlib writes to
        yield caplog


def everything_said(world: World, every_log: pytest.LogCaptureFixture, got: dict[str, httpx.Response]) -> str:
    notes = [f"{n.title}\n{n.message}" for n in world.store.recent_notifications(1000)]
    bodies = [f"{m.title}\n{m.message}" for m in world.outbox()]
    # Every refusal's body (a confirmation page holds its own link in its form, as it must).
    answers = [f"{r.headers}\n{r.text}" for r in got.values() if r.status_code >= 400]
    assert len(answers) >= 9
    metrics = [repr(world.deps.ingest_health)]
    logged = [every_log.text, *(r.getMessage() for r in every_log.records)]
    return "\n".join([*logged, *notes, *bodies, *answers, *metrics])


def test_the_loopback_server_logs_no_link(world: World, every_log: pytest.LogCaptureFixture) -> None:
    world.register("pod-a")
    world.ping("pod-a")
    planted = links(world.store, world.now, "pod-a")
    with start_in_thread(world.settings, deps=world.deps) as served, httpx.Client(base_url=served.url) as http:
        got = visit(http, planted)
    assert_spent_page_says_so(got)
    said = everything_said(world, every_log, got)
    assert "refused GET /a/<action link #" in said  # the refusals are still logged: by route and hash
    assert f"#{short_hash(planted['destroy'])}>" in said  # one link, one hash: a log can follow it
    for token in tokens_of(planted):
        assert token not in said


def test_the_lambda_handler_logs_no_link(world: World, every_log: pytest.LogCaptureFixture) -> None:
    world.register("pod-a")
    planted = links(world.store, world.now, "pod-a")
    lam.set_deps(world.deps)
    try:

        def send(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> httpx.Response:
            event = {  # a Function URL request, payload format 2.0
                "version": "2.0",
                "rawPath": path,
                "rawQueryString": "",
                "headers": headers or {},
                "requestContext": {"http": {"method": method, "path": path, "sourceIp": "203.0.113.9"}},
                "body": body.decode(),
                "isBase64Encoded": False,
            }
            answer = lam.ingest_handler(event, None)
            return httpx.Response(answer["statusCode"], headers=answer["headers"], text=answer["body"])

        class Lambda:
            def get(self, path: str) -> httpx.Response:
                return send("GET", path)

            def post(self, path: str, content: bytes = b"", headers: dict[str, str] | None = None) -> httpx.Response:
                return send("POST", path, content, headers)

        got = visit(Lambda(), planted)  # type: ignore[arg-type]
    finally:
        lam.set_deps(None)
    assert_spent_page_says_so(got)
    said = everything_said(world, every_log, got)
    assert "GET /a/<action link #" in said
    for token in tokens_of(planted):
        assert token not in said


def test_a_crash_on_a_link_route_logs_no_link(world: World, every_log: pytest.LogCaptureFixture) -> None:
    """A 500 (a bug, a broken store) logs the request's path: a link's, by its hash."""
    token = links(world.store, world.now, "pod-a")["look"]

    def broken(pod_id: str) -> None:
        raise RuntimeError("the store is down")

    world.store.get_pod = broken  # type: ignore[method-assign]
    answer = world.call("GET", f"/a/{token}")
    assert answer.status == 500
    assert "failed" in every_log.text and token not in every_log.text and token.rsplit(".", 1)[1] not in every_log.text


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/v1/heartbeat", "/v1/heartbeat"),
        ("/v1/pods/pod-1/keep", "/v1/pods/pod-1/keep"),
        ("/a/d.pod.0.x.y.MACMACMACMAC", "/a/<action link #"),
        ("/p/v.all.0.x.y.MACMACMACMAC/", "/p/<status page link #"),
        ("/A/d.pod.0.x.y.MACMACMACMAC", "<a path of"),
        ("/v1/heartbeat/d.pod.0.x.y.MACMACMACMAC", "<a path of"),
    ],
)
def test_a_path_in_a_log_is_a_plain_route_or_a_hash(path: str, shown: str) -> None:
    assert path_for_log(path).startswith(shown)
    assert "MACMAC" not in path_for_log(path)
    if path.lower().startswith(("/a/", "/p/")):  # the HTTP layer's own messages quote the request line
        line = f"code 400, message Bad request syntax ('GET {path.replace('/A/', '/a/')} HTTP/1.1')"
        assert "MACMAC" not in scrub_links(line)


# -- the real `gpuc watchdog serve`, its stderr ------------------------------------------------------------


def start_serve(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    """`gpuc watchdog serve` in its own process, on a free port, its stderr (banner and log) in a file."""
    env = {
        **os.environ,
        "GPUC_HOME": str(tmp_path / "home"),
        "GPUC_ENV_FILE": str(tmp_path / "none.env"),
        "GPUC_ADMIN_TOKEN": ADMIN,
        "GPUC_NOTIFY_URLS": "",
    }
    code = "import sys; from gpuc.client.entry import main; sys.argv[0] = 'gpuc'; main()"
    args = [sys.executable, "-c", code, "watchdog", "serve", "--port", "0", "--reaper-period", "3600", *extra]
    stderr = tmp_path / "serve.stderr"
    with stderr.open("wb") as err:
        return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=err), stderr


def test_gpuc_watchdog_serve_writes_no_link_to_its_log(tmp_path: Path) -> None:
    home = tmp_path / "home"
    process, stderr = start_serve(tmp_path)
    try:
        url = wait_for_url(stderr, process)
        with httpx.Client(base_url=url, timeout=30) as http:
            pod_token = new_token()
            register = api.RegisterRequest.model_validate(
                {"pod_id": "pod-a", "provider": "runpod", "name": "gpuc-pod-a", "experiment": "exp",
                 "key": derive_key(pod_token), "price_per_hour": 0.5, "started_at": time.time()}
            )  # fmt: skip
            answer = http.post(
                "/v1/pods", content=register.model_dump_json(), headers={"Authorization": f"Bearer {ADMIN}"}
            )
            assert answer.status_code == 200, answer.text
            store = SqliteStore(home / STORE_NAME)  # the server's own store: its link key
            try:
                planted = links(store, time.time(), "pod-a")
            finally:
                store.close()
            planted["page_expired"] = planted["page"]  # real time: no waiting for one to expire
            got = visit(http, planted)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert_spent_page_says_so(got)
    log = stderr.read_text()
    assert "refused POST /a/<action link #" in log, log  # what was refused is still said
    outbox = (home / "outbox.jsonl").read_text() if (home / "outbox.jsonl").exists() else ""
    for token in tokens_of(planted):
        assert token not in log, log
        assert token not in outbox


def wait_for_url(stderr: Path, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)", stderr.read_text())
        if found:
            return found.group(1)
        if process.poll() is not None:
            raise AssertionError(f"gpuc watchdog serve exited: {stderr.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"gpuc watchdog serve did not start: {stderr.read_text()}")


@pytest.mark.parametrize(
    "request_line",
    ["GET /a/{t} HTTP/9.9", "GET /a/{t} HTTP/1.1 extra", "BREW /a/{t} HTTP/1.1", "GET /a/{t}?x=1 HTTP/1.1"],
)
def test_a_garbled_request_for_a_link_logs_no_link(
    world: World, every_log: pytest.LogCaptureFixture, request_line: str
) -> None:
    """The HTTP layer's own refusals quote the request line: a link in it is hashed too."""
    import socket

    token = links(world.store, world.now, "pod-a")["look"]
    with start_in_thread(world.settings, deps=world.deps) as served:
        host, port = served.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request_line.format(t=token).encode() + b"\r\nHost: x\r\n\r\n")
            sock.recv(65536)
    logged = every_log.text + "".join(r.getMessage() for r in every_log.records)
    assert token not in logged and token.rsplit(".", 1)[1] not in logged


def test_a_spent_link_says_what_it_did_on_both_stores(any_world: World) -> None:
    world = any_world
    world.register("pod-a")
    token = links(world.store, world.now, "pod-a")["keep"]
    assert world.call("POST", f"/a/{token}", b"confirm=yes", FORM).status == 200
    world.clock.advance(120)
    for again in (world.call("GET", f"/a/{token}"), world.call("POST", f"/a/{token}", b"confirm=yes", FORM)):
        assert again.status == 410
        html = again.html or ""
        assert "already used, at" in html and "kept 1 h more from the phone" in html and "<button" not in html
    assert world.pod("pod-a").lease_until == world.now - 120 + 3600  # acted once, not again
