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
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpuc.core.envfile import find_env_file, read_env_file
from gpuc.core.rehearsal import endpoint_fields, rehearsal_problem
from gpuc.core.renamed import RENAMED
from gpuc.core.settingvalues import SecretStr, SettingError, field_converter

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
    watchdog_url: str = "http://127.0.0.1:8787"  # the watchdog's URL; its old name GPUC_FUNCTIONS_URL is still read
    watchdog_timeout_s: float = 10.0  # each call's deadline; its old name GPUC_FUNCTIONS_TIMEOUT_S is still read
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

    # kept pods (F16): a pod whose results sync failed is kept, nagging, for
    # kept_window_s, then STOPPED (disk kept, GPU billing ends); a stopped kept pod is reminded of daily
    kept_window_s: float = field(default=2 * 3600.0, metadata={"gt": 0})
    kept_nag_interval_s: float = field(default=24 * 3600.0, metadata={"gt": 0})

    # money
    balance_cap_usd: float = 20.0
    balance_low_usd: float = 5.0
    max_hours: float = 12.0

    # deadlines gpuc enforces itself (F15): the pod's agent and the watchdog end a pod at its
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

    # the project `up` uploads into the pod's workspace (client/onpod/upload.py): refused over this size
    upload_max_mb: float = field(default=200.0, metadata={"gt": 0})

    # secrets to the pod (core/podsecrets.py): the names, comma-separated, that go to the pod
    # beyond HF_TOKEN and the git token (GPUC_POD_SECRETS=WANDB_API_KEY,OPENAI_API_KEY); never values
    pod_secrets: str | None = None

    # results
    results_bucket: str | None = None
    s3_endpoint_url: str | None = None
    git_remote: str | None = None

    # getting onto a rented pod (client/onpod/ssh.py, client/onpod/provision.py)
    ssh_key_path: Path = field(default_factory=lambda: Path.home() / ".ssh" / "id_ed25519")
    ssh_sandbox_root: Path | None = None  # tests/demos only: the pod's root on the ssh host is <this>/<pod id>
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

    # a rehearsal (testkit/rehearse.py): its home. Set, every endpoint, watchdog and
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
            _check_rehearsal(self)

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


def _check_rehearsal(settings: Settings) -> None:
    """Raise SettingError naming the first endpoint that is not the rehearsal's own (core/rehearsal.py)."""
    assert settings.rehearsal is not None
    values: dict[str, str | None] = {}
    for name in endpoint_fields(SETTING_NAMES):
        raw: Any = getattr(settings, name)
        values[name] = raw.get_secret_value() if isinstance(raw, SecretStr) else raw
    problem = rehearsal_problem(values, settings.rehearsal)
    if problem is not None:
        raise SettingError(problem[0], problem[1], fix="source the rehearsal's shell file again, or unset")


_CONVERTERS = {f.name: field_converter(f) for f in dataclasses.fields(Settings)}
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


# The fields an older gpuc named otherwise (core/renamed.py) under their variables' old names: still read
# (a .env or a shell written before keeps working, docs/settings.md says so), the new name winning where both
# are set.
OLD_ENV_NAMES = {f"GPUC_{old.upper()}": f"GPUC_{new.upper()}" for old, new in RENAMED.items()}


def env_name(field: str) -> str:
    return SECRET_ENV.get(field) or f"GPUC_{field.upper()}"


# The old names too: envcheck must not call a still-accepted name misspelt.
SETTING_ENV_NAMES = frozenset(env_name(name) for name in SETTING_NAMES) | frozenset(OLD_ENV_NAMES)


def with_current_names(values: Mapping[str, str]) -> dict[str, str]:
    """`values` with each old name's value also under its current name, unless that one is set."""
    out = dict(values)
    for old, new in OLD_ENV_NAMES.items():
        if out.get(old) and not out.get(new):
            out[new] = out[old]
    return out
