"""What `gpuc watchdog deploy` will do, worked out from the settings before anything touches AWS: the stack,
the region, the reaper's rate, the budget parameters and the secrets the stack is given (functions/deploy.py
runs it).
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuc.core.errors import ConfigError
from gpuc.core.loopback import loopback_host
from gpuc.core.settings import SECRET_ENV, Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.functions.aws import DEFAULT_SSM_PREFIX, DEPLOY_OWN, WATCHDOG_SECRETS

DEFAULT_STACK = "gpuc-watchdog"


PUBLIC_URL = re.compile(r"https://[^\s]+")  # the template's AllowedPattern for PublicUrl


DEFAULT_REAPER_EVERY_S = 300.0


# The reaper's budget settings, as stack parameters into its environment: the Lambda has no .env, and a
# budget the laptop knows but the watchdog does not would alert and pull in nothing. "" = not set.
BUDGET_PARAMETERS = {
    "MonthlyBudget": "monthly_budget",
    "BudgetAlertFraction": "budget_alert_fraction",
    "BudgetPullInSeconds": "budget_pull_in_s",
}


ROTATE_TEXT = (
    "a NEW key (--rotate-key): a new watchdog. Pods it already knows keep pinging (their records hold their "
    "keys), but their claims and marks name the old key: if this store is ever lost they cannot prove "
    "themselves to it, and it leaves them alone (an alert a day) instead of watching them; their own agents "
    "still end them at their deadlines"
)


@dataclass
class Plan:
    region: str
    stack_name: str
    ssm_prefix: str
    provider: str
    runtime: str
    architecture: str
    secrets: list[str] = field(default_factory=list)  # the settings fields stored (never their values)
    budget: dict[str, str] = field(default_factory=dict)  # BUDGET_PARAMETERS' values, "" = not set
    public_url: str = ""  # GPUC_PUBLIC_URL; "" = the links in notifications use the ingest's Function URL
    reaper_rate: str = "rate(5 minutes)"  # the EventBridge Scheduler expression of the reaper's passes
    # Settings handed to the functions of a deployment on a local AWS emulator only (tests: the provider
    # emulator's URLs, intervals scaled to seconds); a real deployment is refused any (make_plan).
    emulated: dict[str, str] = field(default_factory=dict)
    # The watchdog's key: kept from the last deploy of this stack, so its pods' claims and marks stay
    # its own; a new one only when asked (--rotate-key) or when there is none yet (a new watchdog).
    rotate_key: bool = False
    # Pods carried in from the local watchdog (`--carry`): their env names that watchdog and no provider
    # re-marks a running pod's env, so their ids go into the new watchdog's config (SSM watchdog_carried).
    carried: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        lines = [
            f"region {self.region}, stack {self.stack_name} ({self.runtime}, {self.architecture})",
            f"S3 bucket gpuc-artifacts-<account>-{self.region}: the code zip",
            f"CloudFormation stack {self.stack_name}: DynamoDB table {self.stack_name}-watchdog "
            "(on demand, TTL), Lambda functions ingest (Function URL) and reaper "
            f"(EventBridge Scheduler), IAM roles, log groups; the reaper scans {self.provider}",
        ]
        lines += [f"SSM SecureString {self.ssm_prefix}/{name}" for name in self.secrets]
        if "s3_secret_access_key" in self.secrets:
            lines.append(
                "results grants: pods get short-lived URLs for their own run's prefix; the S3 key stays in SSM"
            )
        monthly = self.budget.get("MonthlyBudget")
        lines.append(
            f"the reaper's monthly budget: ${float(monthly):,.2f} (GPUC_MONTHLY_BUDGET)"
            if monthly
            else "the reaper's monthly budget: none (set GPUC_MONTHLY_BUDGET to have it alert and pull deadlines in)"
        )
        lines.append(f"links in notifications: {self.public_url or 'the ingest URL'} (GPUC_PUBLIC_URL)")
        lines.append(f"the reaper runs at {self.reaper_rate}")
        if self.emulated:
            lines.append("on a local AWS emulator, the functions get: " + ", ".join(sorted(self.emulated)))
        lines.append(
            f"SSM SecureString {self.ssm_prefix}/watchdog_key: "
            + (ROTATE_TEXT if self.rotate_key else "this watchdog's key, kept from the last deploy (a new one if none)")
        )
        lines.append("config.json: watchdog_url = the ingest URL, admin_token = a fresh token")
        return lines


def make_plan(
    settings: Settings,
    region: str,
    stack_name: str = DEFAULT_STACK,
    *,
    reaper_every_s: float = DEFAULT_REAPER_EVERY_S,
    emulated: Iterable[str] = (),
) -> Plan:
    if settings.provider not in ("runpod", "vast"):
        raise ConfigError(
            f"the watchdog on AWS watches runpod or vast, not {settings.provider!r}",
            hint="set GPUC_PROVIDER=runpod (or vast) and its API key, then deploy again",
        )
    if getattr(settings, f"{settings.provider}_api_key") is None:
        raise ConfigError(
            f"no API key for {settings.provider}: the reaper could not list or destroy pods",
            hint=f"set {settings.provider.upper()}_API_KEY in your environment or .env",
        )
    if not sys.platform.startswith("linux"):
        raise ConfigError(
            "the code zip vendors compiled wheels (pydantic-core), so it must be built on Linux",
            hint="run `gpuc watchdog deploy` from a Linux machine or container",
        )
    own = ("admin_token", *DEPLOY_OWN)  # made by deploy, never copied from this laptop's settings
    secrets = ["admin_token"] + [n for n in WATCHDOG_SECRETS if n not in own and getattr(settings, n) is not None]
    if settings.public_url and not PUBLIC_URL.fullmatch(settings.public_url):
        # A phone link carries a capability token: over plain http anyone on the path could tap it.
        raise ConfigError(
            f"GPUC_PUBLIC_URL must be an https:// address, not {settings.public_url!r}",
            hint="set it to the https address your phone reaches the watchdog at, or unset it to use the ingest URL",
        )
    return Plan(
        region=region,
        stack_name=stack_name,
        ssm_prefix=DEFAULT_SSM_PREFIX,
        provider=settings.provider,
        runtime=f"python{sys.version_info.major}.{sys.version_info.minor}",
        architecture="arm64" if platform.machine() in ("aarch64", "arm64") else "x86_64",
        secrets=secrets,
        budget=budget_parameters(settings),
        public_url=settings.public_url or "",
        reaper_rate=reaper_rate(reaper_every_s),
        emulated=emulated_settings(emulated, os.environ.get("AWS_ENDPOINT_URL", "")),
    )


def reaper_rate(every_s: float) -> str:
    """EventBridge Scheduler's rate expression: whole minutes, at least one ("rate(1 minute)", singular)."""
    minutes = every_s / 60
    if minutes < 1 or minutes != int(minutes):
        raise ConfigError(
            f"the reaper can run every whole minute, not every {every_s:g} s (EventBridge Scheduler's rate)",
            hint="pass --reaper-every 1m, 5m (the default) or 10m",
        )
    count = int(minutes)
    return f"rate({count} minute{'s' if count > 1 else ''})"


