"""What `up` is asked to do (UpOptions), what it checks before a create call spends money, and the price it
shows before asking.

Each refusal here costs nothing; the same problem found after the create costs a pod that is created,
billed, then destroyed (or worse, left running without a watchdog that can hear it):

- the provider key is set (a rented provider);
- the ssh key `up` logs in with exists (a rented pod is reached over ssh, key auth only);
- the watchdog's URL is one a rented pod can reach: a loopback URL is this laptop, so the pod's heartbeats
  would never arrive and the reaper would count it silent from its first minute;
- the GPU name picks one card at the provider (core/catalog.py; an ambiguous name lists the choices);
- the provider can rent what is asked (RunPod no longer rents interruptible pods, nor a volume under 10 GB:
  `Provider.check_spec`), and the pod gets the key `up` logs in with where the provider needs it handed over
  (RunPod: `startSsh` alone gives a pod only the account's registered keys, none on a new account); whether
  the account has that key registered is said, never refused (client/onpod/keys.py);
- a Vast bid clears the floor (`min_bid`) of the offer it rents (`quote`: the first offer passing the
  filters whose floor it clears, or the offer `--offer` names): Vast refuses one under it, and the fix
  names the floor and `gpuc offers --interruptible`;
- the watchdog runs a gpuc that takes this pod's heartbeats (check_protocol): an older watchdog refuses a
  field it does not know with a 4xx, the pod counts as silent, and is destroyed with its job;
- an s3:// destination is one the watchdog holds the key for and signs for the same endpoint
  (check_results_grant): the pod holds no key, and its results go only where the watchdog grants;
- `--max-hours` is within the user's cap (max_lifetime_hours): no deadline may lie past it.
- the secrets for the pod are an allowlist (core/podsecrets.py): their names are printed, a forbidden
  name in GPUC_POD_SECRETS is refused, a value sent that also deploys the watchdog is warned about.

Then `quote` reads the price (the offer `up` will rent, or the provider's listed price), `check_budget`
(client/pods/budgetcheck.py) refuses a pod whose worst case (price x --max-hours) would cross the month's
budget, counted with the month's spend AND the worst case of every pod still running or kept (core/budget.py's
one rule), and `confirm` prints the price with the most the pod can cost and when its deadline ends it, asking
on a terminal.
The deadline is gpuc's own, on every provider: the pod's agent and the watchdog each end the pod
then. No provider-side limit is counted on (RunPod's terminateAfter is sent, and was never enforced).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gpuc.client.context import Ctx
from gpuc.client.text import clock_utc, short_span
from gpuc.core import gpunames
from gpuc.core.budget import RunEnvelope, usd
from gpuc.core.clock import hours_text, parse_duration
from gpuc.core.destcheck import require_destination
from gpuc.core.envfile import env_file_mode_ok, read_env_file
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.loopback import loopback_host
from gpuc.core.settings import Settings

if TYPE_CHECKING:
    from gpuc.client.onpod.upload import Bundle
    from gpuc.core.api import StatusResponse
    from gpuc.core.models import PodSpec
    from gpuc.core.providers.base import Provider

RENTED = ("runpod", "vast")
# A rented pod's boot before its job can start (image pull, ssh, upload, bootstrap): a deadline shorter than
# this plus the agent's lead (it ends the pod deadline_lead_s early, results/ first) leaves the job nothing.
RENTED_BOOT_S = 5 * 60.0
KEY_ENV = {"runpod": ("runpod_api_key", "RUNPOD_API_KEY"), "vast": ("vast_api_key", "VAST_API_KEY")}
Confirm = Callable[[str], bool]


@dataclass
class UpOptions:
    experiment: str
    provider: str = "local"
    gpu: str = "RTX 4090"
    gpu_count: int = 1
    price_per_hour: float | None = None
    max_hours: float = 12.0
    interruptible: bool = False
    bid: float | None = None
    offer_id: str | None = None
    image: str | None = None
    volume_gb: int | None = None  # `up --volume-gb`: the pod's persistent volume (PodSpec's default when None)
    command: list[str] = field(default_factory=list)
    wait_timeout_s: float = 600.0
    dry_run: bool = False
    upload: Bundle | None = None  # the project for the pod's workspace (onpod/upload.py), measured before the create
    job_id: str | None = None  # the command's id: its outcome names it (client/jobs/follow.py)
    # Asked with the price before the create (the CLI passes one on a terminal without -y); None: not asked.
    confirm: Callable[[str], bool] | None = None
    over_budget: bool = False  # rent even if the month's budget would be crossed (client/pods/plan.py)
    note: str | None = None  # `up --note`: on the ledger row from its start (core.ledger.rows.check_note)
    warm_s: float = 0.0  # `up --warm`: a job's end keeps the pod; idle this long, it ends (instance_side/idle.py)
    # `up --warm` without --max-hours: each job's allowance; the deadline follows the jobs (client/pods/warm.py).
    # 0: the deadline is fixed (--max-hours, or not warm).
    warm_job_s: float = 0.0
    env_names: tuple[str, ...] = ()  # `--env NAME`: to the job through the pod's secrets file (core.podsecrets)
    # `--recover N`: after an outbid the watchdog re-rents and resumes the run up to N times, inside the run's one
    # envelope (client/pods/recovery/prepare.py); 0: none. `--recover-on-demand`: the last recovery rents on-demand.
    recover: int = 0
    recover_on_demand: bool = False
    # `--wait`: the command hands the job back to be followed (client/pods/jobline.py); `--timeout`: for how long.
    wait: bool = False
    follow_timeout_s: float | None = None


# -- checks before money is spent, with no provider call --------------------------------------------
def check_experiment(name: str | None) -> str:
    if not name:
        raise ConfigError("an experiment name is required", hint="gpuc up NAME (e.g. gpuc up lora-sweep-3)")
    from gpuc.core.models import EXPERIMENT_RE  # pydantic: `up` loads it anyway

    if not EXPERIMENT_RE.match(name):
        raise ConfigError(
            f"experiment name {name!r} is not valid",
            hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def check_env_file(settings: Settings, provider: str) -> dict[str, str]:
    """The user's `.env` (the pod gets only its allowlist: plan.pod_secrets). It must be mode 600;
    rented pods need it to exist."""
    path = settings.env_file
    if not path.exists():
        if provider == "local":
            return {}
        raise ConfigError(f"{path} does not exist", hint=f"create it with your secrets, then: chmod 600 {path}")
    if not env_file_mode_ok(path):
        raise ConfigError(f"{path} is readable by other users", hint=f"chmod 600 {path}")
    return read_env_file(path)


def before_create(opts: UpOptions, ctx: Ctx) -> str:
    """Every check that needs no provider call; the GPU name as the provider spells it."""
    check_max_hours(ctx.settings, opts.max_hours, opts.provider)
    if opts.provider in RENTED:
        check_provider_key(ctx.settings, opts.provider)
        check_ssh_key(ctx.settings)
        check_watchdog_reachable(ctx.settings)
        require_destination(ctx.settings, opts.experiment, ctx.echo)  # nowhere to sync: KEPT, billing
    return gpunames.resolve(opts.provider, opts.gpu)


def parse_max_hours(text: str) -> float:
    """`--max-hours`: a bare number is hours (as always); a duration takes units like every other time
    (`5m`, `2h`, `1h30m`)."""
    try:
        return float(text)
    except ValueError:
        return parse_duration(text) / 3600


def boot_s(settings: Settings, provider: str) -> float:
    return settings.local_boot_s if provider not in RENTED else RENTED_BOOT_S


def check_max_hours(settings: Settings, max_hours: float, provider: str = "local") -> None:
    cap = settings.max_lifetime_hours
    if not 0 < max_hours <= cap:
        raise ConfigError(
            f"--max-hours {max_hours:g} is not within 0 < h <= {cap:g} (your cap, GPUC_MAX_LIFETIME_HOURS): "
            "the pod's deadline may not lie past it",
            hint=f"ask for at most --max-hours {cap:g} (extend a running pod with `gpuc extend POD 2h`), or "
            "raise GPUC_MAX_LIFETIME_HOURS here and on the watchdog",
        )
    # The agent starts the ending deadline_lead_s early: a deadline inside lead + boot gives the job nothing.
    least_s = settings.deadline_lead_s + boot_s(settings, provider)
    if max_hours * 3600 < least_s:
        least = f"{math.ceil(least_s / 60)}m"
        raise ConfigError(
            f"--max-hours {short_span(max_hours * 3600)} is shorter than the pod's boot on {provider}"
            f" (~{short_span(boot_s(settings, provider))}) plus the {short_span(settings.deadline_lead_s)} its"
            " agent ends it early to sync results/ (GPUC_DEADLINE_LEAD_S): the job would get no time",
            hint=f"ask for at least --max-hours {least} (e.g. --max-hours {least})",
        )


def check_provider_key(settings: Settings, provider: str) -> None:
    name, env = KEY_ENV[provider]
    value = getattr(settings, name)
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


def check_watchdog_reachable(settings: Settings) -> None:
    # A loopback sandbox pod (tests, the remote demo) runs on this machine: the loopback URL reaches it.
    if settings.ssh_sandbox_root is not None:
        return
    host = loopback_host(settings.watchdog_url)
    if host is None:
        return
    raise ConfigError(
        f"the watchdog at {settings.watchdog_url} is this machine's loopback: a rented pod cannot reach it "
        "(its heartbeats would never arrive)",
        hint="deploy the watchdog (`gpuc watchdog deploy` sets GPUC_WATCHDOG_URL), or run `gpuc watchdog serve` "
        "on an always-on machine with TLS in front and set GPUC_WATCHDOG_URL=https://<its name> (README: Your "
        "first rental, step 4)",
    )


def check_protocol(status: StatusResponse, settings: Settings) -> None:
    """The pod runs this gpuc and sends what it knows; a watchdog from an older gpuc refuses what it does not."""
    from gpuc.core.api import WIRE_PROTOCOL  # only `up` asks; plan.py is read by every command's help

    if status.protocol >= WIRE_PROTOCOL:
        return
    said = f"protocol {status.protocol}" if status.protocol else "no protocol"
    raise ConfigError(
        f"the watchdog at {settings.watchdog_url} runs an older gpuc ({said}, this gpuc needs {WIRE_PROTOCOL}): "
        "it would refuse this pod's heartbeats, and a pod it does not hear is destroyed; nothing was created",
        hint="redeploy it (`gpuc watchdog deploy`) or restart `gpuc watchdog serve` with this gpuc, then `gpuc up` "
        "again",
    )


def results_prefix(settings: Settings, experiment: str, run_id: str) -> str | None:
    """The run's own prefix at an s3:// destination (RegisterRequest.results_at): all its pods' grants reach."""
    from gpuc.core.destinations import S3Location

    bucket = settings.results_bucket or ""
    return S3Location.parse(bucket).run_url(experiment, run_id) if bucket.startswith("s3://") else None


def check_results_grant(status: StatusResponse, settings: Settings) -> None:
    """An s3:// destination: the pod holds no key, the watchdog grants it its run's prefix. So the watchdog must
    hold the key for this bucket and sign for the endpoint this laptop reads, or the results go nowhere."""
    from gpuc.core.api import RESULTS_AT_MAX
    from gpuc.core.destinations import GRANT_KEY_HINT, S3Location

    bucket = settings.results_bucket or ""
    if not bucket.startswith("s3://"):
        return
    here = S3Location.parse(bucket)
    longest = here.run_url("e" * 64, "r" * 41)  # the longest experiment and run id (core.models)
    if len(longest) > RESULTS_AT_MAX or not (longest.isascii() and longest.isprintable()):
        raise ConfigError(
            f"GPUC_RESULTS_BUCKET={bucket} is too long or not plain ASCII for a pod's grant (at most "
            f"{RESULTS_AT_MAX} characters with the experiment and run id; it rides in the pod's signed claim)",
            hint="use a shorter, ASCII prefix",
        )
    scope = status.results_grant
    where = f"the watchdog at {settings.watchdog_url}"
    if scope is None:
        raise ConfigError(
            f"{where} holds no key for {bucket}; a pod holds none either (it gets short-lived URLs for its own run's "
            "prefix from the watchdog), so its results could not be sent; nothing was created",
            hint=GRANT_KEY_HINT,
        )
    granted = S3Location.parse(scope.bucket)
    inside = not granted.prefix or here.prefix == granted.prefix or here.prefix.startswith(granted.prefix + "/")
    if granted.bucket != here.bucket or not inside:
        raise ConfigError(
            f"{where} grants pods prefixes in {scope.bucket} only, not in {bucket}; nothing was created",
            hint=f"set GPUC_RESULTS_BUCKET inside {scope.bucket}, or {GRANT_KEY_HINT}",
        )
    if (scope.endpoint_url or "").rstrip("/") != (settings.s3_endpoint_url or "").rstrip("/"):
        theirs, ours = scope.endpoint_url or "AWS S3", settings.s3_endpoint_url or "AWS S3"
        raise ConfigError(
            f"{where} signs for {theirs}, but this laptop reads results at {ours}: the pod's results would land "
            "where you do not look; nothing was created",
            hint=f"set the same GPUC_S3_ENDPOINT_URL on both: {GRANT_KEY_HINT}",
        )


def check_rentable(provider: Provider, opts: UpOptions) -> None:
    if opts.interruptible and not provider.supports_interruptible:
        raise ConfigError(
            f"{provider.name} cannot rent interruptible pods through its public API",
            hint="rent on-demand (drop --interruptible), or use Vast (`gpuc offers --interruptible`)",
        )


def prepare_spec(provider: Provider, spec: PodSpec, ctx: Ctx) -> PodSpec:
    """Before any money: what the provider would refuse of the spec (a RunPod volume under 10 GB), the key the
    pod is handed where the provider needs it (RunPod), and a warning when the account does not have that key
    registered (the rental still works: gpuc hands the key over itself)."""
    provider.check_spec(spec)
    if not provider.takes_public_key:
        return spec
    from gpuc.client.onpod.keys import key_standing, public_key_path, read_public_key

    key = read_public_key(ctx.settings)
    standing = key_standing(provider, key, str(public_key_path(ctx.settings)))
    if standing is not None and standing.status != "ok":
        ctx.echo(f"warning: ssh: {standing.detail}" + (f" (fix: {standing.fix})" if standing.fix else ""))
    return spec.model_copy(update={"ssh_public_key": key})


@dataclass(frozen=True)
class Quote:
    price_per_hour: float | None  # the whole pod, every GPU
    source: str  # where the price comes from, in words
    offer_id: str | None = None  # Vast: the offer priced, which `up` then rents (not a cheaper one found later)
    # `--recover N`: the run's one envelope across its attempts (client/pods/recovery/prepare.py); it, not price x
    # hours, is what the budget checks and the confirmation shows
    envelope: RunEnvelope | None = None

    def worst_usd(self, max_hours: float) -> float | None:
        """The most the run can cost: its envelope, or price x --max-hours (None: no price, no bound)."""
        if self.envelope is not None:
            return self.envelope.usd
        return None if self.price_per_hour is None else self.price_per_hour * max_hours


def quote(provider: Provider, spec: PodSpec, opts: UpOptions, ctx: Ctx, envelope: RunEnvelope | None = None) -> Quote:
    """The price `up` expects to pay per hour (None when no one can say: then it is said so), and with
    --recover the run's envelope (client/pods/recovery/prepare.py envelope_of)."""
    return replace(_quote(provider, spec, opts, ctx), envelope=envelope)


