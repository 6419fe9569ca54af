"""One typed Settings object, read once at the edge.

Precedence (highest first): process environment, the `.env` file, `$GPUC_HOME/config.json`,
the defaults below. Every non-secret field `foo_bar` is read from `GPUC_FOO_BAR`; secrets keep the
names users already have (`RUNPOD_API_KEY`, `VAST_API_KEY`, ...). Secrets are SecretStr: they do not
print, and `redact()` scrubs their values out of anything we log.

Settings is a frozen dataclass that checks and converts its own fields, not a pydantic model: every
`gpuc` command reads it first, and pydantic's import (~60 ms, three times a bare interpreter's start)
would make `gpuc ls` pay for validation it does not need. The rules are pydantic's lax ones for the
field types used here: numbers from strings, paths from strings, secrets from strings, a Literal's
values only, unknown fields refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpuc.core.clock import DURATION_SHAPES, duration_seconds
from gpuc.core.envcheck import warn_once
from gpuc.core.errors import ConfigError

SECRET_ENV = {
    "runpod_api_key": "RUNPOD_API_KEY",
    "vast_api_key": "VAST_API_KEY",
    "admin_token": "GPUC_ADMIN_TOKEN",
    "watchdog_key": "GPUC_WATCHDOG_KEY",
    "notify_urls": "GPUC_NOTIFY_URLS",
    "webhook_secret": "GPUC_WEBHOOK_SECRET",
    "telegram_secret": "GPUC_TELEGRAM_SECRET",
    "slack_signing_secret": "GPUC_SLACK_SIGNING_SECRET",
    "vast_webhook_secret": "GPUC_VAST_WEBHOOK_SECRET",
    "hf_token": "HF_TOKEN",
    "git_token": "GPUC_GIT_TOKEN",
    "s3_access_key_id": "GPUC_S3_ACCESS_KEY_ID",
    "s3_secret_access_key": "GPUC_S3_SECRET_ACCESS_KEY",
}


def default_home() -> Path:
    return Path(os.environ.get("GPUC_HOME") or Path.home() / ".gpuc")


class SecretStr:
    """A secret that never prints (pydantic's SecretStr contract: `get_secret_value()`, and `**********`
    in str and repr). Anything with `get_secret_value()` (a pydantic SecretStr) converts to one."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __repr__(self) -> str:
        return f"SecretStr('{self}')"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretStr) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __len__(self) -> int:
        return len(self._value)


