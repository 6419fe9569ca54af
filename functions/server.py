"""The watchdog on loopback: the same handlers as the cloud, over the stdlib's threaded HTTP server,
with the reaper on a timer in a background thread.

Every answer is JSON. A body over the cap is refused from its Content-Length without being read.
One log line per request: method, path, status, time; never a body, a header or a query string, and a
capability link's path only as its route and a short hash (links.path_for_log: the path IS the link). A refused
request (4xx) is logged at INFO with the server's own stable reason, an answered one at DEBUG: a fleet's
heartbeats every minute would drown the refusals that tell the user what is wrong.

At most MAX_IN_FLIGHT connections are served at once; past it a connection gets a 429 at once (what a
throttled Lambda answers too; the agent retries it, and it is not a 5xx: nothing is broken). What the
server refused or failed (overloaded, a 5xx, an answer slower than the pods wait) is counted in an
IngestLog the in-process reaper reads: heartbeats the ingest refused are not the pods' silence (F18).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpuc.core.api import MAX_BODY_BYTES
from gpuc.core.clock import Clock
from gpuc.core.settings import Settings
from gpuc.functions.app import Deps, Sender, build_deps
from gpuc.functions.channels import ReloadingNotifier
from gpuc.functions.edge import Request, Response, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.functions.ingest import IngestLog
from gpuc.functions.links import path_for_log, scrub_links
from gpuc.functions.reaper import run_loop

log = logging.getLogger("gpuc.functions.server")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
READ_TIMEOUT_S = 10.0
_STDLIB_ERRORS = {
    414: "request line too long",
    431: "too many or too large headers",
    505: "unsupported HTTP version",
}  # a client that sends less than its Content-Length does not hold a thread forever


MAX_IN_FLIGHT = 256
POD_ROUTES = ("/v1/heartbeat", "/v1/events")
OVERLOADED_BODY = b'{"error":"overloaded: retry in a few seconds"}'
_OVERLOADED = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 5\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(OVERLOADED_BODY), OVERLOADED_BODY)
)


class Gate:
    """At most `limit` connections served at once (a thread each: a flood of slow or idle connections
    must not take the machine). Past it a connection is refused at once, and the refusal is counted in
    the IngestLog the in-process reaper reads: a heartbeat refused here is not the pod's silence (F18)."""

    def __init__(self, ingest: IngestLog, clock: Clock, limit: int) -> None:
        self.ingest = ingest
        self.clock = clock
        self._slots = threading.BoundedSemaphore(limit)

    def enter(self) -> bool:
        if self._slots.acquire(blocking=False):
            return True
        self.ingest.record("overloaded", self.clock.now())
        return False

    def leave(self) -> None:
        self._slots.release()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The listen backlog. The stdlib's 5 dropped 38 % of 100 simultaneous pings (a fleet started
    # together pings together): a dropped SYN is retried only after 1 s, 3 s, 7 s..., and a ping that
    # misses its window reads as silence. The kernel caps this at net.core.somaxconn.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], deps: Deps) -> None:
        super().__init__(address, _Handler)
        self.deps = deps
        if not isinstance(deps.ingest_health, IngestLog):
            deps.ingest_health = IngestLog()  # the reaper in this process reads what this server counts
        self.ingest: IngestLog = deps.ingest_health
        self.gate = Gate(self.ingest, deps.clock, MAX_IN_FLIGHT)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.gate.enter():
            try:
                request.settimeout(1.0)
                request.sendall(_OVERLOADED)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.gate.leave()  # no thread started: nobody else gives the slot back
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.gate.leave()

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            # The client reset or dropped the connection: its own doing, and anyone can do it, so it is
            # no sign of the ingest's health (a stray RST must not hold every silence kill).
            log.info("a client dropped its connection: %s", type(error).__name__)
            return
        self.ingest.record("handler crashed", self.deps.clock.now())
        log.error("a request handler crashed: %s", type(error).__name__)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S
    server_version = "gpuc-watchdog"
    sys_version = ""

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as two writes: without NODELAY, Nagle plus the client's delayed ACK
        # cost 40 ms a request on a kept-alive connection.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __getattr__(self, name: str) -> Any:
        # Any method name reaches dispatch, which answers 405/404: the stdlib would answer 501, a 5xx.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def _handle(self) -> None:
        started = time.perf_counter()
        path = self.path.split("?", 1)[0]
        response = self._read_and_dispatch(path)
        elapsed_ms = (time.perf_counter() - started) * 1000
        if response.status >= 500:
            # A bug or a broken store (bad input is always a 4xx): a pod's heartbeat may have met it too.
            self.server.ingest.record("server error", self.server.deps.clock.now())
        if response.status >= 400:
            reason = response.body.get("error", "")  # the server's own stable text: never echoes the request
            who = self.client_address[0]
            shown = path_for_log(path)
            log.info("refused %s %s from %s: %d %s", self.command, shown, who, response.status, reason)
        else:
            log.debug("%s %s %d %.1fms", self.command, path_for_log(path), response.status, elapsed_ms)
        self._send(response)

    def _read_and_dispatch(self, path: str) -> Response:
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return Response(411, {"error": "send a Content-Length: chunked bodies are not accepted"})
        raw_length = self.headers.get("Content-Length", "0").strip() or "0"
        # ASCII digits only: str.isdigit() is True for "²", which int() then refuses (a 500)
        if not (raw_length.isascii() and raw_length.isdigit()):
            self.close_connection = True
            return Response(400, {"error": "malformed Content-Length header"})
        length = int(raw_length)
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body must not be parsed as the next request
            return Response(413, {"error": f"body larger than {MAX_BODY_BYTES} bytes"})
        try:
            body = self.rfile.read(length) if length else b""
        except OSError:
            self.close_connection = True
            return Response(400, {"error": "body shorter than its Content-Length"})
        if len(body) != length:
            self.close_connection = True
            return Response(400, {"error": "body shorter than its Content-Length"})
        deps = self.server.deps
        request = Request(self.command, path, dict(self.headers.items()), body)
        started = time.perf_counter()
        response = dispatch(request, deps, deps.clock.now())
        if path in POD_ROUTES and time.perf_counter() - started > deps.settings.watchdog_timeout_s:
            # The pod gave up waiting: its heartbeat failed. Timed from the body read on, so a client
            # that sends slowly (its own doing) never counts, and only on the pods' routes (a `gpuc reap`
            # pass may take longer, and no pod waits for it).
            self.server.ingest.record("slower than the pods wait", deps.clock.now())
        return response

    def _send(self, response: Response) -> None:
        # One write per answer (status, headers and body together): a heartbeat's latency is the
        # ingest's throughput, and a split answer costs the client a second wakeup.
        payload = response_bytes(response)
        phrase = self.responses.get(response.status, ("",))[0]
        head = [
            f"HTTP/1.1 {response.status} {phrase}",
            f"Server: {self.server_version}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {response.content_type}",
            f"Content-Length: {len(payload)}",
            "Cache-Control: no-store",
            *(f"{name}: {value}" for name, value in response.page_headers.items()),
        ]
        if self.close_connection:
            head.append("Connection: close")
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        self.wfile.write(data if self.command == "HEAD" else data + payload)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own refusals (a garbled request line, huge headers): JSON like every other answer,
        # always with a status line (it omits it for what it takes as HTTP/0.9), and never a 5xx.
        self.close_connection = True
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        status = code if 400 <= code < 500 else 400
        self._send(Response(status, {"error": _STDLIB_ERRORS.get(code, "malformed HTTP request")}))
        log.info("%s %d (refused by the HTTP layer)", self.command or "-", status)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _handle logs one line of its own

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib's own lines (malformed request lines, timeouts) carry no bodies; keep them terse.
        if format.startswith("Request timed out"):
            # The stdlib's "Request timed out" names neither the client nor what it cost: say both.
            log.info(
                "http: closed a connection from %s silent for %.0f s (a kept-alive client, or one that stopped "
                "mid-request): nothing was stored or answered",
                self.client_address[0],
                self.timeout,
            )
            return
        log.info("http: %s", scrub_links(format % args)[:200])  # they quote the request line: a link in it