def _quote(provider: Provider, spec: PodSpec, opts: UpOptions, ctx: Ctx) -> Quote:
    if opts.price_per_hour is not None:
        return Quote(opts.price_per_hour, "--price")
    if opts.provider == "local":
        return Quote(ctx.settings.local_price_per_hour, "simulated")
    try:
        return _named(provider, spec, opts) if opts.offer_id else _listed(provider, spec, opts)
    except ConfigError:
        raise  # the user's own ask refused (a bid under every floor, a count past the largest pod): never "unknown"
    except GpucError as exc:
        ctx.echo(f"  price: could not read {opts.provider}'s offers ({exc.message}); the pod records its own")
        return Quote(None, "unknown")


def _named(provider: Provider, spec: PodSpec, opts: UpOptions) -> Quote:
    """`--offer ID`: its own price, unknown here; a bid on it is the price, once it clears the offer's floor."""
    from gpuc.core.providers.vast import VastProvider
    from gpuc.core.providers.vast_offers import offer_for_bid  # a rented provider: loaded already

    own = Quote(None, f"offer {opts.offer_id}'s own")
    if not (isinstance(provider, VastProvider) and opts.offer_id and spec.interruptible and spec.bid_per_gpu):
        return own
    found = provider.offer(opts.offer_id, interruptible=True)
    if found is None:
        return own  # not offered now: the create is refused, renting nothing, and says so
    offer_for_bid([found], spec.bid_per_gpu, spec.gpu_type, spec.gpu_count, named=True)
    return Quote(spec.bid_per_gpu * spec.gpu_count, f"your bid, offer {found.id}", found.id)