class SettingError(ValueError):
    """One field of Settings has a value of the wrong kind. Never carries the value (it may be a secret).
    `fix`, when given, is what to do to the variable ("remove the newline from"): the hint then says it."""

    def __init__(self, field: str, message: str, fix: str | None = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.fix = fix


# No generated repr or eq: over a hundred fields each, compiled on every command's start; nothing compares
# settings, and a repr would only list what `gpuc doctor` shows properly.
@dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class Settings:
    """Every setting gpuc reads, from the environment and the .env, checked once (load_settings)."""

    home: Path = field(default_factory=default_home)
    env_file: Path = Path(".env")
    ledger_path: Path | None = None  # default: home / gpu-ledger.csv
    provider: str = "local"

    # the watchdog
    functions_url: str = "http://127.0.0.1:8787"  # the watchdog's URL; its old name GPUC_FUNCTIONS_URL is still read
    functions_timeout_s: float = 10.0  # each call's deadline; its old name GPUC_FUNCTIONS_TIMEOUT_S is still read
    # one tap from the phone: the watchdog's URL as a phone reaches it, for the links in
    # notifications (GPUC_PUBLIC_URL); None = GPUC_WATCHDOG_URL (a loopback default no phone can reach)
    public_url: str | None = None
    # Pods carried into this watchdog from another (`watchdog deploy --carry`), comma-separated ids: their
    # mark names the old watchdog, and no provider re-marks a running pod's env; this watchdog owns them.
    watchdog_carried: str | None = None

    # pod side (layer 1 and 2)
    heartbeat_interval_s: float = 60.0
    idle_check_interval_s: float = 60.0
    idle_gpu_pct: float = 5.0
    idle_warn_s: float = 15 * 60.0
    idle_destroy_s: float = 20 * 60.0
    ssh_input_window_s: float = 10 * 60.0
    sync_interval_s: float = 10 * 60.0  # the periodic results push; 0: none
    # a file of results/ modified this recently may still be being written: that push leaves it, and every file
    # modified after it, for the next one (instance_side/push.py)
    sync_settle_s: float = field(default=5.0, metadata={"ge": 0, "finite": True})
    nag_interval_s: float = 60 * 60.0

    # idle watch, progress floors: a process tree whose CPU time grew by at most this many
    # seconds AND whose I/O grew by at most this many bytes since the previous check made no progress.
    # Measured per minute on a 2-core machine (other jobs running, load 5-6): a python blocked on a lock, in
    # input() or polling a queue every 5 s (a dead DataLoader, 1 or 4 workers), `sleep infinity`,
    # `sh -c 'read x'`, idle sshd (with a session), nginx, cron, tmux, http.server: 0.00 s and 0 B; an
    # asyncio loop waking every second: 0.01 s; a busy loop: 19.7 s; reading a file at 64 KiB/s: 3.9 MB;
    # at 1 KiB/s: 64 KiB. The floors sit 10x above the 1 Hz heartbeat and 4x below the 1 KiB/s trickle.
    idle_cpu_floor_s: float = 0.1
    idle_io_floor_bytes: float = 16 * 1024.0

    # reaper (out-of-band layer)
    reaper_period_s: float = 5 * 60.0
    silence_limit_s: float = 5 * 60.0
    destroy_grace_s: float = 4 * 60.0
    stopped_limit_s: float = 24 * 3600.0
    paused_limit_s: float = 30 * 60.0
    # interruptible recovery, run by the watchdog (functions/recovery/rerent.py): how long an outbid pod may
    # wait for its bid to win again before the next offer is rented (a paused instance bills its disk)
    recover_wait_s: float = field(default=5 * 60.0, metadata={"gt": 0, "finite": True})
    unregistered_grace_s: float = 20 * 60.0
    max_destroys_per_run: int = 5
    fleet_silence_fraction: float = 0.5
    fleet_silence_min_pods: int = 3
    # hostile input: phone pushes per pod per hour from its signed events; the rest grouped
    events_per_hour: int = field(default=6, metadata={"gt": 0})

    # kept pods (SPEC F16): a pod whose results sync failed is kept, nagging, for
    # kept_window_s, then STOPPED (disk kept, GPU billing ends); a stopped kept pod is reminded of daily
    kept_window_s: float = field(default=2 * 3600.0, metadata={"gt": 0})
    kept_nag_interval_s: float = field(default=24 * 3600.0, metadata={"gt": 0})

    # money
    balance_cap_usd: float = 20.0
    balance_low_usd: float = 5.0
    max_hours: float = 12.0

    # deadlines gpuc enforces itself (SPEC F15): the pod's agent and the watchdog end a pod at its
    # deadline (`up --max-hours`); no deadline, at `up` or by `gpuc extend` / `keep`, lies past start + this
    max_lifetime_hours: float = field(default=48.0, metadata={"gt": 0})
    deadline_warn_s: float = 15 * 60.0  # the pod notifies this long before its deadline
    deadline_lead_s: float = 2 * 60.0  # ...and starts its ending (sync first) this long before it
    # a warm pod (`up --warm`) without --max-hours: its deadline is this job allowance plus the warm time after
    # its start, then after each `gpuc run`'s start (core/warm.py); the budget holds that much for it
    warm_job_hours: float = field(default=1.0, metadata={"gt": 0})
    # budget: a month's spend across providers, USD; None = no budget. `up` refuses a pod
    # whose worst case would cross it; the reaper alerts at the fraction and, at 100 %, pulls every running
    # pod's deadline in to now + budget_pull_in_s (once per pod: the user's later extension stands).
    monthly_budget: float | None = field(default=None, metadata={"gt": 0, "finite": True})
    experiment_budget: float | None = field(default=None, metadata={"gt": 0, "finite": True})  # per experiment
    budget_alert_fraction: float = field(default=0.8, metadata={"gt": 0, "le": 1})
    budget_pull_in_s: float = field(default=1800.0, metadata={"gt": 0, "finite": True})

    # providers
    runpod_graphql_url: str = "https://api.runpod.io/graphql"
    runpod_rest_url: str = "https://api.runpod.io/v2"
    vast_url: str = "https://console.vast.ai/api/v0"
    # RunPod's cloud for on-demand pods and offers: SECURE (datacenters) unless the user opts into COMMUNITY.
    runpod_cloud_type: Literal["SECURE", "ALL", "COMMUNITY"] = "SECURE"
    provider_timeout_s: float = 20.0
    local_boot_s: float = 1.0
    local_price_per_hour: float = 0.44
    local_gpu: str = "RTX 4090 (simulated)"

    # the laptop's output: while gpuc waits (a boot, an ssh address, the bootstrap) and stderr is not a terminal
    # (a pipe, a file, cron), a plain progress line this often (client/progress.py)
    progress_every_s: float = field(default=30.0, metadata={"gt": 0, "finite": True})

    # the project `up` uploads into the pod's workspace (client/upload.py): refused over this size
    upload_max_mb: float = field(default=200.0, metadata={"gt": 0})

    # secrets to the pod (core/podsecrets.py): the names, comma-separated, that go to the pod
    # beyond HF_TOKEN and the git token (GPUC_POD_SECRETS=WANDB_API_KEY,OPENAI_API_KEY); never values
    pod_secrets: str | None = None

    # results
    results_bucket: str | None = None
    s3_endpoint_url: str | None = None
    git_remote: str | None = None

    # getting onto a rented pod (client/ssh.py, client/provision.py)
    ssh_key_path: Path = field(default_factory=lambda: Path.home() / ".ssh" / "id_ed25519")
    ssh_sandbox_root: Path | None = (
        None  # tests/demos only: the pod's root on the ssh host is <this>/<pod id>
    )
    # tests/demos only: install gpuc on the sandbox pod offline, run by this python (it has gpuc's deps)
    ssh_sandbox_python: str | None = None

    # the bootstrap on the pod (instance_side/bootstrap.py); the repo it clones is git_remote
    bootstrap_apt: str = "git"  # system tools, space-separated apt packages, installed when missing
    # "skip" for an image that ships no torch on purpose (a CPU job; the emulators' sandbox pods, where a
    # failed torch check would be noise in a demo that passes)
    bootstrap_torch: Literal["check", "skip"] = "check"
    bootstrap_requirements: str = "requirements.txt"  # in the repo; every line pinned (==)
    bootstrap_models: str | None = None  # Hugging Face repo ids to prefetch, comma-separated
    bootstrap_smoke: str | None = None  # a shell command run in the repo as the last step

    # notifications: "agent start" reaches the phone only when asked (it is always logged
    # in the pod's log); the local watchdog re-reads the channels from .env when the file changes
    notify_start: bool = False

    # secrets
    runpod_api_key: SecretStr | None = None
    vast_api_key: SecretStr | None = None
    admin_token: SecretStr | None = None
    # The watchdog's own key (core.signing: pod claims and ping tokens derive from it): config.json for
    # `serve`, SSM on AWS; never in the store. A new key is a new watchdog (`watchdog deploy --rotate-key`).
    watchdog_key: SecretStr | None = None
    notify_urls: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    hf_token: SecretStr | None = None
    git_token: SecretStr | None = None
    s3_access_key_id: SecretStr | None = None
    s3_secret_access_key: SecretStr | None = None

    # taps on the phone's buttons (channels): Telegram's webhook `secret_token`, the chat and
    # user ids whose taps may act (comma-separated; default: the chats of the tgram:// URLs), Slack's
    # signing secret. Unset: that channel's taps are refused (404) and its buttons open pages only.
    telegram_secret: SecretStr | None = None
    telegram_chats: str | None = None
    slack_signing_secret: SecretStr | None = None
    # Vast's signing secret of the webhook (subscribed to `client:outbid`) pointed at `<watchdog URL>/v1/hooks/vast`:
    # a signed outbid delivery wakes the reaper (a hint: the pass reads the pods and decides). Unset: 404.
    vast_webhook_secret: SecretStr | None = None
    # Vast's id of that webhook (the console's notification settings, or the create's answer): `gpuc doctor
    # --live` asks Vast to send it a signed test delivery and checks that the watchdog verified it.
    vast_webhook_id: int | None = None

    # a rehearsal (client/setup/rehearse.py): its home. Set, every endpoint, watchdog and
    # destination must be the rehearsal's own (loopback, or inside this folder): a real key the user
    # re-exports in that shell then reaches nothing real.
    rehearsal: Path | None = None

    def __post_init__(self) -> None:
        for name, convert in _CONVERTERS.items():
            object.__setattr__(self, name, convert(name, getattr(self, name)))
        for name, floor in _ABOVE.items():  # field(metadata={"gt": x}): pydantic's Field(gt=x)
            value = getattr(self, name)
            if value is not None and not value > floor:
                raise SettingError(name, f"must be greater than {floor:g}")
        for name, least in _AT_LEAST.items():  # field(metadata={"ge": x}): pydantic's Field(ge=x)
            value = getattr(self, name)
            if value is not None and not value >= least:
                raise SettingError(name, f"must be at least {least:g}")
        for name, ceiling in _AT_MOST.items():  # field(metadata={"le": x}): pydantic's Field(le=x)
            value = getattr(self, name)
            if value is not None and not value <= ceiling:
                raise SettingError(name, f"must be at most {ceiling:g}")
        for name in _FINITE:  # "inf" parses as a number: a budget of inf is no budget, said nowhere
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise SettingError(name, "must be a finite number")
        if self.idle_warn_s >= self.idle_destroy_s:  # a warning at or after the destroy never warns
            raise SettingError(
                "idle_warn_s",
                f"the idle warning ({self.idle_warn_s:g} s) must come before the idle destroy "
                f"({self.idle_destroy_s:g} s): set GPUC_IDLE_WARN_S below GPUC_IDLE_DESTROY_S",
            )
        if self.rehearsal is not None:
            from gpuc.core.rehearsal import check_rehearsal  # lazy: only a rehearsal's commands pay for it

            check_rehearsal(self)

    @property
    def ledger(self) -> Path:
        return self.ledger_path or self.home / "gpu-ledger.csv"

    def secret_values(self) -> list[str]:
        """Every secret value we hold, for redaction. Never print this list."""
        out: list[str] = []
        for name in SECRET_ENV:
            value: SecretStr | None = getattr(self, name)
            if value is not None and value.get_secret_value():
                out.append(value.get_secret_value())
        return out

    def named_secrets(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Every secret value gpuc holds -> the variable that holds it, for the upload's refusal (it
        names the setting, never the value). Every SecretStr field (a new one is covered as it is
        declared), the tokens inside the notification URLs, the AWS keys `watchdog deploy` uses, and the
        variables GPUC_POD_SECRETS names (they reach the pod as secrets, never inside a file)."""
        values = {env_name(name): getattr(self, name) for name in SECRET_FIELDS}
        environ = os.environ if environ is None else environ
        named = [n.strip() for n in (self.pod_secrets or "").split(",") if n.strip()]
        values.update({name: environ.get(name) for name in (*AWS_SECRET_NAMES, *named)})
        return named_values({k: v.get_secret_value() if isinstance(v, SecretStr) else v for k, v in values.items()})

    def with_overrides(self, **values: Any) -> Settings:
        # Through the constructor, so an override is checked and converted like any other value.
        return Settings(**{**self.as_dict(), **values})

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SETTING_NAMES}


def _number(kind: type[float] | type[int]) -> Callable[[str, Any], Any]:
    def convert(name: str, value: Any) -> Any:
        if isinstance(value, bool):
            raise SettingError(name, f"expected a number, got {type(value).__name__}")
        try:
            number = float(value) if kind is float else _integer(value)
        except (TypeError, ValueError):
            raise SettingError(name, "expected a number" if kind is float else "expected a whole number") from None
        if isinstance(number, float) and math.isnan(number):
            raise SettingError(name, "expected a number, got NaN")
        return number

    return convert


def _integer(value: Any) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    return int(value)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise SettingError(name, f"expected text, got {type(value).__name__}")
    return value


def _path(name: str, value: Any) -> Path:
    if isinstance(value, Path):
        return value
    if not isinstance(value, str):
        raise SettingError(name, f"expected a path, got {type(value).__name__}")
    return Path(value)


def _secret(name: str, value: Any) -> SecretStr:
    if isinstance(value, SecretStr):
        secret = value
    elif isinstance(value, str):
        secret = SecretStr(value)
    elif callable(getattr(value, "get_secret_value", None)):  # a pydantic SecretStr (tests, the drill)
        secret = SecretStr(str(value.get_secret_value()))
    else:
        raise SettingError(name, f"expected text, got {type(value).__name__}")
    _header_safe(name, secret.get_secret_value())
    return secret


def _url(name: str, value: Any) -> str:
    text = _text(name, value)
    _header_safe(name, text)
    return text


def _header_safe(name: str, value: str) -> None:
    """A key, token or URL gpuc sends in a header or a request line: one line of printable ASCII. Refused
    here, when read, naming the variable: sent as it is, a trailing newline (a CRLF file, a CI secret saved
    with its newline) makes the HTTP client raise with the whole value in its message."""
    if value.isascii() and value.isprintable():
        return
    line = value.rstrip("\r\n")
    if line != value and line.isascii() and line.isprintable():
        raise SettingError(
            name,
            "ends with a newline (a file saved with CRLF, or a secret copied with its line end), which no HTTP"
            " header can carry",
            fix="remove the newline from",
        )
    at = next(i for i, c in enumerate(value) if not (c.isascii() and c.isprintable()))
    what = "a non-ASCII character"
    if value[at].isascii():
        what = "a line break" if value[at] in "\r\n" else "a control character"
    raise SettingError(
        name,
        f"holds {what} at character {at + 1} of {len(value)}, which no HTTP header can carry (a key is one line"
        " of plain ASCII)",
        fix=f"remove {what} (character {at + 1}) from",
    )


def _choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def convert(name: str, value: Any) -> str:
        if value not in choices:
            raise SettingError(name, f"expected one of {', '.join(choices)}")
        return str(value)

    return convert


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SettingError(name, "expected 1 or 0 (true/false, yes/no)")


def _duration(unit_s: float) -> Callable[[str, Any], Any]:
    """A time setting: a number (seconds, or hours for *_hours as before) or a duration with units ("20m",
    "1h30m"), read by the one parser `gpuc extend 2h` uses."""
    number = _number(float)

    def convert(name: str, value: Any) -> Any:
        if not isinstance(value, str):
            return number(name, value)
        try:
            float(value)
        except ValueError:
            pass
        else:
            return number(name, value)  # a bare number keeps the field's unit
        try:
            return duration_seconds(value) / unit_s
        except ValueError as exc:
            shapes = "seconds (1200)" if unit_s == 1.0 else "hours (12)"
            raise SettingError(name, f"{exc}: write {shapes} or a duration: {DURATION_SHAPES}") from None

    return convert


def _optional(convert: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else convert(name, value)


_BASE: dict[str, Callable[[str, Any], Any]] = {
    "float": _number(float),
    "int": _number(int),
    "str": _text,
    "Path": _path,
    "SecretStr": _secret,
    "bool": _flag,
}


def _converter(annotation: str) -> Callable[[str, Any], Any]:
    """From the field's annotation (a string under `from __future__ import annotations`)."""
    base, optional = annotation, annotation.endswith(" | None")
    if optional:
        base = annotation.removesuffix(" | None")
    if base.startswith("Literal["):
        inner = base.removeprefix("Literal[").removesuffix("]")
        convert = _choice(tuple(part.strip().strip("\"'") for part in inner.split(",")))
    else:
        convert = _BASE[base]  # a KeyError here: a new field type needs a converter above
    return _optional(convert) if optional else convert


def _field_converter(f: dataclasses.Field[Any]) -> Callable[[str, Any], Any]:
    """Every time setting takes units: its name ends in _s (seconds) or _hours."""
    base = str(f.type).removesuffix(" | None")
    if base == "str" and f.name.endswith("_url"):  # in the request line: the rule a header's value obeys
        return _optional(_url) if str(f.type).endswith(" | None") else _url
    if base == "float" and f.name.endswith(("_s", "_hours")):
        convert = _duration(3600.0 if f.name.endswith("_hours") else 1.0)
        return _optional(convert) if str(f.type).endswith(" | None") else convert
    return _converter(str(f.type))


_CONVERTERS = {f.name: _field_converter(f) for f in dataclasses.fields(Settings)}
_ABOVE: dict[str, float] = {f.name: f.metadata["gt"] for f in dataclasses.fields(Settings) if "gt" in f.metadata}
_AT_LEAST: dict[str, float] = {f.name: f.metadata["ge"] for f in dataclasses.fields(Settings) if "ge" in f.metadata}
_AT_MOST: dict[str, float] = {f.name: f.metadata["le"] for f in dataclasses.fields(Settings) if "le" in f.metadata}
_FINITE: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Settings) if f.metadata.get("finite"))
SETTING_NAMES: tuple[str, ...] = tuple(_CONVERTERS)


