"""Loopback HTTP pieces for the HTTP client's tests, stdlib only: a forward / CONNECT proxy that records
what it was asked, a server that answers one fixed reply (over TLS too), and a self-signed certificate."""

from __future__ import annotations

import http.client
import http.server
import select
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

Answer = tuple[int, dict[str, str], bytes]


class _Served:
    """A ThreadingHTTPServer in a daemon thread; `stop()` ends it."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        if tls is not None:  # the handshake runs in accept(): a client that refuses it is dropped there
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Stub(_Served):
    """Answers every request with `answer(path)` (`cut`: only the first half of its body, then the connection
    closes); records (request line, Authorization)."""

    def __init__(
        self, answer: Callable[[str], Answer], tls: ssl.SSLContext | None = None, *, cut: bool = False
    ) -> None:
        self.seen: list[tuple[str, str | None]] = []
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                stub.seen.append((self.requestline, self.headers.get("Authorization")))
                code, headers, body = answer(self.path)
                self.send_response(code)
                for name, value in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if cut else body)
                self.close_connection = cut

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler, tls)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"


class Proxy(_Served):
    """An http:// proxy: CONNECT tunnels bytes (or answers `refuse` when set), any other method is forwarded
    to the absolute URL it names. `seen` holds (request line, Proxy-Authorization, Authorization)."""

    def __init__(self, refuse: int | None = None) -> None:
        self.seen: list[tuple[str, str | None, str | None]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _record(self) -> None:
                got = self.headers.get
                proxy.seen.append((self.requestline, got("Proxy-Authorization"), got("Authorization")))

            def do_CONNECT(self) -> None:
                self._record()
                if refuse is not None:
                    self.send_response(refuse)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                host, _, port = self.path.rpartition(":")
                upstream = socket.create_connection((host, int(port)), timeout=5)
                self.send_response(200, "Connection established")
                self.end_headers()
                _pump(self.connection, upstream)
                self.close_connection = True

            def _forward(self) -> None:
                self._record()
                target = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(target.hostname or "", target.port, timeout=5)
                skip = ("proxy-authorization", "connection", "host")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                conn.request(self.command, target.path + (f"?{target.query}" if target.query else ""), body, headers)
                reply = conn.getresponse()
                content = reply.read()
                conn.close()
                self.send_response(reply.status, reply.reason)
                for name, value in reply.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)
        self.url = f"http://127.0.0.1:{self.port}"


def _pump(one: socket.socket, other: socket.socket) -> None:
    with other:
        while True:
            ready, _, _ = select.select([one, other], [], [], 5)
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                (other if sock is one else one).sendall(data)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) for IP 127.0.0.1, valid a day, made with `cryptography` (moto's own dependency,
    so every test environment has it: no skip where an openssl command is missing)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    made = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert, key_file = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(made.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert, key_file


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context
