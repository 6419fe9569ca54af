"""Which secrets leave the laptop for a pod: an allowlist, never "the .env minus a few".

A pod on Vast runs on a stranger's machine; whatever its secrets file or the job's environment holds,
that machine's owner can read. So a pod gets only:
- what the job and gpuc's own steps need: `HF_TOKEN` (model downloads) and `GPUC_GIT_TOKEN` when there is
  a git remote (clone and push);
- what the user names in `GPUC_POD_SECRETS=WANDB_API_KEY,OPENAI_API_KEY,...`, or for one run in
  `gpuc up --env NAME` (a name only: its value is looked up, never typed on the command line).

Never, even when named: the provider keys and the admin token (they act on the whole account), the
notification channels (a bot token: a pod could message the user as gpuc), the webhook secret, the
AWS keys that deploy the watchdog (with them a stranger could remove the watchdog, then the pods) and the
results bucket's key (it reaches every run's results: a pod gets the watchdog's grants for its own run's
prefix instead, functions/grants.py).

Standard library only: the job wrapper on the pod applies the same rule to the job's environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuc.core.errors import ConfigError
from gpuc.core.podpaths import TOKEN_ENV

POD_SECRETS_ENV = "GPUC_POD_SECRETS"
ENV_FLAG = "--env"  # `gpuc up --env NAME`: one run's named secret, same allowlist rule
HF_TOKEN_ENV = "HF_TOKEN"
S3_KEYS = ("GPUC_S3_ACCESS_KEY_ID", "GPUC_S3_SECRET_ACCESS_KEY")
GIT_TOKEN_ENV = "GPUC_GIT_TOKEN"
# The keys boto3 reads from the environment: `gpuc watchdog deploy` deploys (and can delete) the watchdog
# with them.
DEPLOY_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")

_PROVIDER = "a provider account key: it can rent and destroy anything on your account"
_DEPLOY = "an AWS key of the kind that deploys the watchdog: with it a stranger could remove the watchdog"
_RESULTS = (
    "the results bucket's key: it reaches every run's results; the pod gets short-lived URLs for its own run's "
    "prefix from the watchdog instead (name a key of the job's own, for what the job itself reads)"
)
NEVER_ON_POD: dict[str, str] = {
    "RUNPOD_API_KEY": _PROVIDER,
    "VAST_API_KEY": _PROVIDER,
    "GPUC_ADMIN_TOKEN": "the watchdog's admin token: it can end or forget every pod",
    "GPUC_WATCHDOG_KEY": "the watchdog's own key: with it a pod could forge any pod's claim and pings",
    "GPUC_NOTIFY_URLS": "your notification channels (bot tokens): a pod could message you as gpuc",
    "GPUC_WEBHOOK_SECRET": "the secret your notification webhook trusts",
    "GPUC_TELEGRAM_SECRET": "the secret that makes a request Telegram's: a pod could tap your buttons",
    "GPUC_SLACK_SIGNING_SECRET": "the secret that makes a request Slack's: a pod could tap your buttons",
    "GPUC_VAST_WEBHOOK_SECRET": "the secret that makes a request Vast's: a pod could wake the recovery at will",
    TOKEN_ENV: "the pod's own heartbeat token: gpuc writes a fresh one for each pod",
    **dict.fromkeys(S3_KEYS, _RESULTS),
    **dict.fromkeys(DEPLOY_KEYS, _DEPLOY),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class PodSecrets:
    """What goes to the pod (`values`), why each goes (`why`: name -> reason), and what was named in
    GPUC_POD_SECRETS but found neither in .env nor in the environment."""

    values: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()

    def names_line(self) -> str:
        """The names, never the values: `secrets to the pod: HF_TOKEN, WANDB_API_KEY (GPUC_POD_SECRETS)`."""
        if not self.values:
            return "secrets to the pod: none"
        named_by = (POD_SECRETS_ENV, ENV_FLAG)
        shown = [f"{name} ({self.why[name]})" if self.why[name] in named_by else name for name in self.values]
        return "secrets to the pod: " + ", ".join(shown)

    def warnings(self) -> list[str]:
        return [
            f"warning: {name} is named in {POD_SECRETS_ENV} but is in neither .env nor the environment: not sent"
            for name in self.missing
        ]


def named(spec: str | None) -> list[str]:
    """GPUC_POD_SECRETS as names; a name that cannot be an env var, or one that must never leave the
    laptop, is refused before anything is rented."""
    names = [part.strip() for part in (spec or "").split(",") if part.strip()]
    return _allowed(names, POD_SECRETS_ENV, f"list names only, comma-separated: {POD_SECRETS_ENV}=WANDB_API_KEY")


def flagged(names: Sequence[str]) -> list[str]:
    """`gpuc up --env NAME`: names only. A value typed on the command line sits in argv,
    where `ps` shows it to every user of the laptop, and in the shell's history; its name says where the
    value is (the environment, then .env), and the value goes to the pod's secrets file like the others."""
    for name in names:
        key, eq, _ = name.partition("=")
        if eq:  # never echo what follows the "=": it is the secret
            raise ConfigError(
                f"--env {key}=... puts a value on the command line, where `ps` and your shell history keep it",
                hint=f"put {key}=... in .env (or export it), then pass the name only: --env {key}",
            )
    return _allowed(list(names), ENV_FLAG, "pass a name only: --env WANDB_API_KEY")


