"""`gpuc demo --provider runpod|vast --serve`: a rental to rehearse offline. The provider's emulator, the
loopback sshd with its sandboxed "pods" and a local watchdog stay up until Ctrl-C; a shell pointed at
them with one `.` line runs every gpuc command as against the real provider, with the real code paths.

The shell file holds the emulator's own test key and the rehearsal's settings, nothing of the user's: it
first unsets every name gpuc reads (each setting's variable, derived from Settings, gpuc's other names, the
providers' keys, the cloud and git credentials: `cleared_names`) and every GPUC_*, RUNPOD_*, VAST_* and
AWS_* variable the shell holds, whatever its name; every endpoint it does not emulate points at a loopback
port where nothing listens, and boto3's credential files at empty ones in the rehearsal's home.
GPUC_REHEARSAL marks the shell: a real key or URL exported afterwards is refused by every command
(core/rehearsal.py). The watchdog's admin token goes to the rehearsal home's config.json, never to the
terminal. On the way out every pod left is destroyed.
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
from urllib.parse import urlsplit

from gpuc.client.setup.demo import REMOTE, cleanup_pods
from gpuc.core.envcheck import known_names
from gpuc.core.errors import ConfigError
from gpuc.core.providers.registry import get_provider
from gpuc.core.rehearsal import AWS_CREDENTIALS, AWS_FILES, NOWHERE, endpoint_fields, loopback_host
from gpuc.core.settings import AWS_SECRET_NAMES, SETTING_ENV_NAMES, SETTING_NAMES, Settings, env_name
from gpuc.core.settingsload import load_settings, save_config
from gpuc.core.signing import new_token
from gpuc.functions.server import start_in_thread

Echo = Callable[[str], None]
SHELL_FILE = "rehearse.sh"


def serve_rehearsal(echo: Echo, provider: str, home: Path | None, stop: threading.Event | None = None) -> int:
    """Serve until `stop` is set, Ctrl-C, SIGTERM or SIGHUP; 0 when nothing was left behind."""
    stop = stop or threading.Event()
    say = _unbreakable(echo)
    # From the first line: a script's SIGTERM during start-up, or a closed terminal, still ends in the
    # clean-up below (a scripted rehearsal was once found still running 8 minutes after both).
    with _until_stopped(stop):
        return _serve(say, provider, home, stop)


def _serve(say: Echo, provider: str, home: Path | None, stop: threading.Event) -> int:
    from gpuc.testkit.emulators.server import EmulatorServer
    from gpuc.testkit.platform import PROVIDERS, client_environ, start_platform, write_env_file
    from gpuc.testkit.sshd import require_ssh, start_loopback_sshd
    from gpuc.testkit.stand_ins import NtfyStandIn

    if provider not in PROVIDERS:
        raise ConfigError(f"no emulator for provider {provider!r}", hint="use --provider runpod or vast with --serve")
    require_ssh()
    home = home or Path(tempfile.mkdtemp(prefix="gpuc-rehearse-"))
    with contextlib.ExitStack() as stack:
        sshd = start_loopback_sshd(home / "sshd")
        stack.callback(sshd.stop)
        emulator, platform = start_platform(provider, sshd)
        stack.callback(emulator.stop)
        stack.callback(platform.close)
        # The phone: an ntfy stand-in whose page shows every push and taps its buttons.
        phone = EmulatorServer(NtfyStandIn()).start()
        stack.callback(phone.stop)
        write_env_file(home)  # empty: the project's own .env (maybe real keys) is not read in that shell
        environ = rehearsal_environ(home, {**client_environ(emulator, sshd, home, base={}), **_as_env(REMOTE)})
        environ["GPUC_NOTIFY_URLS"] = phone_channel(phone.url)
        token = new_token()
        settings = load_settings(environ, admin_token=token)
        server = start_in_thread(settings, port=0, reaper_interval_s=settings.reaper_period_s)
        stack.callback(server.stop)
        save_config(home, functions_url=server.url, admin_token=token)
        shell = write_shell_file(home, {**environ, "GPUC_WATCHDOG_URL": server.url})
        pods = get_provider(provider, settings.with_overrides(functions_url=server.url))
        stack.callback(pods.close)
        say(f"gpuc rehearsal: {provider} emulator at {emulator.url}, sshd at {sshd.host}:{sshd.port}, "
            f"local watchdog at {server.url}, home {home}")
        say(_instructions(shell, phone.url, provider))
        while not stop.wait(0.5):
            pass
        say("stopping: destroying what is left")
        cleanup_pods(pods)
        platform.close()
        left = platform.leftovers()
    if left:
        say(f"stopped, but processes were left in the pods' sandboxes: {left}")
        return 1
    say("stopped: no pod and no process left behind")
    return 0


def phone_channel(url: str) -> str:
    """The stand-in's address as a GPUC_NOTIFY_URLS channel (ntfy:// is plain HTTP to a loopback host)."""
    return "ntfy://" + url.removeprefix("http://").rstrip("/") + "/rehearsal"


