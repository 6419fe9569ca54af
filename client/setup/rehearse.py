"""`gpuc demo --provider runpod|vast --serve`: a rental to rehearse offline. The provider's emulator, the
loopback sshd with its sandboxed "pods" and a local watchdog stay up until Ctrl-C; a shell pointed at
them with one `.` line runs every gpuc command as against the real provider, with the real code paths.

The shell file holds the emulator's own test key and the rehearsal's settings, nothing of the user's (their
GPUC_* settings and provider keys are replaced in that shell); the watchdog's admin token goes to the
rehearsal home's config.json, never to the terminal. On the way out every pod left is destroyed.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType

from gpuc.client.setup.demo import REMOTE, cleanup_pods
from gpuc.core.errors import ConfigError
from gpuc.core.providers.registry import get_provider
from gpuc.core.settings import load_settings, save_config
from gpuc.core.signing import new_token
from gpuc.functions.server import start_in_thread

Echo = Callable[[str], None]
SHELL_FILE = "rehearse.sh"


def serve_rehearsal(echo: Echo, provider: str, home: Path | None, stop: threading.Event | None = None) -> int:
    """Serve until `stop` is set, Ctrl-C or SIGTERM; 0 when nothing was left behind."""
    from gpuc.testkit.platform import PROVIDERS, client_environ, start_platform, write_env_file
    from gpuc.testkit.sshd import require_ssh, start_loopback_sshd

    if provider not in PROVIDERS:
        raise ConfigError(f"no emulator for provider {provider!r}", hint="use --provider runpod or vast with --serve")
    require_ssh()
    home = home or Path(tempfile.mkdtemp(prefix="gpuc-rehearse-"))
    stop = stop or threading.Event()
    with contextlib.ExitStack() as stack:
        sshd = start_loopback_sshd(home / "sshd")
        stack.callback(sshd.stop)
        emulator, platform = start_platform(provider, sshd)
        stack.callback(emulator.stop)
        stack.callback(platform.close)
        write_env_file(home)  # empty: the project's own .env (maybe real keys) is not read in that shell
        environ = {**client_environ(emulator, sshd, home, base={}), **_as_env(REMOTE)}
        token = new_token()
        settings = load_settings(environ, admin_token=token)
        server = start_in_thread(settings, port=0, reaper_interval_s=settings.reaper_period_s)
        stack.callback(server.stop)
        save_config(home, functions_url=server.url, admin_token=token)
        shell = write_shell_file(home, {**environ, "GPUC_FUNCTIONS_URL": server.url})
        pods = get_provider(provider, settings.with_overrides(functions_url=server.url))
        stack.callback(pods.close)
        echo(f"gpuc rehearsal: {provider} emulator at {emulator.url}, sshd at {sshd.host}:{sshd.port}, "
             f"local watchdog at {server.url}, home {home}")
        echo(_instructions(shell))
        with _until_stopped(stop):
            while not stop.wait(0.5):
                pass
        echo("stopping: destroying what is left")
        cleanup_pods(pods)
        platform.close()
        left = platform.leftovers()
    if left:
        echo(f"stopped, but processes were left in the pods' sandboxes: {left}")
        return 1
    echo("stopped: no pod and no process left behind")
    return 0


def _as_env(values: Mapping[str, object]) -> dict[str, str]:
    return {f"GPUC_{name.upper()}": str(value) for name, value in values.items()}


def write_shell_file(home: Path, environ: Mapping[str, str]) -> Path:
    """`export` lines, quoted for sh; mode 600 (it holds the emulator's key, and no one else's)."""
    path = home / SHELL_FILE
    lines = [f"export {name}={shlex.quote(value)}" for name, value in sorted(environ.items())]
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("# gpuc rehearsal: `. this file` points a shell at the emulator\n" + "\n".join(lines) + "\n")
    return path


def _instructions(shell: Path) -> str:
    return "\n".join(
        [
            "Point a shell at it (the file holds the emulator's test key and settings, nothing of yours):",
            f"  . {shlex.quote(str(shell))}",
            "then rent as you would for real, e.g.:",
            "  gpuc up first-try --wait -- python -c \"print('hello from the pod')\"",
            "  gpuc ls; gpuc ledger",
            "Intervals are scaled from minutes to seconds (an idle pod is destroyed after 3 min).",
            "Ctrl-C here stops everything and destroys what is left.",
        ]
    )


@contextlib.contextmanager
def _until_stopped(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM set `stop`: the clean-up runs either way (a kill -TERM from a script too)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
