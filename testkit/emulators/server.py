"""Serve an emulator over real HTTP on loopback, in a background thread (stdlib ThreadingHTTPServer).

    with EmulatorServer(RunPodEmulator()) as server:
        provider = RunPodProvider(key, graphql_url=f"{server.url}/graphql", rest_url=f"{server.url}/v2")

`serve("runpod" | "vast")` builds an emulator with its default catalogue and starts it: what
`gpuc demo --provider runpod|vast` runs against. `server.client_env()` is the environment a gpuc
client needs to reach it (URLs and the emulator's API key).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from gpuc.core.clock import Clock
from gpuc.testkit.emulators.common import Emulator, EmuRequest

MAX_BODY = 1 << 20


class EmulatorServer:
    def __init__(self, emulator: Emulator, host: str = "127.0.0.1", port: int = 0, hang_s: float = 30.0) -> None:
        self.emulator = emulator
        self.host = host
        self.port = port
        # An injected timeout holds the connection this long (or until stop): past any client timeout.
        self.hang_s = hang_s
        self._released = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the emulator server is not started")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def client_env(self) -> dict[str, str]:
        return self.emulator.client_env(self.url)

    def start(self) -> EmulatorServer:
        if self._httpd is not None:
            return self
        self._released.clear()
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self._httpd = ThreadingHTTPServer((self.host, self.port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="gpuc-emulator",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()  # let hung requests go
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def wait_released(self) -> None:
        self._released.wait(self.hang_s)

    def __enter__(self) -> EmulatorServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    server_ref: EmulatorServer
    server_version = "gpuc-emulator"
    # Keep-alive, as the real APIs: a client's second request to a host reuses the connection.
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: Any) -> None:
        # The default writes request lines to stderr, query strings included (?api_key=...): never.
        return

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.send_error(413)
            return
        url = urlsplit(self.path)
        request = EmuRequest(
            method=self.command,
            path=url.path,
            query=parse_qs(url.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length) if length else b"",
        )
        answer = self.server_ref.emulator.handle(request)
        if answer.hang:
            self.server_ref.wait_released()
        if answer.reset:  # SO_LINGER 0: the close sends a TCP RST, the client reads "connection reset"
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            os.close(self.connection.detach())  # now: the server's own shutdown would send a FIN first
            self.close_connection = True
            return
        if answer.hang or answer.drop:
            self.close_connection = True
            return
        self.send_response(answer.status)
        if self.server_ref._httpd is None:  # stopped while answering: this connection ends with the answer
            self.send_header("Connection", "close")
            self.close_connection = True
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        self.wfile.write(answer.body[: len(answer.body) // 2] if answer.cut else answer.body)
        if answer.cut:
            self.close_connection = True


def make_emulator(provider: str, *, clock: Clock | None = None, api_key: str | None = None, **options: Any) -> Emulator:
    if provider == "runpod":
        from gpuc.testkit.emulators.runpod import RunPodEmulator

        return RunPodEmulator(clock=clock, api_key=api_key, **options)
    if provider == "vast":
        from gpuc.testkit.emulators.vast import VastEmulator

        return VastEmulator(clock=clock, api_key=api_key, **options)
    raise ValueError(f"no emulator for provider {provider!r}: use runpod or vast")


def serve(
    provider: str,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    clock: Clock | None = None,
    api_key: str | None = None,
    **options: Any,
) -> EmulatorServer:
    """Start an emulator of `provider` on host:port (0 = a free port); stop it with `.stop()`."""
    return EmulatorServer(make_emulator(provider, clock=clock, api_key=api_key, **options), host, port).start()