def _allowed(names: list[str], where: str, shape: str) -> list[str]:
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ConfigError(f"{where} holds {bad[0]!r}, which is not an environment variable name", hint=shape)
    forbidden = [n for n in names if n in NEVER_ON_POD]
    if forbidden:
        reasons = "; ".join(f"{n} is {NEVER_ON_POD[n]}" for n in forbidden)
        raise ConfigError(
            f"{where} names what never goes onto a pod (someone else's machine): {reasons}",
            hint=f"remove {', '.join(forbidden)} from {where}",
        )
    return list(dict.fromkeys(names))


def choose(
    builtin: Mapping[str, tuple[str, str | None]],
    spec: str | None,
    sources: Iterable[Mapping[str, str]],
    asked: Sequence[str] = (),
) -> PodSecrets:
    """`builtin`: name -> (why it goes, its value or None); `sources`: where a named secret is looked
    up, first wins (the environment, then .env: the laptop's own precedence). `asked`: `up --env` names,
    each of which must be found (asked for this run, unlike the standing GPUC_POD_SECRETS)."""
    values: dict[str, str] = {}
    why: dict[str, str] = {}
    for name, (reason, value) in builtin.items():
        if value and name not in NEVER_ON_POD:
            values[name], why[name] = value, reason
    looked_in = list(sources)
    missing: list[str] = []
    for name in named(spec):
        if name in values:
            continue
        found = next((source[name] for source in looked_in if source.get(name)), None)
        if found is None:
            missing.append(name)
            continue
        values[name], why[name] = found, POD_SECRETS_ENV
    for name in flagged(asked):
        found = next((source[name] for source in looked_in if source.get(name)), None)
        if found is None:
            raise ConfigError(
                f"--env {name}: {name} is neither in your environment nor in .env (or it is empty)",
                hint=f"export {name}=... or add it to .env, or drop --env {name}",
            )
        if name not in values:
            values[name], why[name] = found, ENV_FLAG
    return PodSecrets(values, why, tuple(missing))


def never_on_pod(values: Mapping[str, str]) -> dict[str, str]:
    """`values` less every name that must never reach a pod or a job."""
    return {k: v for k, v in values.items() if k not in NEVER_ON_POD}


def pod_secrets(chosen: Mapping[str, str], token: str) -> dict[str, str]:
    """The pod's secrets file: what choose_pod_secrets let through, plus the pod's own token. What must
    never reach a pod is dropped again here, where the file is written."""
    out = {k: v for k, v in never_on_pod(chosen).items() if v}
    out[TOKEN_ENV] = token
    return out


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}
_ENV_LINE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def render_env_file(values: Mapping[str, str]) -> str:
    """The pod's secrets file: one `NAME="value"` a line, backslash, quote and line breaks escaped. The pod reads
    it back with parse_env_file (no python-dotenv on a pod)."""
    lines = ["# gpuc pod secrets: mode 600, never printed, never in argv"]
    for key, value in sorted(values.items()):
        escaped = "".join(_ESCAPES.get(c, c) for c in value)
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict[str, str]:
    """What render_env_file wrote. A line it would not write is refused by its number, never its content (a
    secret): a file gpuc did not write is not guessed at."""
    values: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _ENV_LINE.fullmatch(line.strip())
        if match is None:
            raise ConfigError(f'line {number} of the secrets file is not NAME="value"', hint="re-run `gpuc up`")
        raw = match.group(2)
        values[match.group(1)] = re.sub(r"\\(.)", lambda m: _UNESCAPES.get(m.group(1), m.group(1)), raw)
    return values
