"""Getting onto a rented pod: the system `ssh` client, key auth only.

Why the system client and not a library: it is on every laptop, it honours the user's agent and
keys, and it adds no dependency. Every call is one `ssh ... -- '<shell command>'` subprocess:

- Secrets never travel in argv or in the ssh process's environment: `put_file` streams the bytes on
  stdin into `umask 077; cat > tmp; chmod; mv`, and the ssh child gets only PATH/HOME/USER and the
  agent socket (a user's `SendEnv` cannot leak what is not there).
- Host keys are trusted on first use and pinned per pod (`HostKeyAlias=gpuc-<pod id>` in
  `<gpuc home>/known_hosts`): RunPod and Vast hand the same ip:port to a new pod on the same host,
  and a pin per address would turn that into a refused connection and a destroyed pod.
- `spawn` starts a process in its own session (setsid, nohup, every stream redirected), so it
  outlives the ssh session that started it. The image's own start command (which runs sshd on
  RunPod) is never touched.

`ssh_sandbox_root` (tests and demos only) puts the pod's root at `<root>/<pod id>` on the ssh host,
so a loopback sshd never writes into the real /workspace; there `<root>/container.env` stands in for
the environment a real platform injects into the container (RUNPOD_POD_ID, the pod-scoped key).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gpuc.core.clock import Clock
from gpuc.core.errors import GpucError
from gpuc.core.pod import Pod
from gpuc.core.podpaths import POD_ROOT_ENV, PodPaths
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.redact import redact
from gpuc.core.settings import Settings

CONNECT_TIMEOUT_S = 10
SSH_USER = "root"
# What the ssh child may see of the laptop's environment: enough to find keys and the agent.
_PASS_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SSH_AUTH_SOCK")
_ROLE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_PYTHON = ("python", "python3")
POD_ROOT = PurePosixPath("/")
# ssh's own exit code when the session ended without the remote command's exit status: the connection
# failed, closed or timed out, or the command was killed by a signal. For most of these ssh prints nothing
# at LogLevel=ERROR ("Connection closed", "Timeout, server not responding" are INFO; a killed command's
# signal is debug), so the code is all the user would see: say what it means.
SSH_FAILED = 255
SILENT_FAILURE = (
    "ssh exited 255 and printed nothing: the session ended without the command's exit status (the "
    "connection closed or timed out, or the command was killed: was the pod destroyed or restarted?)"
)
# A read-only command (`SshAccess.read`) whose ssh failed before the command printed anything is tried
# again: a loaded laptop or a pod's sshd busy at boot drops a connection now and then. Never one that acts:
# its 255 may come after the pod already acted (a job started, a destroy sent), and twice is not once.
READ_ATTEMPTS = 3
READ_RETRY_PAUSE_S = 2.0


class SshError(GpucError):
    """The pod could not be reached or a transfer to it failed."""


@dataclass(frozen=True)
class SshResult:
    code: int
    stdout: bytes
    stderr: bytes

    def text(self) -> str:
        text = (self.stdout + self.stderr).decode(errors="replace")
        return SILENT_FAILURE if self.code == SSH_FAILED and not text.strip() else text


Runner = Callable[[list[str], bytes | None, float, Mapping[str, str]], SshResult]


def subprocess_runner(argv: list[str], stdin: bytes | None, timeout_s: float, env: Mapping[str, str]) -> SshResult:
    try:
        proc = subprocess.run(
            argv,
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=timeout_s,
            env=dict(env),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise SshError(
            f"ssh command did not finish within {timeout_s:.0f}s",
            hint="the pod may be overloaded or its network down; check it with gpuc ls",
        ) from None
    except FileNotFoundError:
        raise SshError("no ssh client found", hint="install OpenSSH: apt-get install openssh-client") from None
    return SshResult(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True)
class SshTarget:
    host: str
    port: int
    key_path: Path
    known_hosts: Path
    host_alias: str
    user: str = SSH_USER
    connect_timeout_s: int = CONNECT_TIMEOUT_S

    def describe(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


def ssh_command(target: SshTarget, remote: str) -> list[str]:
    """The ssh argv for one remote shell command. Nothing secret ever goes in here."""
    options = {
        "BatchMode": "yes",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "StrictHostKeyChecking": "accept-new",
        "UserKnownHostsFile": str(target.known_hosts),
        "HostKeyAlias": target.host_alias,
        "IdentitiesOnly": "yes",
        "ConnectTimeout": str(target.connect_timeout_s),
        # TCP connects only, before any command runs: safe for every command (sshd still booting).
        "ConnectionAttempts": "3",
        "ServerAliveInterval": "15",
        "ServerAliveCountMax": "4",
        "LogLevel": "ERROR",
    }
    argv = ["ssh", "-T", "-p", str(target.port), "-i", str(target.key_path)]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return [*argv, "-l", target.user, target.host, "--", remote]


def ssh_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in _PASS_ENV if k in env}


class SshAccess(PodAccess):
    def __init__(
        self,
        target: SshTarget,
        *,
        pod_root: PurePosixPath = POD_ROOT,
        sandbox: bool = False,
        runner: Runner = subprocess_runner,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.target = target
        self.sleep = sleep
        self.root = pod_root
        self.paths = PodPaths(Path(pod_root))
        self.sandbox = sandbox
        self.runner = runner
        self.env = ssh_environ(environ)

    # -- the PodAccess interface ---------------------------------------------------------------
    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        target = self.remote_path(path)
        tmp = target.with_name(f".{target.name}.gpuc-tmp")
        # umask first: the temporary file is never readable by others, not even for a moment.
        script = (
            f"umask 077 && mkdir -p {_q(target.parent)} && cat > {_q(tmp)} && chmod {mode:o} {_q(tmp)}"
            f" && mv -f {_q(tmp)} {_q(target)}"
        )
        result = self._ssh(script, stdin=data, timeout_s=120.0)
        if result.code != 0:
            raise SshError(
                f"upload of {path} to {self.target.describe()} failed (exit {result.code}): {_tail(result)}",
                hint="check the pod's disk and that ssh works: gpuc ls shows the ssh command",
            )

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        result = self._ssh("exec " + self._argv(argv), timeout_s=timeout_s)
        return result.code, result.text()

    def read(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        result = self._read(argv, timeout_s)
        return result.code, result.text()

    def spawn(self, argv: list[str], role: str) -> None:
        self.start(argv, role)

    # -- more than the interface ---------------------------------------------------------------
    def start(self, argv: list[str], role: str) -> int:
        """`spawn`, returning the detached process's pid (also written to `<state>/<role>.pid`)."""
        if not _ROLE.match(role):
            raise ValueError(f"bad role name {role!r}")
        state = self.paths.state
        out, pidfile = state / f"{role}.out", state / f"{role}.pid"
        # A background job of a non-interactive shell is not a group leader, so setsid() runs in
        # place (no fork): $! is the pid of the process itself, in a session of its own.
        # The `&` must apply to that command alone: a backgrounded `a && b` list is a subshell that
        # keeps the session's output open, and the ssh session would last as long as the process.
        script = (
            f"mkdir -p {_q(state)} && chmod 700 {_q(state)} || exit 1; "
            f"setsid nohup {self._argv(argv)} < /dev/null >> {_q(out)} 2>&1 & "
            f"pid=$!; echo $pid > {_q(pidfile)}; echo $pid"
        )
        result = self._ssh(script, timeout_s=60.0)
        last = result.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
        if result.code != 0 or not last[0].isdigit():
            raise SshError(
                f"could not start {role} on {self.target.describe()} (exit {result.code}): {_tail(result)}",
                hint="check that gpuc was installed on the pod (gpuc up installs it)",
            )
        return int(last[0])

    def probe(self, timeout_s: float = 30.0) -> SshResult:
        """One round trip that runs nothing on the pod: is ssh up and does it take our key?"""
        return self.runner(ssh_command(self.target, "true"), None, timeout_s, self.env)

    def remote_path(self, path: str) -> PurePosixPath:
        rel = PurePosixPath(path.lstrip("/"))
        if ".." in rel.parts:
            raise ValueError(f"path {path} escapes the pod root")
        return self.root / rel

    def ssh_argv(self, script: str) -> list[str]:
        return ssh_command(self.target, self._prelude() + script)

    # -- helpers -------------------------------------------------------------------------------
    def _read(self, argv: list[str], timeout_s: float) -> SshResult:
        """The retry rule of READ_ATTEMPTS: only for commands that act on nothing."""
        script = "exec " + self._argv(argv)
        result = self._ssh(script, timeout_s=timeout_s)
        for _ in range(READ_ATTEMPTS - 1):
            if not connection_failed(result):
                break
            self.sleep(READ_RETRY_PAUSE_S)
            result = self._ssh(script, timeout_s=timeout_s)
        return result

    def _ssh(self, script: str, *, stdin: bytes | None = None, timeout_s: float) -> SshResult:
        return self.runner(self.ssh_argv(script), stdin, timeout_s, self.env)

    def _prelude(self) -> str:
        parts = [f"export {POD_ROOT_ENV}={_q(self.root)};"]
        if self.sandbox:
            env_file = _q(self.root / "container.env")
            parts.append(f"if [ -f {env_file} ]; then set -a; . {env_file}; set +a; fi;")
        parts.append(f"cd {_q(self.root / 'workspace')} 2>/dev/null || cd /;")
        return " ".join(parts) + " "

    def _argv(self, argv: list[str]) -> str:
        # `python` means the interpreter the install set up for gpuc (its launcher), as on a local
        # sandbox it means the laptop's: the job's own `python` inside the wrapper stays the image's.
        if argv and argv[0] in _PYTHON:
            argv = [str(self.paths.python), *argv[1:]]
        return " ".join(shlex.quote(a) for a in argv)