SECRET_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Settings) if "SecretStr" in str(f.type))
# The AWS keys boto3 reads for `gpuc watchdog deploy`: secrets gpuc uses, though no setting of its own.
AWS_SECRET_NAMES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
MIN_SECRET = 8  # shorter, a value is a word any file may hold: a test's "x" would refuse every project
_URL_PIECES = re.compile(r"[/@?&=#,;:\s]+")


def url_secrets(urls: str) -> list[str]:
    """The tokens inside notification URLs (`ntfy://TOKEN@host/topic`, `tgram://BOT:TOKEN/chat`, Slack's
    `hooks.slack.com/services/T/B/SECRET`, `discord://ID/TOKEN`): each piece long enough to be one and not
    a host name. The URL's own scheme and host are public; the pieces are not."""
    out: list[str] = []
    for url in urls.split(","):
        rest = url.strip().partition("://")[2]
        out += [p for p in _URL_PIECES.split(rest) if len(p) >= 12 and "." not in p]
    return out


def named_values(values: Mapping[str, str | None] | list[tuple[str, str | None]]) -> dict[str, str]:
    """{variable: value} (or pairs: one variable from several places) -> {value: variable}, the values too
    short to be secrets left out."""
    out: dict[str, str] = {}
    for variable, value in values.items() if isinstance(values, Mapping) else values:
        if not value:
            continue
        if variable == env_name("notify_urls"):
            for piece in url_secrets(value):
                out.setdefault(piece, f"{variable} (a token inside a notification URL)")
        if len(value) >= MIN_SECRET:
            out.setdefault(value, variable)
    return out


