"""An ssh server on loopback standing in for every pod's, for `gpuc demo --provider runpod|vast` and the ssh tests.

OpenSSH's sshd where it is installed (what the pods run), else an asyncssh server in a thread of this
process (testkit.asyncsshd), so a machine with Python and the `ssh` client alone runs the tests. Either
way: a throwaway host key and user key, key auth only, 127.0.0.1 only, and a sandbox directory that
stands in for every pod's root (`Settings.ssh_sandbox_root`), so nothing touches the real /workspace.
Logins are for this process's own user only: `user`.
"""

from __future__ import annotations

import functools
import getpass
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuc.core.errors import GpucError

SSHD = Path("/usr/sbin/sshd")
START_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 5


class SshdUnavailable(GpucError):
    """No ssh server to stand in for the pods' ssh servers, or no ssh client to reach it."""


@dataclass(frozen=True)
class LoopbackSshd:
    port: int
    key: Path  # the user's private key: what GPUC_SSH_KEY_PATH points at
    log: Path
    sandbox: Path  # what GPUC_SSH_SANDBOX_ROOT points at
    kind: str  # "openssh" or "asyncssh": which server answers
    stopper: Callable[[], None] = field(repr=False, compare=False)
    user: str = getpass.getuser()
    host: str = "127.0.0.1"

    def stop(self) -> None:
        self.stopper()


def require_ssh(sshd: Path = SSHD) -> str:
    """Which server a loopback sshd will be here: "openssh" where `sshd` is installed, else "asyncssh".
    Raises SshdUnavailable, saying what to install, when the ssh client or asyncssh is missing."""
    if shutil.which("ssh") is None:
        raise SshdUnavailable(
            "no ssh client found: gpuc reaches every pod, emulated ones too, with OpenSSH's `ssh`",
            hint="install it: apt-get install openssh-client",
        )
    if importlib.util.find_spec("asyncssh") is None:
        # It makes the throwaway keys whichever server runs, and is the server where OpenSSH's is not.
        raise SshdUnavailable(
            "asyncssh is missing: the loopback ssh server needs it",
            hint="install the rehearsal's extra: pip install 'gpuc[rehearse]' (in a clone: .venv/bin/pip "
            "install -e '.[rehearse]'; make test installs it too)",
        )
    return "openssh" if sshd.exists() else "asyncssh"


def start_loopback_sshd(directory: Path, sshd: Path = SSHD) -> LoopbackSshd:
    """Start a server on a free loopback port with its files in `directory`; stop it with `.stop()`."""
    kind = require_ssh(sshd)
    from gpuc.testkit.asyncsshd import AsyncSshd, write_keypair

    directory.mkdir(parents=True, exist_ok=True)
    write_keypair(directory / "host_key")
    write_keypair(directory / "user_key")
    (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
    sandbox = directory / "pods"
    sandbox.mkdir(exist_ok=True)
    log = directory / "sshd.log"
    user = getpass.getuser()
    if kind == "openssh":
        port, stopper = _start_openssh(directory, sshd, log)
    else:
        server = AsyncSshd(host_key=directory / "host_key", client_key=directory / "user_key.pub", user=user, log=log)
        port, stopper = server.start(), server.stop
    key = directory / "user_key"
    return LoopbackSshd(port=port, key=key, log=log, sandbox=sandbox, kind=kind, stopper=stopper, user=user)


def _start_openssh(directory: Path, binary: Path, log: Path) -> tuple[int, Callable[[], None]]:
    if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
        # Debian's sshd refuses to start as root without its privilege-separation directory; the
        # package's service unit creates it, a bare container does not.
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    # A free port can be taken between choosing it and sshd binding it: try a few.
    for _attempt in range(PORT_ATTEMPTS):
        port = _free_port()
        config = directory / "sshd_config"
        config.write_text(_config(directory, port))
        proc = subprocess.Popen(
            [str(binary), "-D", "-e", "-f", str(config), "-E", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if _wait_listening(port, proc):
            return port, functools.partial(_terminate, proc)
        _terminate(proc)
    tail = log.read_text(errors="replace")[-300:].strip() if log.exists() else "no log"
    raise SshdUnavailable(f"could not start sshd on loopback: {tail}", hint=f"check that sshd runs here: {binary} -t")


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _config(directory: Path, port: int) -> str:
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {directory / 'host_key'}",
            f"PidFile {directory / 'sshd.pid'}",
            f"AuthorizedKeysFile {directory / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            "LogLevel VERBOSE",
            "",
        ]
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.05)
    return False
