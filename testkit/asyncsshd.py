"""OpenSSH's sshd in miniature, on asyncssh: the loopback ssh server where no OpenSSH server is installed.

What gpuc's ssh client relies on and nothing more: key auth for one user and one key; exec requests run
by `/bin/sh -c` as this process's user, in a session of its own (setsid, as sshd does) and with a login
environment (never this process's: a pod does not see the laptop's variables); stdin, stdout and stderr
forwarded; the real exit status returned. As with sshd, a session ends once the shell has exited AND its
output is closed: a process that holds the session's stdout holds the session, the very hazard
`SshAccess.start` avoids by redirecting every stream, so this server shows it too. No interactive
shells, no forwarding, no sftp.

It runs on an event loop of its own in a daemon thread: the tests and the demo are synchronous code.
asyncssh is a test dependency (pyproject's [test]); testkit.sshd imports this module only when needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import signal
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

# Debian sshd's default PATH for a login (root also gets the sbin folders).
USER_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/games"
ROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CHUNK = 1 << 16
TIMEOUT_S = 30.0
T = TypeVar("T")


def write_keypair(path: Path) -> None:
    """An ed25519 key at `path` (OpenSSH format, mode 600: ssh and sshd refuse a readable key) and `path`.pub."""
    if path.exists():
        return
    key = asyncssh.generate_private_key("ssh-ed25519", comment="gpuc-loopback")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.export_private_key("openssh"))
    Path(f"{path}.pub").write_bytes(key.export_public_key("openssh"))


class AsyncSshd:
    """`start()` listens on a free loopback port and returns it; `stop()` ends every session and the thread."""

    def __init__(self, *, host_key: Path, client_key: Path, user: str, log: Path) -> None:
        self.host_key, self.user, self.log = host_key, user, log
        self.client_key = asyncssh.read_public_key(client_key)
        account = pwd.getpwuid(os.getuid())
        self.home = account.pw_dir
        self.env = {
            "USER": user,
            "LOGNAME": user,
            "HOME": account.pw_dir,
            "SHELL": account.pw_shell or "/bin/sh",
            "PATH": ROOT_PATH if os.getuid() == 0 else USER_PATH,
        }
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gpuc-loopback-sshd", daemon=True)
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._shells: set[asyncio.subprocess.Process] = set()

    def start(self) -> int:
        self._thread.start()
        try:
            self.port = self._call(self._listen())
        except BaseException:
            self.stop()
            raise
        return self.port

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        try:
            self._call(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(TIMEOUT_S)
            if not self._thread.is_alive():
                self._loop.close()

    def note(self, line: str) -> None:
        # Only the loop thread writes. Never a command line or any data: a log must not hold secrets.
        with self.log.open("a") as fh:
            fh.write(line + "\n")

    # -- on the loop thread ------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(TIMEOUT_S)

    async def _listen(self) -> int:
        self._acceptor = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[str(self.host_key)],
            server_factory=lambda: _Server(self),
            process_factory=self._session,
            encoding=None,
            agent_forwarding=False,
            x11_forwarding=False,
        )
        port = self._acceptor.get_port()
        self.note(f"listening on 127.0.0.1:{port} for {self.user}, key auth only")
        return port

    async def _close(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        for conn in list(self._connections):
            conn.close()
            await conn.wait_closed()
        # A shell still running leads its own process group: end it with whatever it runs in the
        # foreground. What it detached (setsid) is in a session of its own and is left alone, as on a pod.
        for shell in list(self._shells):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGKILL)
            await shell.wait()
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        if pending:
            await asyncio.wait(pending, timeout=TIMEOUT_S)
        await self._loop.shutdown_default_executor()  # asyncssh resolves names in a worker thread

    async def _session(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command
        if command is None:
            process.stderr.write(b"this loopback sshd runs commands only: ssh HOST -- COMMAND\n")
            process.exit(1)
            return
        shell = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.home,
            env=self.env,
            start_new_session=True,
        )
        assert shell.stdin is not None and shell.stdout is not None and shell.stderr is not None
        self._shells.add(shell)
        feed = asyncio.create_task(_copy_in(process.stdin, shell.stdin))
        try:
            await asyncio.gather(_copy_out(shell.stdout, process.stdout), _copy_out(shell.stderr, process.stderr))
            code = await shell.wait()
        finally:
            self._shells.discard(shell)
            feed.cancel()
            await asyncio.wait([feed])
        self.note(f"session of {self.user} ended: {'exit ' + str(code) if code >= 0 else 'signal ' + str(-code)}")
        with contextlib.suppress(OSError, asyncssh.Error):  # the client may be gone already
            if code >= 0:
                process.exit(code)
            else:
                process.exit_with_signal(signal.Signals(-code).name.removeprefix("SIG"))


class _Server(asyncssh.SSHServer):
    """One connection: it gets in with the throwaway key as the one user, or not at all."""

    def __init__(self, sshd: AsyncSshd) -> None:
        self.sshd = sshd
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.sshd._connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.sshd._connections.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True  # authentication is always required

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        if username == self.sshd.user and key.public_data == self.sshd.client_key.public_data:
            return True
        self.sshd.note(f"refused publickey for {username!r}")
        return False

    def auth_completed(self) -> None:
        self.sshd.note(f"accepted publickey for {self.sshd.user}")


async def _copy_in(source: asyncssh.SSHReader[bytes], sink: asyncio.StreamWriter) -> None:
    try:
        with contextlib.suppress(OSError, asyncssh.Error):  # the shell stopped reading its stdin
            while chunk := await source.read(CHUNK):
                sink.write(chunk)
                await sink.drain()
    finally:
        sink.close()  # the client's EOF is the shell's


async def _copy_out(source: asyncio.StreamReader, sink: asyncssh.SSHWriter[bytes]) -> None:
    client_gone = False
    while chunk := await source.read(CHUNK):
        if client_gone:
            continue  # keep draining: a shell blocked on a full pipe would never exit
        try:
            sink.write(chunk)
            await sink.drain()
        except (OSError, asyncssh.Error):
            client_gone = True
