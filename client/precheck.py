"""What `up` checks before a create call spends money, and the price it shows before asking.

Each refusal here costs nothing; the same problem found after the create costs a pod that is created,
billed, then destroyed (or worse, left running without a watchdog that can hear it):

- the provider key is set (a rented provider);
- the ssh key `up` logs in with exists (a rented pod is reached over ssh, key auth only);
- the watchdog's URL is one a rented pod can reach: a loopback URL is this laptop, so the pod's heartbeats
  would never arrive and the reaper would count it silent from its first minute;
- the GPU name picks one card at the provider (core/catalog.py; an ambiguous name lists the choices);
- the provider can rent what is asked (RunPod no longer rents interruptible pods);
- `--max-hours` is within the user's cap (max_lifetime_hours): no deadline may lie past it.

Then `quote` reads the price (the offer `up` will rent, or the provider's listed price) and `confirm`
prints it with the most the pod can cost (--max-hours x price) and when its deadline ends it, asking on a
terminal. The deadline is gpuc's own, on every provider: the pod's agent and the watchdog each end the pod
then. No provider-side limit is counted on (RunPod's terminateAfter is sent, and was never enforced).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpuc.client import gpunames
from gpuc.client.deps import Deps
from gpuc.client.human import clock_utc
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
    check_max_hours(deps.settings, opts.max_hours)
    if opts.provider in RENTED:
        check_provider_key(deps.settings, opts.provider)
        check_ssh_key(deps.settings)
        check_watchdog_reachable(deps.settings)
    return gpunames.resolve(opts.provider, opts.gpu)


def check_max_hours(settings: Settings, max_hours: float) -> None:
    cap = settings.max_lifetime_hours
    if not 0 < max_hours <= cap:
        raise ConfigError(
            f"--max-hours {max_hours:g} is not within 0 < h <= {cap:g} (your cap, GPUC_MAX_LIFETIME_HOURS): "
            "the pod's deadline may not lie past it",
            hint=f"ask for at most --max-hours {cap:g} (extend a running pod with `gpuc extend POD 2h`), or "
            "raise GPUC_MAX_LIFETIME_HOURS here and on the watchdog",
        )


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


def cost_line(q: Quote, opts: UpOptions, gpu: str, now: float) -> str:
    """The price and the most the pod can cost: true on every provider, because the bound is gpuc's own
    deadline (the pod's agent and the watchdog), never a provider field."""
    what = f"{gpu} x{opts.gpu_count}" if opts.gpu_count > 1 else gpu
    ends = f"--max-hours {opts.max_hours:g}, ends at {clock_utc(now + opts.max_hours * 3600, now)}"
    held = "enforced by the pod's agent and the watchdog"
    if q.price_per_hour is None:
        return f"price: unknown ({q.source}) for {what}; no price to bound; it ends by its deadline ({ends}), {held}"
    price = f"${q.price_per_hour:.3f}/h for {what} ({q.source})"
    most = q.price_per_hour * opts.max_hours
    return f"price: {price}; at most ${most:.2f} by the deadline ({ends}), {held}"


def confirm(q: Quote, opts: UpOptions, gpu: str, deps: Deps, ask: Confirm | None) -> bool:
    """Print the price; ask when `ask` is given (the CLI gives one only on a terminal without -y)."""
    deps.echo(cost_line(q, opts, gpu, deps.clock.now()))
    if ask is None:
        return True
    return ask(f"create {opts.experiment} on {opts.provider}?")