def connection_failed(result: SshResult) -> bool:
    """ssh's own 255 before the command said a word: the session, not the command, failed."""
    return result.code == SSH_FAILED and not result.stdout.strip()


def _q(path: PurePosixPath | Path | str) -> str:
    return shlex.quote(str(path))


def _tail(result: SshResult, limit: int = 400) -> str:
    text = result.stderr.decode(errors="replace").strip() or result.stdout.decode(errors="replace").strip()
    return redact(text[-limit:]) or (SILENT_FAILURE if result.code == SSH_FAILED else "no output")


# -- building and waiting ----------------------------------------------------------------------------
def ssh_access(pod: Pod, settings: Settings, runner: Runner = subprocess_runner, user: str = SSH_USER) -> SshAccess:
    """Rented pods take root logins (RunPod and Vast images); `user` is for a loopback sshd in CI."""
    if not pod.ssh_host or not pod.ssh_port:
        raise SshError(
            f"pod {pod.id} has no public ssh address yet",
            hint="wait a minute and check gpuc ls; the image must expose port 22/tcp",
        )
    key = settings.ssh_key_path.expanduser()
    if not key.is_file():
        raise SshError(
            f"no ssh private key at {key}",
            hint="create one with ssh-keygen -t ed25519, add the .pub to your provider account, "
            "or point GPUC_SSH_KEY_PATH at yours",
        )
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    target = SshTarget(
        host=pod.ssh_host,
        port=pod.ssh_port,
        key_path=key,
        known_hosts=settings.home / "known_hosts",
        host_alias=f"gpuc-{pod.id}",
        user=user,
    )
    sandbox = settings.ssh_sandbox_root
    root = PurePosixPath(str(sandbox / pod.id)) if sandbox is not None else POD_ROOT
    return SshAccess(target, pod_root=root, sandbox=sandbox is not None, runner=runner)