def secrets_in_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What `named_secrets` gives, read without Settings (which may be what failed: the error and debug
    paths), never raising: the environment, the .env file and config.json as far as they read, each place's
    value kept (the one that loses to another may still be quoted); plus any variable named like a secret
    (*_KEY, *_TOKEN, *_SECRET, *_PASSWORD)."""
    env = dict(os.environ if environ is None else environ)
    pairs: list[tuple[str, str | None]] = []
    with contextlib.suppress(Exception):
        home = Path(env.get("GPUC_HOME") or Path.home() / ".gpuc")
        config = json.loads((home / "config.json").read_text(encoding="utf-8"))
        pairs += [(env_name(k), str(v)) for k, v in config.items() if k in SECRET_FIELDS and v]
    with contextlib.suppress(Exception):
        pairs += list(read_env_file(find_env_file(env)).items())
    pairs += list(env.items())
    wanted = {env_name(name) for name in SECRET_FIELDS} | set(AWS_SECRET_NAMES)
    named_like = ("_KEY", "_TOKEN", "_SECRET", "_PASSWORD")
    return named_values([(k, v) for k, v in pairs if k in wanted or k.endswith(named_like)])


# The watchdog's address and timeout once took their names from the AWS functions that ran it first; the
# user reads "watchdog" everywhere else. The old names are still read (a .env or a shell written before keeps
# working, docs/settings.md says so), the new name winning where both are set.
WATCHDOG_ENV = {"functions_url": "GPUC_WATCHDOG_URL", "functions_timeout_s": "GPUC_WATCHDOG_TIMEOUT_S"}
OLD_ENV_NAMES = {"GPUC_FUNCTIONS_URL": "GPUC_WATCHDOG_URL", "GPUC_FUNCTIONS_TIMEOUT_S": "GPUC_WATCHDOG_TIMEOUT_S"}


def env_name(field: str) -> str:
    return SECRET_ENV.get(field) or WATCHDOG_ENV.get(field) or f"GPUC_{field.upper()}"


# The old names too: envcheck must not call a still-accepted name misspelt.
SETTING_ENV_NAMES = frozenset(env_name(name) for name in SETTING_NAMES) | frozenset(OLD_ENV_NAMES)


def with_current_names(values: Mapping[str, str]) -> dict[str, str]:
    """`values` with each old name's value also under its current name, unless that one is set."""
    out = dict(values)
    for old, new in OLD_ENV_NAMES.items():
        if out.get(old) and not out.get(new):
            out[new] = out[old]
    return out