@dataclass
class ServerHandle:
    url: str
    deps: Deps
    _server: _Server
    _stop: threading.Event
    _threads: list[threading.Thread] = field(default_factory=list)
    _owns_deps: bool = False

    def stop(self) -> None:
        self._stop.set()
        if self.deps.wake is not None:
            self.deps.wake()  # the reaper loop waits on the same event: it sees the stop at once
        self._server.shutdown()
        self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=30)
        if self._owns_deps:
            self.deps.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_in_thread(
    settings: Settings,
    host: str = DEFAULT_HOST,
    port: int = 0,
    reaper_interval_s: float | None = None,
    deps: Deps | None = None,
    notifier: Sender | None = None,
    links_here: bool = False,
) -> ServerHandle:
    """Serve in background threads (tests, the demo). port 0 = any free port; the reaper runs only
    when reaper_interval_s > 0. `links_here`: this server's own address becomes its watchdog URL before it
    serves, so the phone's buttons and a re-rented pod's boot reach it (a port picked at start: the demo and
    the rehearsal; the default URL would name a port where nothing of theirs listens)."""
    owns_deps = deps is None
    deps = deps or build_deps(settings, notifier=notifier)
    server = _Server((host, port), deps)
    bound_host, bound_port = server.server_address[:2]
    url = f"http://{_url_host(str(bound_host))}:{bound_port}"
    if links_here:
        deps.settings = deps.settings.with_overrides(watchdog_url=url)
    stop = threading.Event()
    threads = [
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, name="gpuc-watchdog", daemon=True)
    ]
    if reaper_interval_s is not None and reaper_interval_s > 0:
        wake = threading.Event()
        deps.wake = wake.set  # a webhook's hint or a recovery stop: a pass now, in this thread, not in the answer
        threads.append(
            threading.Thread(
                target=run_loop, args=(deps, reaper_interval_s, stop, wake), name="gpuc-reaper", daemon=True
            )
        )
    for thread in threads:
        thread.start()
    return ServerHandle(url, deps, server, stop, threads, owns_deps)


