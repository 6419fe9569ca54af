"""What `up` checks before a create call spends money, and the price it shows before asking.

Each refusal here costs nothing; the same problem found after the create costs a pod that is created,
billed, then destroyed (or worse, left running without a watchdog that can hear it):

- the provider key is set (a rented provider);
- the ssh key `up` logs in with exists (a rented pod is reached over ssh, key auth only);
- the watchdog's URL is one a rented pod can reach: a loopback URL is this laptop, so the pod's heartbeats
  would never arrive and the reaper would count it silent from its first minute;
- the GPU name picks one card at the provider (core/catalog.py; an ambiguous name lists the choices);
- the provider can rent what is asked (RunPod no longer rents interruptible pods);
- the secrets for the pod are an allowlist (core/podsecrets.py): their names are printed, a forbidden
  name in GPUC_POD_SECRETS is refused, results keys that also deploy the watchdog are warned about.

Then `quote` reads the price (the offer `up` will rent, or the provider's listed price) and `confirm`
prints it with the most the pod can cost (--max-hours x price), asking on a terminal.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpuc.client import gpunames
from gpuc.client.deps import Deps
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.settings import Settings

if TYPE_CHECKING:
    from gpuc.client.podlife import UpOptions
    from gpuc.core.models import PodSpec
    from gpuc.core.providers.base import Provider

RENTED = ("runpod", "vast")
KEY_ENV = {"runpod": ("runpod_api_key", "RUNPOD_API_KEY"), "vast": ("vast_api_key", "VAST_API_KEY")}
Confirm = Callable[[str], bool]


def before_create(opts: UpOptions, deps: Deps) -> str:
    """Every check that needs no provider call; the GPU name as the provider spells it."""
    if opts.provider in RENTED:
        check_provider_key(deps.settings, opts.provider)
        check_ssh_key(deps.settings)
        check_watchdog_reachable(deps.settings)
    return gpunames.resolve(opts.provider, opts.gpu)


def check_provider_key(settings: Settings, provider: str) -> None:
    field, env = KEY_ENV[provider]
    value = getattr(settings, field)
    if value is None or not value.get_secret_value():
        raise ConfigError(
            f"no {provider} API key: nothing can be rented there",
            hint=f"add {env}=... to {settings.env_file} (chmod 600), or export {env}",
        )


def check_ssh_key(settings: Settings) -> None:
    key = settings.ssh_key_path.expanduser()
    if not key.is_file():
        raise ConfigError(
            f"no ssh key at {key}: `up` reaches a rented pod over ssh (keys only)",
            hint=f"ssh-keygen -t ed25519 -f {key}, add {key}.pub to your provider account's SSH keys; "
            "or point GPUC_SSH_KEY_PATH at your key",
        )


def loopback_host(url: str) -> str | None:
    """The host when `url` names this machine only (localhost, 127.0.0.0/8, ::1, 0.0.0.0), else None."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return host if address.is_loopback or address.is_unspecified else None


def check_watchdog_reachable(settings: Settings) -> None:
    # A loopback sandbox pod (tests, the remote demo) runs on this machine: the loopback URL reaches it.
    if settings.ssh_sandbox_root is not None:
        return
    host = loopback_host(settings.functions_url)
    if host is None:
        return
    raise ConfigError(
        f"the watchdog at {settings.functions_url} is this machine's loopback: a rented pod cannot reach it "
        "(its heartbeats would never arrive)",
        hint="deploy the watchdog (`gpuc watchdog deploy` sets GPUC_FUNCTIONS_URL), or expose this one "
        "(`gpuc watchdog serve --host 0.0.0.0`, behind a tunnel) and set GPUC_FUNCTIONS_URL to its public URL",
    )


def check_rentable(provider: Provider, opts: UpOptions) -> None:
    if opts.interruptible and not provider.supports_interruptible:
        raise ConfigError(
            f"{provider.name} cannot rent interruptible pods through its public API",
            hint="rent on-demand (drop --interruptible), or use Vast (`gpuc offers --interruptible`)",
        )


@dataclass(frozen=True)
class Quote:
    price_per_hour: float | None  # the whole pod, every GPU
    source: str  # where the price comes from, in words
    offer_id: str | None = None  # Vast: the offer priced, which `up` then rents (not a cheaper one found later)


def quote(provider: Provider, spec: PodSpec, opts: UpOptions, deps: Deps) -> Quote:
    """The price `up` expects to pay per hour; None when no one can say (then it is said so)."""
    if opts.price_per_hour is not None:
        return Quote(opts.price_per_hour, "--price")
    if opts.provider == "local":
        return Quote(deps.settings.local_price_per_hour, "simulated")
    if opts.offer_id:
        return Quote(None, f"offer {opts.offer_id}'s own")
    try:
        return _listed(provider, spec, opts)
    except GpucError as exc:
        deps.echo(f"  price: could not read {opts.provider}'s offers ({exc.message}); the pod records its own")
        return Quote(None, "unknown")