def read_env_file(path: Path) -> dict[str, str]:
    """The .env file as a dict, or {} when absent. A file that cannot be read, is not UTF-8, or has a line
    that is not `KEY=value` is an error naming the file and the line: a key silently dropped would send a
    pod off without the secret the user thinks it has."""
    if not path.exists():
        return {}
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"cannot read {path}: {exc.strerror or type(exc).__name__}",
            hint=f"make it readable by you (mode 600): chmod 600 {path}",
        ) from None
    text = _decode_env(path, raw)
    _check_env_lines(path, text)
    from dotenv import dotenv_values  # lazy: only a .env pays for python-dotenv; the Lambda has none

    values = dotenv_values(stream=io.StringIO(text))
    return {k: v for k, v in values.items() if v is not None}


def _decode_env(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")  # an editor's BOM is not part of the first key
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"{path} line {line} is not UTF-8",
            hint=f"save {path} as UTF-8 (KEY=value lines); `iconv -f latin1 -t utf-8` converts a Latin-1 file",
        ) from None


def _check_env_lines(path: Path, text: str) -> None:
    from dotenv.parser import parse_stream  # lazy: as in read_env_file

    consumed = 0  # lines before this binding: the parser's own count skips blank lines
    for binding in parse_stream(io.StringIO(text)):
        chunk = binding.original.string
        line = consumed + 1 + chunk[: len(chunk) - len(chunk.lstrip())].count("\n")
        consumed += chunk.count("\n")
        if binding.error:
            raise ConfigError(
                f"{path} line {line} is not a KEY=value line",
                hint=f"fix line {line} of {path}: KEY=value, quotes closed on the same line; comments start with #",
            )
        if binding.key is not None and binding.value is None:
            raise ConfigError(
                f"{path} line {line} names {binding.key} without a value",
                hint=f"write {binding.key}=value on line {line} of {path}, or delete the line",
            )


