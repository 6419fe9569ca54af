"""`gpuc demo --provider runpod|vast --serve`: a rental to rehearse offline. The provider's emulator, the
loopback sshd with its sandboxed "pods", an S3 API on loopback for the results (ministack, AUTH on: the pods
push through the grants a real pod uses), a local watchdog, the phone and the provider's console stay up until
Ctrl-C; a shell pointed at them with one `.` line runs every gpuc command as against the real provider, with
the real code paths.

The shell file holds the emulator's own test key and the rehearsal's settings, nothing of the user's: it
first unsets every name gpuc reads (each setting's variable, derived from Settings, gpuc's other names, the
providers' keys, the cloud and git credentials: `cleared_names`) and every GPUC_*, RUNPOD_*, VAST_* and
AWS_* variable the shell holds, whatever its name; every endpoint it does not emulate points at a loopback
port where nothing listens, and boto3's credential files at empty ones in the rehearsal's home.
GPUC_REHEARSAL marks the shell: a real key or URL exported afterwards is refused by every command
(core/rehearsal.py). The watchdog's admin token goes to the rehearsal home's config.json, never to the
terminal. The watchdog serves its links on its own port, and follows the money settings of the rehearsal's
`.env` (the budget `gpuc doctor` asks for). On the way out every pod left is destroyed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gpuc.core.envcheck import known_names
from gpuc.core.errors import ConfigError, GpucError, NotFound
from gpuc.core.providers.registry import get_provider
from gpuc.core.rehearsal import AWS_CREDENTIALS, AWS_FILES, NOWHERE, endpoint_fields, loopback_host
from gpuc.core.settings import AWS_SECRET_NAMES, SETTING_ENV_NAMES, SETTING_NAMES, Settings, env_name
from gpuc.core.settingsload import load_settings, save_config
from gpuc.core.signing import new_token
from gpuc.functions.server import start_in_thread
from gpuc.testkit.demo import REMOTE, cleanup_pods, quiet_ssh_warnings

if TYPE_CHECKING:
    from gpuc.client.context import Ctx
    from gpuc.functions.app import Deps
    from gpuc.testkit.s3server import LoopbackS3

Echo = Callable[[str], None]
SHELL_FILE = "rehearse.sh"
STATE_FILE = "rehearsal.json"  # the rehearsal's own addresses, read by `gpuc demo outbid` in its shell
BUCKET = "gpuc-rehearsal"
# The rehearsal's intervals: the demo's (minutes as seconds), and what a user rehearses beyond it: an outbid's
# recovery (the wait before a re-rent), a paused pod's limit without --recover, the periodic push a resume
# restarts from, and the budget's pull-in (time left to sync), each short enough to watch.
REHEARSAL: dict[str, object] = {
    **REMOTE,
    "recover_wait_s": 10.0,
    "paused_limit_s": 60.0,
    "sync_interval_s": 10.0,
    "budget_pull_in_s": 60.0,
}
# The watchdog's money settings, taken again from the rehearsal's .env whenever it changes: the budget a user
# sets where `gpuc doctor` says reaches the watchdog's side of the cap (its page, its 80 % alert, pulled-in
# deadlines) as it reaches `up`'s, with no restart.
MONEY_FIELDS = ("monthly_budget", "budget_alert_fraction", "budget_pull_in_s", "balance_cap_usd", "balance_low_usd")
FOLLOW_S = 0.5


def serve_rehearsal(echo: Echo, provider: str, home: Path | None, stop: threading.Event | None = None) -> int:
    """Serve until `stop` is set, Ctrl-C, SIGTERM or SIGHUP; 0 when nothing was left behind."""
    stop = stop or threading.Event()
    say = _unbreakable(echo)
    # From the first line: a script's SIGTERM during start-up, or a closed terminal, still ends in the
    # clean-up below (a scripted rehearsal was once found still running 8 minutes after both).
    with _until_stopped(stop):
        return _serve(say, provider, home, stop)


def _serve(say: Echo, provider: str, home: Path | None, stop: threading.Event) -> int:
    quiet_ssh_warnings()
    from gpuc.testkit.console import ProviderConsole
    from gpuc.testkit.emulators.server import EmulatorServer
    from gpuc.testkit.platform import PROVIDERS, client_environ, start_platform, write_env_file
    from gpuc.testkit.s3server import results_env, start_s3
    from gpuc.testkit.sshd import require_ssh, start_loopback_sshd
    from gpuc.testkit.stand_ins import NtfyStandIn

    if provider not in PROVIDERS:
        raise ConfigError(f"no emulator for provider {provider!r}", hint="use --provider runpod or vast with --serve")
    require_ssh()
    started = time.monotonic()
    home = (home or Path(tempfile.mkdtemp(prefix="gpuc-rehearse-"))).absolute()
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.ExitStack() as stack:
        bucket = start_s3(logs, persist=home / "bucket")  # ~1 s, in its own process: first, so it overlaps the rest
        stack.callback(bucket.stop)
        sshd = start_loopback_sshd(home / "sshd")
        stack.callback(sshd.stop)
        emulator, platform = start_platform(provider, sshd)
        stack.callback(emulator.stop)
        stack.callback(platform.close)
        # The phone: an ntfy stand-in whose page shows every push and taps its buttons.
        phone = EmulatorServer(NtfyStandIn()).start()
        stack.callback(phone.stop)
        console = EmulatorServer(ProviderConsole(emulator.emulator)).start()  # type: ignore[arg-type]
        stack.callback(console.stop)
        # The rehearsal's own .env (the project's, maybe with real keys, is not read in that shell); one from an
        # earlier rehearsal in this home keeps what the user set there (a budget).
        if not (home / ".env").exists():
            write_env_file(home)
        results = results_env(bucket, BUCKET)
        environ = rehearsal_environ(
            home, {**client_environ(emulator, sshd, home, base={}), **_as_env(REHEARSAL), **results}
        )
        environ["GPUC_NOTIFY_URLS"] = phone_channel(phone.url)
        token = new_token()
        settings = load_settings(environ, admin_token=token)
        log_to(logs / "watchdog.log")
        server = start_in_thread(settings, port=0, reaper_interval_s=settings.reaper_period_s, links_here=True)
        stack.callback(server.stop)
        follower = MoneyFollower(server.deps, environ, say)
        stack.callback(follower.stop)
        save_config(home, watchdog_url=server.url, admin_token=token)
        shell = write_shell_file(home, {**environ, "GPUC_WATCHDOG_URL": server.url})
        write_state(home, console=console.url, phone=phone.url, watchdog=server.url, provider=provider)
        pods = get_provider(provider, settings.with_overrides(watchdog_url=server.url))
        stack.callback(pods.close)
        say(f"gpuc rehearsal ({provider}) ready in {time.monotonic() - started:.1f}s: emulator at {emulator.url}, "
            f"sshd at {sshd.host}:{sshd.port}, local watchdog at {server.url}")  # fmt: skip
        say(where_files_are(home, bucket, results))
        say(_instructions(shell, phone.url, console.url, provider))
        follower.start()
        while not stop.wait(0.5):
            pass
        say("stopping: destroying what is left")
        cleanup_pods(pods)
        platform.close()
        left = platform.leftovers()
    if left:
        say(f"stopped, but processes were left in the pods' sandboxes: {left}")
        return 1
    say("stopped: no pod and no process left behind. What the rehearsal kept:")
    say(where_files_are(home, bucket, results, stopped=True))
    return 0


def where_files_are(home: Path, bucket: LoopbackS3, results: Mapping[str, str], stopped: bool = False) -> str:
    """Where the rehearsal keeps what a user would look for: said at the start and again at the end."""
    on_disk = sorted(bucket.data.glob(f"*/{BUCKET}")) if bucket.data is not None else []
    kept = f"kept on disk in {on_disk[0]}" if on_disk else "in memory only"
    served = "served while the rehearsal runs" if not stopped else "its server stopped with the rehearsal"
    return "\n".join(
        [
            f"Its files, all under {home} (kept after Ctrl-C; `--home DIR` chooses the folder):",
            f"  settings  {home / '.env'} (mode 600: GPUC_MONTHLY_BUDGET goes here, as `gpuc doctor` says), "
            f"{home / 'config.json'}",
            f"  ledger    {home / 'gpu-ledger.csv'} (`gpuc ledger`)",
            f"  bucket    {results['GPUC_RESULTS_BUCKET']} at {results['GPUC_S3_ENDPOINT_URL']} ({served}; objects "
            f"{kept})",
            f"  logs      {home / 'logs'} (the watchdog's, the S3 server's); each pod's disk under "
            f"{home / 'sshd' / 'pods'}",
            f"  phone     {home / 'outbox.jsonl'} (every notification the watchdog sent)",
        ]
    )


def write_state(home: Path, **values: str) -> Path:
    path = home / STATE_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(values, fh, indent=2)
    return path


def read_state(home: Path) -> dict[str, str]:
    """The running rehearsal's addresses, for a command in its shell; a missing or unreadable file is said."""
    try:
        state = json.loads((home / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = None
    if not isinstance(state, dict):
        raise ConfigError(
            f"no rehearsal is running from {home} ({STATE_FILE} is missing or unreadable)",
            hint="start one: gpuc demo --provider vast --serve, then source the line it prints",
        )
    return {str(k): str(v) for k, v in state.items()}


CONSOLE_TIMEOUT_S = 10.0


def outbid_pod(ctx: Ctx, ref: str) -> list[str]:
    """`gpuc demo outbid POD` in a Vast rehearsal's shell: the console stand-in has another renter outbid the pod
    (a run's current attempt when POD names the run); what follows is the product's, and said."""
    home = ctx.settings.rehearsal
    if home is None:
        raise ConfigError(
            "`gpuc demo outbid` outbids a pod of a rehearsal's emulator only (no one can outbid your real pods "
            "from here)",
            hint="start one: gpuc demo --provider vast --serve, source the line it prints, and run it there",
        )
    console = read_state(home)["console"]
    account = _ask_console(console, "GET", "/json", None)
    pod_id = _pod_to_outbid(ctx, ref, account.get("pods", []))
    answer = _ask_console(console, "POST", "/outbid", {"pod": pod_id})
    if "error" in answer:
        raise NotFound(str(answer["error"]), hint="`gpuc ls` lists the pods and their ids")
    wait = ctx.settings.recover_wait_s
    return [
        f"outbid: another renter bid ${answer['going']:.2f}/h per GPU on instance {pod_id} (yours:"
        f" ${answer['bid']:.2f}): Vast paused it, killed its processes and kept its disk (which bills while paused)",
        f"the watchdog sees the pause at its next pass; a run started with --recover N re-rents it after"
        f" GPUC_RECOVER_WAIT_S ({wait:g} s here): `gpuc ls` shows the next attempt (2/N+1 after a first outbid),"
        f' the phone says "recovering" with a stop button, `gpuc down {ref}` stops the recovery; without'
        f" --recover the pod stays paused until"
        f" GPUC_PAUSED_LIMIT_S ({ctx.settings.paused_limit_s:g} s here), then the watchdog destroys it",
    ]


def _pod_to_outbid(ctx: Ctx, ref: str, pods: list[dict[str, object]]) -> str:
    """POD as the user names it: an instance id, else the run (its experiment or run id), whose running attempt
    (`gpuc-<run id>`, then `gpuc-<run id>-a2` ...) is the one a renter would outbid."""
    if ref.isdigit():
        return ref
    run = ctx.runs.find(ref)
    mine = [p for p in pods if str(p.get("label", "")).startswith(f"gpuc-{run.run_id}") and p.get("state") == "running"]
    if not mine:
        raise NotFound(f"run {run.run_id} ({run.experiment}) has no running pod at the emulator to outbid",
                       hint="`gpuc ls` lists the pods; a paused one is already outbid")  # fmt: skip
    return str(mine[-1]["id"])


def _ask_console(console: str, method: str, path: str, body: object) -> dict[str, Any]:
    from gpuc.core.transport import TransportFailure, exchange, shared_client

    content = None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"} if body is not None else {}
    try:
        reply = exchange(shared_client(), method, console + path, headers, content,
                         until=time.monotonic() + CONSOLE_TIMEOUT_S)  # fmt: skip
        answer = json.loads(reply.content)
    except (TransportFailure, ValueError) as exc:
        raise ConfigError(
            f"the rehearsal's console at {console} did not answer ({type(exc).__name__})",
            hint="is the rehearsal still running? Its terminal says; start it again and source its line",
        ) from None
    return answer if isinstance(answer, dict) else {}


class MoneyFollower:
    """The rehearsal's watchdog takes MONEY_FIELDS from the rehearsal's `.env` again whenever the file changes, and
    says so in the rehearsal's terminal (the shell's `.env` is the watchdog's too: one machine, one file)."""

    def __init__(self, deps: Deps, environ: Mapping[str, str], say: Echo) -> None:
        self.deps, self.environ, self.say = deps, dict(environ), say
        self.path = Path(environ["GPUC_ENV_FILE"])
        self._stamp: tuple[float, int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpuc-rehearsal-money", daemon=True)
        self.follow(quiet=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(FOLLOW_S):
            self.follow()

    def follow(self, quiet: bool = False) -> None:
        try:
            st = self.path.stat()
            stamp: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            fresh = load_settings(self.environ)
        except GpucError as exc:
            self.say(f"watchdog: {self.path} changed but does not read ({exc.message}); it keeps its budget")
            return
        now = self.deps.settings
        changed = {f: getattr(fresh, f) for f in MONEY_FIELDS if getattr(fresh, f) != getattr(now, f)}
        if not changed:
            return
        self.deps.settings = now.with_overrides(**changed)
        if not quiet:
            words = ", ".join(f"{env_name(f)}={'unset' if v is None else f'{v:g}'}" for f, v in changed.items())
            self.say(f"watchdog: took {words} from {self.path}")


def log_to(path: Path) -> None:
    """The watchdog's, the reaper's and the stand-ins' lines to the rehearsal's log file, not its terminal (which
    keeps the banner and what the rehearsal itself says)."""
    formatter = logging.Formatter("%(asctime)s %(name)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler = logging.FileHandler(path)
    handler.setFormatter(formatter)
    handler.set_name("gpuc-rehearsal")
    for name in ("gpuc.functions", "gpuc.reaper", "gpuc.notify", "gpuc.testkit"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.handlers = [h for h in logger.handlers if h.name != "gpuc-rehearsal"] + [handler]


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
    {
        *AWS_CREDENTIALS,
        *AWS_FILES,
        *AWS_SECRET_NAMES,
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_ENDPOINT_URL",
        "GH_TOKEN",
        "GITHUB_TOKEN",
        "GIT_ASKPASS",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
    }
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


# What to try in the Vast rehearsal: an interruptible run outbid, and its recovery, before any money.
VAST_OUTBID = [
    "An outbid and its recovery (docs/interruptible.md, step by step):",
    "  gpuc up lora --interruptible --bid 0.22 --recover 2 --max-hours 1 -- python train.py",
    "  gpuc demo outbid lora                            # another renter outbids it (or the console's button)",
    "  gpuc ls; gpuc ledger                             # attempt 2/3 once re-rented; one ledger row for the run",
    "  gpuc down lora                                   # stops the recovery: no further attempt is rented",
]


def _instructions(shell: Path, phone: str, console: str, provider: str = "runpod") -> str:
    return "\n".join(
        [
            f"The phone: {phone} shows every notification and taps its buttons (`gpuc notify --test` sends one).",
            f"The {provider} console (stand-in): {console} shows the account's balance, billed down as pods run"
            + (", and outbids an interruptible pod." if provider == "vast" else "."),
            "Point a shell at it (the file holds the emulator's test key and settings, nothing of yours):",
            f"  . {shlex.quote(str(shell))}",
            "then rent as you would for real, e.g.:",
            "  gpuc doctor                                      # passes, but for the budget: set it where it says",
            "  gpuc up first-try --wait -- python -c \"print('hello from the pod')\"",
            "  gpuc ls; gpuc ledger",
            *(RUNPOD_TRAPS if provider == "runpod" else VAST_OUTBID),
            "Intervals are scaled from minutes to seconds (an idle pod is warned at 2 min and destroyed at 3 min; "
            f"an outbid run is re-rented after {REHEARSAL['recover_wait_s']:g} s).",
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