def _listed(provider: Provider, spec: PodSpec, opts: UpOptions) -> Quote:
    from gpuc.core.providers.vast import VastProvider
    from gpuc.core.providers.vast_offers import offer_for_bid  # a rented provider: loaded already

    if isinstance(provider, VastProvider):
        # Priced with the disk the create will ask for (`up --volume-gb`; Vast's one disk), not a default 30 GB.
        disk = float(max(spec.volume_gb, spec.container_disk_gb))
        found = provider.offers(spec.gpu_type, spec.interruptible, num_gpus=spec.gpu_count, allocated_storage_gb=disk)
        if not found:
            return Quote(None, "no offer passes the filters")  # create says so, with the fix
        best = found[0]
        if spec.interruptible:
            if spec.bid_per_gpu:
                # The first offer the bid clears; under every floor, refused here with the floor and the fix.
                best = offer_for_bid(found, spec.bid_per_gpu, spec.gpu_type, spec.gpu_count)
                return Quote(spec.bid_per_gpu * spec.gpu_count, f"your bid, offer {best.id}", best.id)
            # No bid given: the provider bids from the offer's floor itself; nothing to pin.
            return Quote(None, f"a bid above offer {best.id}'s min_bid")
        return Quote(best.price_per_hour, f"offer {best.id}, the cheapest passing the filters", best.id)
    from gpuc.core.providers.runpod import RunPodProvider

    if isinstance(provider, RunPodProvider):
        # The catalog read for this many GPUs: its stock for one says nothing of four on one machine.
        offer = provider.pod_offer(spec.gpu_type, spec.gpu_count)
        many = f"{spec.gpu_count} GPU{'s' if spec.gpu_count > 1 else ''}"
        stock = f"; stock for {many}: {offer.stock}" if offer.stock else ""
        if offer.stock == "None":
            stock += " (RunPod lists none free now: the create may be refused, at no cost)"
        return Quote(offer.price_per_hour, f"{opts.provider}'s listed price{stock}")
    offers = [o for o in provider.offers(spec.gpu_type, False) if o.id == spec.gpu_type]
    if not offers:
        return Quote(None, "not listed")
    return Quote(offers[0].price_per_hour * spec.gpu_count, f"{opts.provider}'s listed price")


