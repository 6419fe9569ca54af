"""The local watchdog's listen backlog holds a burst of simultaneous pings while no thread accepts.

Deterministic: the server is bound and listening but not serving, so every connection beyond the backlog
has its SYN dropped by the kernel and cannot complete however long we wait; within the backlog, the
handshake completes at once on loopback. With the stdlib's default backlog of 5, only about 6 of 100 do.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from pathlib import Path

from fakes.watchdog import World

from gpuc.functions.server import _Server

BURST = 100
DEADLINE_S = 10.0  # generous: on loopback the whole burst completes in milliseconds


def somaxconn() -> int:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return 4096  # not Linux: the platform's own cap applies


def handshakes_completed(address: tuple[str, int], count: int, deadline_s: float) -> int:
    """Start `count` non-blocking connects at once; how many finish their TCP handshake by the deadline."""
    selector = selectors.DefaultSelector()
    sockets: list[socket.socket] = []
    done = 0
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            sockets.append(sock)
            code = sock.connect_ex(address)
            if code == 0:
                done += 1
            elif code in (errno.EINPROGRESS, errno.EAGAIN):
                selector.register(sock, selectors.EVENT_WRITE)
            else:
                raise OSError(code, f"connect refused at once: {errno.errorcode.get(code, code)}")
        end = time.monotonic() + deadline_s
        while selector.get_map() and time.monotonic() < end:
            for key, _ in selector.select(timeout=max(0.0, end - time.monotonic())):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                selector.unregister(ready)
                if ready.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    done += 1
        return done
    finally:
        selector.close()
        for sock in sockets:
            sock.close()


def test_a_burst_of_100_connections_completes_while_no_thread_accepts(world: World) -> None:
    # The kernel caps any backlog at somaxconn: ask for what it allows, which must still be far above the
    # stdlib's 5 for the test to tell the two apart (and for a burst of pings to get in at all).
    burst = min(BURST, somaxconn())
    assert burst >= 32, f"net.core.somaxconn is {somaxconn()}: raise it (sysctl net.core.somaxconn=1024)"
    server = _Server(("127.0.0.1", 0), world.deps)  # bound and listening; serve_forever never runs
    try:
        host, port = server.server_address[:2]
        assert handshakes_completed((str(host), port), burst, DEADLINE_S) == burst
    finally:
        server.server_close()
