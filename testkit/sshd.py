"""A real OpenSSH server on loopback, for `gpuc demo --provider runpod|vast` and the ssh tests.

A throwaway host key and user key, a config of its own (key auth only, listening on 127.0.0.1), and a
sandbox directory that stands in for every pod's root (`Settings.ssh_sandbox_root`), so nothing
touches the real /workspace. An sshd not run by root takes logins for its own user only: `user`.
"""

from __future__ import annotations

import getpass
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpuc.core.errors import GpucError

SSHD = Path("/usr/sbin/sshd")
START_TIMEOUT_S = 10.0
PORT_ATTEMPTS = 5


class SshdUnavailable(GpucError):
    """No sshd to stand in for the pods' ssh servers."""


@dataclass(frozen=True)
class LoopbackSshd:
    port: int
    key: Path  # the user's private key: what GPUC_SSH_KEY_PATH points at
    log: Path
    sandbox: Path  # what GPUC_SSH_SANDBOX_ROOT points at
    proc: subprocess.Popen[bytes]
    user: str = getpass.getuser()
    host: str = "127.0.0.1"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def require_sshd(sshd: Path = SSHD) -> Path:
    if not sshd.exists():
        raise SshdUnavailable(
            f"{sshd} is missing: the emulated pods need a real sshd on loopback",
            hint="install it: apt-get install openssh-server",
        )
    return sshd


def start_loopback_sshd(directory: Path, sshd: Path = SSHD) -> LoopbackSshd:
    """Start sshd on a free loopback port with its files in `directory`; stop it with `.stop()`."""
    binary = require_sshd(sshd)
    directory.mkdir(parents=True, exist_ok=True)
    _keygen(directory / "host_key")
    _keygen(directory / "user_key")
    (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
    if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
        # Debian's sshd refuses to start as root without its privilege-separation directory; the
        # package's service unit creates it, a bare container does not.
        Path("/run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    log = directory / "sshd.log"
    sandbox = directory / "pods"
    sandbox.mkdir(exist_ok=True)
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
            return LoopbackSshd(port=port, key=directory / "user_key", log=log, sandbox=sandbox, proc=proc)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    tail = log.read_text(errors="replace")[-300:].strip() if log.exists() else "no log"
    raise SshdUnavailable(f"could not start sshd on loopback: {tail}", hint="check that sshd runs here: sshd -t")


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


def _keygen(path: Path) -> None:
    if path.exists():
        return
    try:
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
            check=True,
            capture_output=True,
        )
    except FileNotFoundError:
        raise SshdUnavailable("no ssh-keygen found", hint="install it: apt-get install openssh-client") from None


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