def find_env_file(environ: Mapping[str, str], cwd: Path | None = None) -> Path:
    """Which .env gpuc reads: GPUC_ENV_FILE if set; else the nearest .env from the current folder up to the
    repository root (the first folder holding .git); else the user's config folder
    ($XDG_CONFIG_HOME/gpuc/.env or ~/.config/gpuc/.env). When none exists, the current folder's (to create)."""
    explicit = environ.get("GPUC_ENV_FILE")
    if explicit:
        return Path(explicit)
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".env").is_file():
            return folder / ".env"
        if (folder / ".git").exists():
            break
    config = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "gpuc" / ".env"
    return config if config.is_file() else here / ".env"


def env_file_mode_ok(path: Path) -> bool:
    return path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077 == 0


def load_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    loaded = _gather(environ, overrides)
    try:
        return Settings(**loaded.raw)
    except SettingError as exc:
        raise loaded.explain(exc) from None


def load_settings_lenient(environ: Mapping[str, str] | None = None) -> tuple[Settings, list[ConfigError]]:
    """For `gpuc doctor`: Settings with each bad value replaced by its default, and one error per bad value
    (the same error load_settings raises), so one typo does not hide every other check."""
    loaded = _gather(environ, {})
    problems: list[ConfigError] = []
    for _ in SETTING_NAMES:
        try:
            return Settings(**loaded.raw), problems
        except SettingError as exc:
            problems.append(loaded.explain(exc))
            if exc.field in loaded.raw:
                del loaded.raw[exc.field]
            else:  # a rule between fields whose named one is already the default: all defaults
                loaded.raw = {k: loaded.raw[k] for k in ("home", "env_file")}
    return Settings(home=loaded.raw["home"], env_file=loaded.raw["env_file"]), problems