def serve(
    settings: Settings,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    reaper_interval_s: float | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted (`gpuc watchdog serve`); `on_ready` gets the URL once it listens."""
    interval = settings.reaper_period_s if reaper_interval_s is None else reaper_interval_s
    # A channel set in .env after the start reaches the phone: the notifier re-reads it when the file changes.
    handle = start_in_thread(settings, host, port, interval, notifier=ReloadingNotifier(settings))
    log.debug("gpuc watchdog on %s, reaper every %.0f s", handle.url, interval)
    exposed = plain_http_warning(host, int(handle.url.rsplit(":", 1)[1]))
    if exposed is not None:
        log.warning("%s", exposed)  # in the log too: a banner scrolls away, the log is what is read later
    if on_ready is not None:
        on_ready(handle.url)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        handle.stop()


def plain_http_warning(host: str, port: int = DEFAULT_PORT) -> str | None:
    """What to say when the server listens beyond this machine (0.0.0.0, a LAN or public address, a name):
    its plain HTTP carries the admin token in every `gpuc` call's header, the pods' signed heartbeats and
    the phone's links, readable by anyone on the way. None on loopback."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(name).is_loopback:
            return None
    except ValueError:
        pass  # a host name: it may resolve to any interface
    return (
        f"WARNING: listening on {host} in plain HTTP: the admin token (sent with every gpuc command), the "
        "pods' heartbeats and the phone's links cross the network unencrypted, readable by anyone on the "
        f"way. Put TLS in front: serve on 127.0.0.1 (the default) behind a TLS reverse proxy on a public name "
        f"(e.g. `caddy reverse-proxy --from watchdog.example.com --to 127.0.0.1:{port}`) and set "
        "GPUC_WATCHDOG_URL=https://watchdog.example.com; or use `gpuc watchdog deploy` (AWS, HTTPS)"
    )


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
