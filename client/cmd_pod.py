"""`gpuc up / run / down / ls / keep`."""

from __future__ import annotations

import re

import click

from gpuc.client import podlife
from gpuc.core.errors import ConfigError
from gpuc.core.settings import load_settings

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise ConfigError(f"duration {text!r} is not valid", hint="use a number and a unit: 90s, 30m, 2h, 1d")
    return float(match.group(1)) * _UNITS[match.group(2)]


@click.command(context_settings={"ignore_unknown_options": False})
@click.argument("experiment", required=False)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--provider", "-p", default=None, help="local (default), runpod or vast.")
@click.option("--gpu", default="RTX 4090", show_default=True, help="GPU type to rent.")
@click.option("--gpus", "gpu_count", default=1, show_default=True, type=click.IntRange(1, 8))
@click.option("--price", type=float, default=None, help="Price per hour, when the offer does not say.")
@click.option(
    "--max-hours", type=float, default=None, help="Provider-side hard limit (RunPod terminateAfter)."
)
@click.option("--interruptible", is_flag=True, help="Rent interruptible (spot) with --bid.")
@click.option("--bid", type=float, default=None, help="Bid per GPU-hour for an interruptible pod.")
@click.option("--offer", "offer_id", default=None, help="Rent exactly this offer id (see gpuc offers).")
@click.option("--image", default=None, help="Container image.")
@click.option(
    "--wait", "wait_s", type=float, default=0, help="With a command: wait up to N s for the pod to end."
)
@click.option("--dry-run", is_flag=True, help="Print each step; create nothing.")
def up(
    experiment: str | None,
    command: tuple[str, ...],
    provider: str | None,
    gpu: str,
    gpu_count: int,
    price: float | None,
    max_hours: float | None,
    interruptible: bool,
    bid: float | None,
    offer_id: str | None,
    image: str | None,
    wait_s: float,
    dry_run: bool,
) -> None:
    """Start a pod for EXPERIMENT; with `-- COMMAND`, run it under the wrapper.

    The pod is registered with the watchdog, its ledger row opened, the agent started first;
    when the command exits the pod syncs results, notifies you and destroys itself.
    """
    settings = load_settings()
    podlife.check_experiment(experiment)
    assert experiment is not None
    if interruptible and bid is None and provider not in (None, "local"):
        raise ConfigError(
            "--interruptible needs --bid", hint="see `gpuc offers --interruptible` for min bids"
        )
    opts = podlife.UpOptions(
        experiment=experiment,
        provider=provider or settings.provider,
        gpu=gpu,
        gpu_count=gpu_count,
        price_per_hour=price,
        max_hours=max_hours or settings.max_hours,
        interruptible=interruptible,
        bid=bid,
        offer_id=offer_id,
        image=image,
        command=list(command),
        dry_run=dry_run,
    )
    deps = podlife.build_deps(settings, echo=click.echo)
    pod = podlife.up(opts, deps)
    if pod is not None and command and wait_s > 0:
        podlife.wait_gone(deps, pod, wait_s)


@click.command()
@click.argument("pod")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--force",
    is_flag=True,
    help="Start it even while POD runs a job (the first of the two to exit destroys the pod under the other).",
)
@click.option("--dry-run", is_flag=True, help="Print what would run; start nothing.")
def run(pod: str, command: tuple[str, ...], force: bool, dry_run: bool) -> None:
    """Run COMMAND on POD under the wrapper: on exit, sync → notify → destroy.

    Refused while POD still runs a job (checked on the pod): its exit would destroy the pod under that job.
    """
    settings = load_settings()
    deps = podlife.build_deps(settings, echo=click.echo)
    podlife.run_job(pod, list(command), deps, dry_run=dry_run, force=force)


@click.command()
@click.argument("pod")
@click.option("--note", default=None, help="What this run concluded (goes in the ledger).")
@click.option("--force", is_flag=True, help="Destroy even if results cannot be synced.")
@click.option("--dry-run", is_flag=True, help="Print each step; destroy nothing.")
def down(pod: str, note: str | None, force: bool, dry_run: bool) -> None:
    """Sync POD's results, destroy it (never stop), confirm it is gone, close its ledger row."""
    settings = load_settings()
    podlife.down(pod, podlife.build_deps(settings, echo=click.echo), note=note, force=force, dry_run=dry_run)


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON array: " + ", ".join(podlife.LS_FIELDS) + ", ..."
)
def ls(as_json: bool) -> None:
    """List pods at every configured provider, with the watchdog's view and the reaper's health."""
    settings = load_settings()
    rows, warnings = podlife.list_all(podlife.build_deps(settings, echo=click.echo))
    for warning in warnings:
        click.echo(f"! {warning}", err=True)
    if as_json:
        click.echo(podlife.dumps_rows(rows))
        return
    if not rows:
        click.echo("no pods")
        return
    click.echo(
        f"{'PROVIDER':8} {'ID':16} {'NAME':18} {'EXPERIMENT':16} {'STATUS':12} {'$/H':>6} {'GPUC':5} WATCHDOG"
    )
    for r in rows:
        price = f"{r['price_per_hour']:.2f}" if isinstance(r["price_per_hour"], float) else "?"
        click.echo(
            f"{r['provider']!s:8} {r['id']!s:16} {r['name']!s:18} {r['experiment'] or '-'!s:16} {r['status']!s:12} "
            f"{price:>6} {'yes' if r['managed'] else 'NO':5} {r['watchdog'] or '-'}"
        )


@click.command()
@click.argument("pod")
@click.option("--for", "duration", required=True, help="How long: 30m, 2h, 1d.")
def keep(pod: str, duration: str) -> None:
    """Suspend POD's idle destroy for a while (the heartbeat answer carries the lease to the pod)."""
    seconds = parse_duration(duration)
    settings = load_settings()
    deps = podlife.build_deps(settings, echo=click.echo)
    run_ = deps.runs.find(pod)
    if run_.pod_id is None:
        raise ConfigError(f"run {run_.run_id} has no pod id", hint="`gpuc ls` shows live pods")
    until = deps.clock.now() + seconds
    deps.functions.keep(run_.pod_id, until)
    click.echo(f"{run_.pod_id}: idle destroy suspended for {duration}")