@dataclass
class _Loaded:
    """The raw values load_settings gathered, and where each came from."""

    raw: dict[str, Any]
    env: dict[str, str]
    from_file: dict[str, str]
    env_file: Path
    config: Path
    old_names: dict[str, str] = field(default_factory=dict)  # current name -> the old one that gave its value

    def explain(self, exc: SettingError) -> ConfigError:
        current = env_name(exc.field)
        where = _source(current, self.env, self.from_file, self.env_file, self.config)
        variable = self.old_names.get(current, current)  # the name the user wrote, which is the one to fix
        if exc.fix is not None:
            return ConfigError(f"setting {variable} {exc.message}", hint=f"{exc.fix} {variable} in {where}")
        return ConfigError(f"setting {variable} is invalid: {exc.message}", hint=f"fix {variable} in {where}")


def _gather(environ: Mapping[str, str] | None, overrides: Mapping[str, Any]) -> _Loaded:
    env = dict(os.environ if environ is None else environ)
    home = Path(env.get("GPUC_HOME") or Path.home() / ".gpuc")
    env_file = find_env_file(env)
    raw: dict[str, Any] = {}
    config = home / "config.json"
    if config.exists():
        try:
            raw.update(json.loads(config.read_text(encoding="utf-8")))
        except OSError as exc:
            raise ConfigError(
                f"cannot read {config} ({exc.strerror or type(exc).__name__})",
                hint=f"make it yours and readable (chmod 600 {config}), or point GPUC_HOME at another folder",
            ) from None
        except ValueError:
            raise ConfigError(
                f"{config} is not valid JSON", hint=f"fix it or delete it (gpuc rewrites it): rm {config}"
            ) from None
    from_file = read_env_file(env_file)
    warn_once(from_file, env, env_file, SETTING_ENV_NAMES)  # misspelt and empty keys, on stderr
    old_names = {new: old for old, new in OLD_ENV_NAMES.items() if _given_by(old, new, env, from_file)}
    env, from_file = with_current_names(env), with_current_names(from_file)
    merged = {**from_file, **env}
    if merged.get("GPUC_REHEARSAL"):
        from gpuc.core.rehearsal import check_rehearsal_environ  # lazy: a rehearsal's commands only

        problem = check_rehearsal_environ(merged, Path(merged["GPUC_REHEARSAL"]))
        if problem is not None:
            what, _, fix = problem.partition("; ")
            raise ConfigError(what, hint=fix)
    for name in SETTING_NAMES:
        variable = env_name(name)
        if variable in merged and merged[variable] != "":
            raw[name] = merged[variable]
    raw.update({"home": home, "env_file": env_file})
    raw.update(overrides)
    unknown = sorted(set(raw) - set(SETTING_NAMES))
    if unknown:
        raise ConfigError(
            f"setting {unknown[0]} in {config} is not a gpuc setting",
            hint=f"delete it from {config} (gpuc rewrites the file), or fix its spelling",
        )
    return _Loaded(raw, env, from_file, env_file, config, old_names)


def _given_by(old: str, new: str, env: Mapping[str, str], from_file: Mapping[str, str]) -> bool:
    """Whether the value in force is the old name's (the environment first, then the file; new before old)."""
    for place in (env, from_file):
        if place.get(new):
            return False
        if place.get(old):
            return True
    return False


def _source(variable: str, env: Mapping[str, str], from_file: Mapping[str, str], env_file: Path, config: Path) -> str:
    """Where a bad value came from, so the fix names the one place to edit (the environment wins)."""
    if env.get(variable):
        return "your environment (export/unset it)"
    if from_file.get(variable):
        return str(env_file)
    return f"your environment, {env_file} or {config}"


def save_config(home: Path, *, forget: tuple[str, ...] = (), **values: Any) -> Path:
    """Merge values into $GPUC_HOME/config.json (and drop the names in `forget`), written atomically with
    mode 600 (it may hold a token)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.json"
    current: dict[str, Any] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            current = {}
    current.update(values)
    for name in forget:
        current.pop(name, None)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(current, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)
    return path