def emulated_settings(pairs: Iterable[str], aws_endpoint: str) -> dict[str, str]:
    """NAME=VALUE settings for the functions of a deployment on a loopback AWS emulator, and only there: a
    real watchdog pointed at an emulator's URLs would watch nothing real. Never a secret (SSM holds those)."""
    chosen = dict(pair.partition("=")[::2] for pair in pairs)
    if not chosen:
        return {}
    if not loopback_host(aws_endpoint):
        raise ConfigError(
            "settings for an emulated deployment are refused for a real one (AWS_ENDPOINT_URL is not loopback)",
            hint="drop them: a real watchdog reads the providers' real APIs",
        )
    for name in chosen:
        if not name.startswith("GPUC_") or name in SECRET_ENV.values():
            raise ConfigError(f"{name} cannot be handed to the functions", hint="only non-secret GPUC_ settings")
    return chosen


def budget_parameters(settings: Settings) -> dict[str, str]:
    values = {name: getattr(settings, field) for name, field in BUDGET_PARAMETERS.items()}
    # Plain decimals: the template's AllowedPattern takes no exponent (repr(1e20) is "1e+20").
    return {name: "" if v is None else f"{float(v):.6f}".rstrip("0").rstrip(".") for name, v in values.items()}


def secret_values(settings: Settings, plan: Plan, admin_token: str) -> dict[str, str]:
    values = {"admin_token": admin_token}
    for name in plan.secrets[1:]:
        value = getattr(settings, name)
        values[name] = value.get_secret_value() if isinstance(value, SecretStr) else str(value)
    return values