def _listed(provider: Provider, spec: PodSpec, opts: UpOptions) -> Quote:
    from gpuc.core.providers.vast import VastProvider  # a rented provider: its client is loaded already

    if isinstance(provider, VastProvider):
        found = provider.offers(spec.gpu_type, spec.interruptible, num_gpus=spec.gpu_count)
        if not found:
            return Quote(None, "no offer passes the filters")  # create says so, with the fix
        best = found[0]
        if spec.interruptible:
            if spec.bid_per_gpu:
                return Quote(spec.bid_per_gpu * spec.gpu_count, f"your bid, offer {best.id}", best.id)
            # No bid given: the provider bids from the offer's floor itself; nothing to pin.
            return Quote(None, f"a bid above offer {best.id}'s min_bid")
        return Quote(best.price_per_hour, f"offer {best.id}, the cheapest passing the filters", best.id)
    offers = [o for o in provider.offers(spec.gpu_type, False) if o.id == spec.gpu_type]
    if not offers:
        return Quote(None, "not listed")
    return Quote(offers[0].price_per_hour * spec.gpu_count, f"{opts.provider}'s listed price")


def cost_line(q: Quote, opts: UpOptions, gpu: str) -> str:
    what = f"{gpu} x{opts.gpu_count}" if opts.gpu_count > 1 else gpu
    hours = f"{opts.max_hours:g} h"
    if q.price_per_hour is None:
        limit = f"{opts.provider} ends it after {hours}" if opts.provider == "runpod" else "no price to bound"
        return f"price: unknown ({q.source}) for {what}; {limit}"
    price = f"${q.price_per_hour:.3f}/h for {what} ({q.source})"
    most = q.price_per_hour * opts.max_hours
    if opts.provider == "runpod":
        return f"price: {price}; at most ${most:.2f} (--max-hours {opts.max_hours:g}: RunPod ends it then)"
    if opts.provider == "vast":
        return (
            f"price: {price}; ${most:.2f} over --max-hours {opts.max_hours:g}, but Vast has no provider-side "
            "limit: the idle watch and the watchdog end it"
        )
    return f"price: {price}; at most ${most:.2f} over --max-hours {opts.max_hours:g}"


def confirm(q: Quote, opts: UpOptions, gpu: str, deps: Deps, ask: Confirm | None) -> bool:
    """Print the price; ask when `ask` is given (the CLI gives one only on a terminal without -y)."""
    deps.echo(cost_line(q, opts, gpu))
    if ask is None:
        return True
    return ask(f"create {opts.experiment} on {opts.provider}?")


# -- what leaves the laptop for the pod (issue 17.4) -------------------------------------------------
def pod_secrets(settings: Settings, env_file: Mapping[str, str], deps: Deps, environ: Mapping[str, str] | None = None
                ) -> dict[str, str]:
    """The allowlist for the pod (core.podsecrets), its names printed (never the values), and a warning
    when the results keys are the ones that deploy the watchdog. A forbidden name refuses `up` here."""
    from gpuc.core.podconfig import choose_pod_secrets  # pydantic: `up` loads it anyway

    env = os.environ if environ is None else environ
    chosen = choose_pod_secrets(settings, env_file, env)
    deps.echo(chosen.names_line())
    for warning in chosen.warnings():
        deps.echo(warning)
    same = deploy_key_source(chosen.values, env_file, env)
    if same is not None:
        deps.echo(
            f"warning: the results keys (GPUC_S3_ACCESS_KEY_ID) are the AWS keys that deploy the watchdog ({same}):"
            " the pod, on someone else's machine, would hold the keys to your watchdog. Give the pod a key for the"
            " results bucket only, in GPUC_S3_ACCESS_KEY_ID / GPUC_S3_SECRET_ACCESS_KEY"
        )
    return chosen.values


def deploy_key_source(
    sent: Mapping[str, str], env_file: Mapping[str, str], environ: Mapping[str, str]
) -> str | None:
    """Where the deploy keys equal to the results keys sent to the pod were found, or None. The deploy
    keys are what boto3 would use for `gpuc watchdog deploy`: AWS_* in the environment (or in .env), else
    the shared credentials file's profile."""
    from gpuc.core.podsecrets import DEPLOY_KEYS, S3_KEYS

    sent_pair = {sent.get(S3_KEYS[0]), sent.get(S3_KEYS[1])} - {None, ""}
    if not sent_pair:
        return None
    for where, source in (("in the environment", environ), ("in .env", env_file)):
        if sent_pair & {source.get(DEPLOY_KEYS[0]), source.get(DEPLOY_KEYS[1])}:
            return f"AWS_ACCESS_KEY_ID {where}"
    path, profile, deploy = shared_credentials(environ)
    if sent_pair & deploy:
        return f"profile [{profile}] of {path}"
    return None


def shared_credentials(environ: Mapping[str, str]) -> tuple[Path, str, set[str]]:
    """The AWS shared credentials file boto3 reads, the profile it picks, and that profile's key id and
    secret (empty when there is none)."""
    import configparser

    path = Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials").expanduser()
    profile = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return path, profile, set()
    if not parser.has_section(profile):
        return path, profile, set()
    section = parser[profile]
    return path, profile, {v for v in (section.get("aws_access_key_id"), section.get("aws_secret_access_key")) if v}