def cost_line(q: Quote, opts: UpOptions, gpu: str, now: float) -> str:
    """The price and the most the pod can cost: true on every provider, because the bound is gpuc's own
    deadline (the pod's agent and the watchdog), never a provider field."""
    what = f"{gpu} x{opts.gpu_count}" if opts.gpu_count > 1 else gpu
    if opts.warm_job_s and q.envelope is None:
        return warm_cost_line(q, opts, what, now)
    ends = f"--max-hours {hours_text(opts.max_hours)}, ends at {clock_utc(now + opts.max_hours * 3600, now)}"
    held = "enforced by the pod's agent and the watchdog"
    if q.envelope is not None:
        price = "unknown" if q.price_per_hour is None else f"${q.price_per_hour:.3f}/h"
        return f"price: {price} for {what} ({q.source}); {q.envelope.line(opts.recover)}; it ends by {ends}, {held}"
    if q.price_per_hour is None:
        return f"price: unknown ({q.source}) for {what}; no price to bound; it ends by its deadline ({ends}), {held}"
    price = f"${q.price_per_hour:.3f}/h for {what} ({q.source})"
    most = q.price_per_hour * opts.max_hours
    return f"price: {price}; at most ${most:.2f} by the deadline ({ends}), {held}"


def warm_cost_line(q: Quote, opts: UpOptions, what: str, now: float) -> str:
    """`up`'s price line for a warm pod whose deadline follows its jobs: what the budget holds for it."""
    ends = clock_utc(now + opts.max_hours * 3600, now)
    job, warm = short_span(opts.warm_job_s), short_span(opts.warm_s)
    rule = (
        f"one job of up to {job} (GPUC_WARM_JOB_HOURS) and its {warm} warm time, to its deadline at {ends}; each"
        " `gpuc run` moves the deadline to as much after its start (--max-hours fixes it instead); enforced by the"
        " pod's agent and the watchdog"
    )
    if q.price_per_hour is None:
        return f"price: unknown ({q.source}) for {what}; no price to bound; warm pod: {rule}"
    most = usd(q.price_per_hour * opts.max_hours)
    return f"price: ${q.price_per_hour:.3f}/h for {what} ({q.source}); warm pod: the budget holds {most} for it, {rule}"


def confirm(q: Quote, opts: UpOptions, gpu: str, ctx: Ctx, ask: Confirm | None) -> bool:
    """Print the price; ask when `ask` is given (the CLI gives one only on a terminal without -y)."""
    ctx.echo(cost_line(q, opts, gpu, ctx.clock.now()))
    if ask is None:
        return True
    return ask(f"create {opts.experiment} on {opts.provider}?")