def _unbreakable(echo: Echo) -> Echo:
    """The rehearsal's words, where a closed output (a script that read the banner and went) never stops
    the clean-up that follows them."""

    def say(line: str) -> None:
        with contextlib.suppress(OSError):
            echo(line)

    return say


def _as_env(values: Mapping[str, object]) -> dict[str, str]:
    return {f"GPUC_{name.upper()}": str(value) for name, value in values.items()}


# Credentials gpuc or what it runs (boto3, git, huggingface_hub) reads beyond its own settings.
OTHER_CREDENTIALS = frozenset(
    {*AWS_CREDENTIALS, *AWS_FILES, *AWS_SECRET_NAMES, "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL",
     "GH_TOKEN", "GITHUB_TOKEN", "GIT_ASKPASS", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}
)
# Whatever its name, a variable with one of these prefixes is cleared: a setting added tomorrow is too.
CLEARED_PREFIXES = ("GPUC_", "RUNPOD_", "VAST_", "AWS_")


def cleared_names() -> frozenset[str]:
    """Every name the shell file unsets before it exports the rehearsal's own."""
    return known_names(SETTING_ENV_NAMES) | OTHER_CREDENTIALS


def rehearsal_environ(home: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The rehearsal's own values, completed: marked as a rehearsal, every endpoint setting it does not
    emulate pointed nowhere (loopback), boto3's credential files empty ones of its own."""
    env = dict(environ)
    env["GPUC_REHEARSAL"] = str(home)
    for name in endpoint_fields(SETTING_NAMES):
        default = getattr(Settings, name, None)
        if env_name(name) not in env and isinstance(default, str) and not loopback_host(urlsplit(default).hostname):
            env[env_name(name)] = NOWHERE  # e.g. the other provider's API: `up -p vast` reaches nothing
    for name in AWS_FILES:
        empty = home / "aws" / name.lower()
        empty.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        empty.touch(mode=0o600)
        env[name] = str(empty)
    return env


def write_shell_file(home: Path, environ: Mapping[str, str]) -> Path:
    """`unset` then `export` lines, quoted for sh; mode 600 (it holds the emulator's key, and no one else's)."""
    path = home / SHELL_FILE
    pattern = "|".join(p.rstrip("_") for p in CLEARED_PREFIXES)
    lines = [
        "# gpuc rehearsal: `. this file` points a shell at the emulator, and at nothing real",
        "# every name gpuc reads, cleared (a key of yours in this shell would reach a real provider):",
        *(f"unset {' '.join(chunk)}" for chunk in _chunks(sorted(cleared_names()), 8)),
        f"for __gpuc_name in $(env | sed -n -E 's/^(({pattern})_[A-Za-z0-9_]*)=.*/\\1/p'); do",
        '  unset "$__gpuc_name"',
        "done",
        "unset __gpuc_name",
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(environ.items())),
    ]
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text("\n".join(lines) + "\n")
    return path


def _chunks(names: list[str], size: int) -> list[list[str]]:
    return [names[i : i + size] for i in range(0, len(names), size)]


# What a first RunPod rental trips on, to try in the rehearsal (the emulated account starts with no ssh key
# registered, as a new one does).
RUNPOD_TRAPS = [
    "A first RunPod rental's traps, each caught before money (this account, like a new one, has no ssh key):",
    "  gpuc doctor                                      # says the key is not registered, and how to",
    "  gpuc up small --volume-gb 3 -- python train.py   # refused before renting: RunPod's floor is 10 GB",
    "  gpuc up quad --gpus 4 --dry-run                  # RunPod's price and stock for 4 GPUs, not for 1",
]


def _instructions(shell: Path, phone: str, provider: str = "runpod") -> str:
    return "\n".join(
        [
            f"The phone: {phone} shows every notification and taps its buttons (`gpuc notify --test` sends one).",
            "Point a shell at it (the file holds the emulator's test key and settings, nothing of yours):",
            f"  . {shlex.quote(str(shell))}",
            "then rent as you would for real, e.g.:",
            "  gpuc up first-try --wait -- python -c \"print('hello from the pod')\"",
            "  gpuc ls; gpuc ledger",
            *(RUNPOD_TRAPS if provider == "runpod" else []),
            "Intervals are scaled from minutes to seconds (an idle pod is destroyed after 3 min).",
            "Ctrl-C here stops everything and destroys what is left.",
        ]
    )


@contextlib.contextmanager
def _until_stopped(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP set `stop`: the clean-up runs either way (a kill -TERM from a script, a
    closed terminal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