class _Progress:
    """`\r` redraws one line on a terminal; a log or a pipe gets plain lines, one per state (not one per
    attempt, and no carriage returns to garble the file)."""

    def __init__(self) -> None:
        self.last = ""

    def __call__(self, line: str) -> None:
        if sys.stderr.isatty():
            print(line, end="", file=sys.stderr, flush=True)
            return
        text = line.strip("\r\n").rstrip()
        state = re.sub(r"\s*\(.*\)$", "", text)
        if text and state != self.last:
            self.last = state
            print(text, file=sys.stderr, flush=True)


_progress = _Progress()


def wait_for_ssh(
    access: SshAccess,
    *,
    clock: Clock,
    timeout_s: float = 300.0,
    interval_s: float = 3.0,
    progress: Callable[[str], None] = _progress,
) -> float:
    """Retry until ssh answers with our key, at most `timeout_s`. Returns the seconds waited.

    Right after RUNNING, sshd may not listen yet, or listen before the platform wrote our key into
    authorized_keys: both look like failures for a while, so every failure is retried until the
    deadline and the last one is what the error reports.
    """
    start = clock.now()
    attempt = 0
    while True:
        attempt += 1
        result = access.probe(timeout_s=min(30.0, max(5.0, timeout_s)))
        waited = clock.now() - start
        if result.code == 0:
            progress(f"\r  ssh {access.target.describe()}: up after {waited:.0f}s{' ' * 20}\n")
            return waited
        progress(f"\r  ssh {access.target.describe()}: waiting ({waited:.0f}s, attempt {attempt})")
        if waited + interval_s > timeout_s:
            progress("\n")
            raise SshError(
                f"ssh to {access.target.describe()} not ready after {waited:.0f}s: {_tail(result)}",
                hint="check that your public key is in the provider account and the image runs sshd",
            )
        clock.sleep(interval_s)


def wait_for_ssh_endpoint(
    provider: Provider,
    pod: Pod,
    *,
    clock: Clock,
    timeout_s: float = 180.0,
    tick: Callable[[str], None] | None = None,
) -> Pod:
    """RUNNING comes before the public port mapping on RunPod: poll until the pod has both. `tick`: called each
    poll with the pod's status (client/progress.py says a line now and then on a pipe)."""
    start = clock.now()
    current: Pod | None = pod
    while current is not None and not (current.ssh_host and current.ssh_port):
        if clock.now() - start > timeout_s:
            raise SshError(
                f"pod {pod.id} got no public ssh address within {timeout_s:.0f}s",
                hint="the image must expose 22/tcp; it was destroyed, try again or another offer",
            )
        clock.sleep(2.0)
        current = provider.get(pod.id)
        if tick is not None and current is not None:
            tick(current.status)
    if current is None:
        raise SshError(f"pod {pod.id} disappeared while waiting for its ssh address", hint="check gpuc ls")
    return current
