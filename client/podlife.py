"""The pod's life as the laptop drives it: up, run, down (SPEC "The pod's life").

Order matters for money: the intent is recorded before the create call, the id the moment it is
known, the pod is registered with the watchdog before anything slow happens, and a failure after
the create destroys the pod rather than leaving it to bill.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuc.client.deps import Deps, Echo, build_deps
from gpuc.client.state import Run
from gpuc.core.clock import iso
from gpuc.core.errors import ConfigError, GpucError, NotFound, ProviderError, SafetyRefusal
from gpuc.core.podjson import Unreadable, last_json_line
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.providers.local import LocalProvider
from gpuc.core.providers.registry import KEY_FIELDS, keyed_providers
from gpuc.core.settings import Settings, env_file_mode_ok, env_name, read_env_file

# Startup: `gpuc ls` imports this module; provisioning (ssh, the wheel, the pod config), the API models and
# the pod models (pydantic, ~60 ms) load inside the functions that reach a pod or build a request.
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from gpuc.client.provision import Installer
    from gpuc.client.upload import Bundle
    from gpuc.core.api import PodRecord, StatusResponse
    from gpuc.core.models import Pod, PodSpec

# Re-exported: the CLI and the tests reach the pod's life through this module (STATE_DIR through
# __getattr__, so that reaching it does not load provisioning on every command).
__all__ = ["Deps", "Echo", "build_deps", "pod_access"]


def __getattr__(name: str) -> Any:
    if name == "STATE_DIR":
        from gpuc.client.provision import STATE_DIR  # startup: see the TYPE_CHECKING block above

        return STATE_DIR
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pod_access(provider: Provider, pod: Pod, settings: Settings) -> PodAccess:
    from gpuc.client.provision import pod_access as access  # startup: see the TYPE_CHECKING block above

    return access(provider, pod, settings)



def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


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
    command: list[str] = field(default_factory=list)
    wait_timeout_s: float = 600.0
    dry_run: bool = False
    upload: Bundle | None = None  # the project for the pod's workspace (client/upload.py), measured before the create
    job_id: str | None = None  # the command's id: its outcome names it (client/outcome.py)
    # Asked with the price before the create (the CLI passes one on a terminal without -y); None: not asked.
    confirm: Callable[[str], bool] | None = None
    over_budget: bool = False  # rent even if the month's budget would be crossed (client/precheck.py)


# -- checks before money is spent ------------------------------------------------------------------
def check_experiment(name: str | None) -> str:
    if not name:
        raise ConfigError("an experiment name is required", hint="gpuc up NAME (e.g. gpuc up lora-sweep-3)")
    from gpuc.core.models import EXPERIMENT_RE  # startup: see the TYPE_CHECKING block at the top

    if not EXPERIMENT_RE.match(name):
        raise ConfigError(
            f"experiment name {name!r} is not valid",
            hint="use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def check_env_file(settings: Settings, provider: str) -> dict[str, str]:
    """The user's `.env` (the pod gets only its allowlist: precheck.pod_secrets). It must be mode 600;
    rented pods need it to exist."""
    path = settings.env_file
    if not path.exists():
        if provider == "local":
            return {}
        raise ConfigError(
            f"{path} does not exist", hint=f"create it with your secrets, then: chmod 600 {path}"
        )
    if not env_file_mode_ok(path):
        raise ConfigError(f"{path} is readable by other users", hint=f"chmod 600 {path}")
    return read_env_file(path)


# -- up --------------------------------------------------------------------------------------------
def up(opts: UpOptions, deps: Deps) -> Pod | None:
    check_experiment(opts.experiment)
    secrets_env = check_env_file(deps.settings, opts.provider)
    from gpuc.client import precheck
    from gpuc.core.models import PodSpec, new_run_id  # startup: see the TYPE_CHECKING block at the top

    # Everything checkable without a provider call, before money: key, ssh key, watchdog URL, GPU name.
    gpu = precheck.before_create(opts, deps)
    secrets_env = precheck.pod_secrets(deps.settings, secrets_env, deps)  # the allowlist, names printed

    run_id = new_run_id()
    spec = PodSpec(
        experiment=opts.experiment,
        run_id=run_id,
        provider=opts.provider,
        gpu_type=gpu,
        gpu_count=opts.gpu_count,
        interruptible=opts.interruptible,
        bid_per_gpu=opts.bid,
        max_hours=opts.max_hours,
        price_per_hour=opts.price_per_hour,
        offer_id=opts.offer_id,
        env={"GPUC_EXPERIMENT": opts.experiment, "GPUC_RUN_ID": run_id},
        **({"image": opts.image} if opts.image else {}),
    )
    if opts.dry_run:
        _plan_up(spec, opts, deps.echo)
        provider = deps.provider(opts.provider)
        dry_quote = precheck.quote(provider, spec, opts, deps)
        deps.echo("  " + precheck.cost_line(dry_quote, opts, gpu, deps.clock.now()))
        precheck.show_budget(dry_quote, opts, deps)
        return None
    provider = deps.provider(opts.provider)
    precheck.check_rentable(provider, opts)
    # A ledger that cannot take the start row would fail after the create: a pod created, then destroyed.
    deps.ledger().check()
    # A pod nobody watches is the most expensive kind: refuse before creating anything.
    watched = deps.functions.status()
    if watched.new_pods_paused:  # "pause new pods" from the phone (issue 20): the sentence says how to resume
        raise GpucError(f"nothing was created: {watched.new_pods_paused}")
    warn_running_experiment(provider, opts.experiment, deps)
    priced = precheck.quote(provider, spec, opts, deps)
    precheck.check_budget(priced, opts, deps, watched.pods)
    if not precheck.confirm(priced, opts, gpu, deps, opts.confirm):
        raise GpucError("nothing was created (not confirmed)", hint="add -y to create without the question")
    if priced.offer_id and not spec.offer_id:
        # Rent the offer whose price the user saw, not whichever is cheapest a moment later.
        spec = spec.model_copy(update={"offer_id": priced.offer_id, "price_per_hour": priced.price_per_hour})
    now = deps.clock.now()
    deps.runs.record_intent(run_id, spec.name, opts.provider, opts.experiment, now)
    deps.echo(f"creating {spec.name} on {opts.provider} ({opts.gpu}) ...")
    try:
        pod = provider.create(spec)
    except GpucError:
        deps.runs.set_phase(run_id, "failed", note="create failed")
        raise
    deps.runs.set_pod_id(run_id, pod.id)
    try:
        return _after_create(pod, spec, opts, deps, secrets_env)
    except BaseException as exc:
        why = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else str(exc) or type(exc).__name__
        _abort_pod(pod, run_id, deps, reason=why)
        raise


def warn_running_experiment(provider: Provider, experiment: str, deps: Deps) -> None:
    """Two pods for one experiment are usually one forgotten: say so (a sweep may mean it; not refused)."""
    try:
        pods = provider.list_pods()
    except GpucError:
        return  # the create that follows meets the same outage and says so
    runs = deps.runs.by_pod_id()
    same = [
        p.id
        for p in pods
        if p.managed
        and p.status not in ("terminated", "exited")
        and (p.experiment or getattr(runs.get(p.id), "experiment", None)) == experiment
    ]
    if same:
        deps.echo(
            f"warning: experiment {experiment} already has a pod running at {provider.name}: {', '.join(same)}"
            f" (starting another; `gpuc down {same[0]}` ends it)"
        )


def _plan_up(spec: PodSpec, opts: UpOptions, echo: Echo) -> None:
    echo("dry run: nothing will be created")
    steps = [
        f"record intent {spec.name}",
        f"create on {opts.provider}: {opts.gpu} x{opts.gpu_count}, disk {spec.container_disk_gb}+{spec.volume_gb} GB, "
        f"{'interruptible bid ' + str(opts.bid) if opts.interruptible else 'on-demand'}, max {opts.max_hours} h",
        "register with the watchdog (fresh per-pod token)",
        "write the ledger start row",
        "wait for RUNNING",
        "upload config + secrets (mode 600), start the agent",
        "rented pods: install gpuc over ssh, bootstrap, verify the machine (destroy if it fails)",
    ]
    if opts.upload is not None:
        steps.insert(-1, f"upload the project: {opts.upload.describe()}; check the command's files are there")
    if opts.command:
        steps.append(f"run under the wrapper: {short_command(opts.command)}")
    for i, step in enumerate(steps, 1):
        echo(f"  {i}. {step}")


def _after_create(pod: Pod, spec: PodSpec, opts: UpOptions, deps: Deps, secrets_env: dict[str, str]) -> Pod:
    from gpuc.core.api import RegisterRequest  # startup: see the TYPE_CHECKING block at the top
    from gpuc.core.ledger import sane_price, sane_ts  # lazy: `gpuc ls` must not load the ledger's code (deps.py)
    from gpuc.core.signing import derive_key, new_token  # startup: hashlib and hmac, for `up` only

    token = new_token()
    price = pod.price_per_hour if pod.price_per_hour is not None else opts.price_per_hour
    if price is not None and not sane_price(price):
        deps.echo(f"  {pod.id}: the provider reported a price of {price!r}/h: not recorded (fix the ledger row)")
        price = None
    # The provider's creation time, unless it is absurd: then ours (a bad clock must not cost the pod).
    started = pod.created_at if pod.created_at and sane_ts(pod.created_at) else deps.clock.now()
    # gpuc's own deadline: the pod's agent and the watchdog each end the pod then (no provider field counts).
    deadline_at = started + spec.max_hours * 3600
    deps.functions.register(
        RegisterRequest(
            pod_id=pod.id,
            provider=pod.provider,
            name=pod.name,
            experiment=spec.experiment,
            key=derive_key(token),
            gpu=pod.gpu,
            price_per_hour=price,
            started_at=started,
            interruptible=spec.interruptible,
            deadline_at=deadline_at,
        )
    )
    deps.runs.set_phase(spec.run_id, "registered")
    try:
        deps.ledger().start(
            pod.id,
            provider=pod.provider,
            experiment=spec.experiment,
            gpu=pod.gpu or spec.gpu_type,
            price_per_hour=price,
            start_ts=started,
        )
    except (GpucError, OSError) as exc:
        # Never worth the pod: the watchdog has it on record (registered above), and the next `gpuc ls` or
        # `gpuc ledger` adds the row from that record once the ledger takes writes again.
        reason = exc.message if isinstance(exc, GpucError) else f"{exc.strerror or type(exc).__name__}"
        deps.echo(f"  ledger: start row not written ({reason}); it is added from the watchdog's record later")
    provider = deps.provider(pod.provider)
    pod = wait_running(provider, pod.id, deps, opts.wait_timeout_s)
    from gpuc.client.upload import check_command, put_project  # startup: `up` only

    bundle = opts.upload
    prepare = (lambda access: put_project(access, bundle, opts.command, deps.echo)) if bundle is not None else None
    access = onto_pod(provider, pod, spec, deps, secrets_env, token, prepare=prepare, deadline_at=deadline_at)
    if opts.command and bundle is None:
        check_command(access, opts.command, None)  # after the bootstrap: GPUC_GIT_REMOTE's clone is there now
    deps.runs.set_phase(spec.run_id, "running")
    deps.echo(how_to_get_in(provider, pod))
    if opts.command:
        start_job(access, opts.command, opts.job_id)
        deps.echo(job_started(pod, opts.command))
    return pod


def job_started(pod: Pod, command: list[str]) -> str:
    """Started is all `up` and `run` know without --wait: never said as if it had succeeded."""
    return (
        f"job STARTED on {pod.id}: {short_command(command)}\n"
        f"  it runs on its own; when it exits the pod syncs results/ and the log, notifies you and destroys"
        f" itself. Follow it: gpuc logs {pod.id} -f"
    )


def onto_pod(
    provider: Provider,
    pod: Pod,
    spec: PodSpec,
    deps: Deps,
    secrets_env: dict[str, str],
    token: str,
    prepare: Callable[[PodAccess], None] | None = None,
    deadline_at: float | None = None,
) -> PodAccess:
    """A sandbox gets the agent directly; a rented pod gets ssh, the code, the agent first, the
    bootstrap and the verification (a failed verification raises, and `up` destroys the pod).
    `prepare` (the project's upload) runs once the agent watches the pod, before the bootstrap."""
    from gpuc.client.provision import install_agent, provision  # startup: see the TYPE_CHECKING block
    from gpuc.client.ssh import wait_for_ssh_endpoint

    if isinstance(provider, LocalProvider):
        access = pod_access(provider, pod, deps.settings)
        install_agent(access, pod, spec, deps, secrets_env, token, deadline_at=deadline_at)
        if prepare is not None:
            prepare(access)
        return access
    # RunPod reports RUNNING before the ssh port is mapped.
    pod = wait_for_ssh_endpoint(provider, pod, clock=deps.clock)
    access = pod_access(provider, pod, deps.settings)
    provision(
        access,
        pod,
        spec,
        deps,
        secrets_env,
        token,
        installer=pod_installer(deps.settings),
        before_bootstrap=prepare,
        deadline_at=deadline_at,
    )
    return access


def pod_installer(settings: Settings) -> Installer:
    """How gpuc gets onto a rented pod: a venv of its own, or (a loopback sandbox, no network) offline."""
    from gpuc.client.provision import VENV_INSTALLER, offline_installer  # startup: as in onto_pod

    python = settings.ssh_sandbox_python
    return offline_installer(python) if python else VENV_INSTALLER


def wait_running(provider: Provider, pod_id: str, deps: Deps, timeout_s: float) -> Pod:
    start = deps.clock.now()
    last = ""
    while True:
        pod = provider.get(pod_id)
        if pod is None:
            raise ProviderError(f"pod {pod_id} disappeared while starting", provider=provider.name)
        waited = deps.clock.now() - start
        if pod.status == "running":
            _stderr(
                f"\r  {pod.id}: running after {waited:.0f}s{' ' * 20}"
                if sys.stderr.isatty()
                else f"  {pod.id}: running after {waited:.0f}s"
            )
            return pod
        if pod.status in ("exited", "terminated", "stopped"):
            raise ProviderError(f"pod {pod_id} went {pod.status} while starting", provider=provider.name)
        line = f"\r  {pod.id}: {pod.status} ({waited:.0f}s)"
        if line != last and sys.stderr.isatty():
            print(line, end="", file=sys.stderr, flush=True)
            last = line
        if waited > timeout_s:
            raise ProviderError(
                f"pod {pod_id} not running after {timeout_s:.0f}s",
                provider=provider.name,
                hint="it was destroyed; try another GPU type or offer",
            )
        deps.clock.sleep(min(2.0, max(0.2, deps.settings.local_boot_s / 4)))


def short_command(command: list[str], width: int = 72) -> str:
    text = " ".join(command).replace("\n", "; ")
    return text if len(text) <= width else text[: width - 3] + "..."


def start_job(access: PodAccess, command: list[str], job_id: str | None = None) -> None:
    named = ["--job-id", job_id] if job_id else []
    access.spawn(["python", "-m", "gpuc.instance_side", "run", *named, "--", *command], role="job")


def how_to_get_in(provider: Provider, pod: Pod) -> str:
    if isinstance(provider, LocalProvider):
        return f"ready: {pod.id} ({pod.name}); workspace: {provider.paths(pod.id).workspace}"
    if pod.ssh_host and pod.ssh_port:
        return f"ready: ssh -p {pod.ssh_port} root@{pod.ssh_host}"
    return f"ready: {pod.id} ({pod.name}); ssh details: gpuc ls"


def _abort_pod(pod: Pod, run_id: str, deps: Deps, reason: str) -> None:
    """`up` failed after the create: destroy rather than leave a pod billing."""
    deps.echo(f"up failed after create ({reason.splitlines()[0][:200]}); destroying {pod.id}")
    provider = deps.provider(pod.provider)
    try:
        provider.destroy(pod.id)
        provider.confirm_gone(pod.id, deps.clock)
        deps.runs.set_phase(run_id, "failed", now=deps.clock.now(), note="up failed; destroyed")
        _close_ledger(deps, pod.id, note=f"up failed: {reason[:120]}")
    except GpucError as exc:
        deps.echo(f"could not destroy {pod.id}: {exc} - the watchdog will retry; check `gpuc ls`")


def _close_ledger(deps: Deps, pod_id: str, note: str | None) -> None:
    try:
        deps.ledger().end(pod_id, end_ts=deps.clock.now(), note=note)
    except GpucError as exc:
        deps.echo(f"ledger: {exc}")


# -- run -------------------------------------------------------------------------------------------
# Run on the pod (its own python, stdlib and gpuc.core.podpaths only): is a job under the wrapper there?
# The job pid file holds "PID" or "PID START" (START: the job's start time in clock ticks, /proc/PID/stat
# field 22), so a pid reused by another process after a crash is not taken for the job.
JOB_PROBE = """
import fcntl, json, os
from gpuc.core.podpaths import PodPaths
paths = PodPaths.from_env()
def alive(pid, start):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if start is None:
        return True
    try:
        with open('/proc/%d/stat' % pid) as fh:
            return fh.read().rsplit(')', 1)[1].split()[19] == str(start)
    except (OSError, IndexError):
        return True
try:
    with open(paths.job) as fh:
        parts = fh.read().split()
except FileNotFoundError:
    parts = []
pid = int(parts[0]) if parts else 0
start = int(parts[1]) if len(parts) > 1 else None
try:
    with open(paths.ended) as fh:
        ended = fh.read().strip()
except FileNotFoundError:
    ended = None
def ending():
    # Between the job's exit and the `ended` marker the wrapper syncs and notifies holding end.lock: a job
    # started then would be destroyed by that ending.
    try:
        fd = os.open(paths.end_lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
print(json.dumps({'job_pid': pid if pid > 0 and alive(pid, start) else None, 'ended': ended,
                  'ending': ending()}))
"""


def job_on_pod(access: PodAccess, pod: Pod) -> str | None:
    """What keeps `run` off this pod: a job still running, or the pod ending; None when it is free.
    A reading that cannot be trusted raises: a second job is what destroys a pod under the first."""
    code, out = access.run(["python", "-c", JOB_PROBE], timeout_s=60.0)
    found: dict[str, object] = {}
    if code == 0:
        with contextlib.suppress(Unreadable):
            found = last_json_line(out)
    if not _job_answer(found):
        raise SafetyRefusal(
            f"could not tell whether a job is running on {pod.id} (exit {code}): not starting another",
            hint=f"look with `gpuc ls` or ssh in; start it anyway with: gpuc run {pod.id} --force -- ...",
        )
    if found["job_pid"] is not None:
        return f"a job is still running on it (pid {found['job_pid']})"
    if found["ended"] in ("", pod.id) or found.get("ending") is True:
        return "it is ending (its results sync and destroy are under way)"
    return None


def _job_answer(found: dict[str, object]) -> bool:
    """JOB_PROBE's answer, every field of the type it prints (the pod's word: anything else is no reading)."""
    pid, ended, ending = found.get("job_pid", False), found.get("ended", False), found.get("ending", False)
    return (
        (pid is None or (type(pid) is int and pid > 0))
        and (ended is None or (isinstance(ended, str) and len(ended) <= 256))
        and isinstance(ending, bool)
    )


def run_job(
    ref: str, command: list[str], deps: Deps, dry_run: bool = False, force: bool = False, job_id: str | None = None
) -> Pod:
    """Start COMMAND under the wrapper. Refused while the pod runs a job (checked on the pod itself):
    the second job's exit would destroy the pod under the first. `force` starts it anyway."""
    _run, pod, provider = resolve_pod(ref, deps)
    if pod.status != "running":
        raise SafetyRefusal(f"pod {pod.id} is {pod.status}", hint="only a running pod can take a job")
    access = pod_access(provider, pod, deps.settings)
    busy = job_on_pod(access, pod)
    if busy and not force:
        raise SafetyRefusal(
            f"pod {pod.id}: {busy}; a second job would destroy the pod when it exits, under the first",
            hint=f"wait for it (gpuc ls), or start it anyway with: gpuc run {pod.id} --force -- ...",
        )
    if busy:
        deps.echo(f"{pod.id}: {busy}; starting another anyway (--force)")
    from gpuc.client.upload import check_command  # startup: `run` only

    # Refused, not destroyed: this pod was not just created for the job, it may hold someone's work.
    check_command(access, command, None, destroying=False)
    if dry_run:
        deps.echo(f"dry run: would start under the wrapper on {pod.id}: {short_command(command)}")
        return pod
    start_job(access, command, job_id)
    deps.echo(job_started(pod, command))
    return pod


def resolve_pod(ref: str, deps: Deps) -> tuple[Run, Pod, Provider]:
    run, pod, provider = _look_up(ref, deps)
    if pod is None:
        raise NotFound(
            f"pod {run.pod_id} no longer exists at {run.provider}", hint="`gpuc ls` shows live pods"
        )
    return run, pod, provider


def _look_up(ref: str, deps: Deps) -> tuple[Run, Pod | None, Provider]:
    """The run, its pod as the provider lists it now (None: gone), and that provider. Refuses a pod
    without gpuc's marks: gpuc never acts on a pod it did not start."""
    run = deps.runs.find(ref)
    if run.pod_id is None:
        raise NotFound(
            f"run {run.run_id} never got a pod id", hint="`gpuc ls` shows what exists at the provider"
        )
    provider = deps.provider(run.provider)
    pod = provider.get(run.pod_id)
    if pod is not None and not pod.managed:
        raise SafetyRefusal(
            f"pod {pod.id} is not marked as gpuc's", hint="gpuc never acts on pods it did not start"
        )
    return run, pod, provider


# -- down ------------------------------------------------------------------------------------------
def down(
    ref: str,
    deps: Deps,
    note: str | None = None,
    force: bool = False,
    dry_run: bool = False,
    copied_to: Path | None = None,
) -> None:
    """Sync gate → record the end → notify → destroy (never stop) → confirm gone → close the ledger.
    `copied_to`: `gpuc results` copied results/ there and verified it, which satisfies the sync gate."""
    run, pod, provider = _look_up(ref, deps)
    if pod is None:
        deps.echo(f"{run.pod_id} is already gone at {run.provider}")
        _finish_down(run, deps, note)
        return
    steps = [
        "sync results and verify",
        "record the end with the watchdog",
        "notify",
        "destroy",
        "confirm gone",
    ]
    if dry_run:
        deps.echo(f"dry run: down {pod.id} would: " + " -> ".join(steps))
        return
    if copied_to is not None:
        deps.echo(f"  results/ copied to {copied_to} and verified: nothing is left only on the pod")
    else:
        _sync_gate(provider, pod, deps, force)
    end_at = deps.clock.now()
    _record_end(deps, pod.id, end_at, note)
    _notify(deps, f"destroying {pod.name}", f"{pod.id} ({run.experiment}) destroyed by gpuc down")
    result = provider.destroy(pod.id)
    if not provider.confirm_gone(pod.id, deps.clock):
        raise ProviderError(
            f"{pod.id} still listed after destroy",
            provider=provider.name,
            hint="run gpuc down again, or check the console",
        )
    deps.echo(f"{pod.id}: {result.replace('_', ' ')}, confirmed gone")
    _finish_down(run, deps, note)


def _sync_gate(provider: Provider, pod: Pod, deps: Deps, force: bool) -> None:
    if pod.status != "running":
        if force:
            deps.echo(f"{pod.id} is {pod.status}: its disk is out of reach; destroying anyway (--force)")
            return
        raise SafetyRefusal(
            f"{pod.id} is {pod.status}: its results cannot be synced",
            hint=f"what was not pushed during the run is only on the pod: `gpuc results {pod.id}` copies "
            f"results/ here and ends it; `gpuc down {pod.id} --force` destroys them",
        )
    code, out = pod_access(provider, pod, deps.settings).run(["python", "-m", "gpuc.instance_side", "sync"])
    if code == 0:
        deps.echo(f"  results synced and verified ({out.strip().splitlines()[-1] if out.strip() else 'ok'})")
        return
    if force:
        deps.echo("  sync FAILED; destroying anyway (--force)")
        return
    _notify(deps, f"kept alive: sync failed on {pod.name}", f"gpuc down refused to destroy {pod.id}")
    raise SafetyRefusal(
        f"results sync failed on {pod.id}; the pod is kept",
        hint=f"results are only on the pod: `gpuc results {pod.id}` copies them here and ends it; "
        f"`gpuc down {pod.id} --force` destroys them",
    )


def _record_end(deps: Deps, pod_id: str, end_at: float, note: str | None) -> None:
    try:
        from gpuc.core.api import EndRequest  # startup: see the TYPE_CHECKING block at the top

        deps.functions.end(pod_id, EndRequest(end_at=end_at, by="down", note=note))
    except GpucError as exc:
        # The user is here and asked for the destroy: a watchdog outage must not keep a pod billing.
        deps.echo(f"  watchdog unreachable ({exc.message}); the ledger is closed locally")


def _notify(deps: Deps, title: str, message: str) -> None:
    # A notification never blocks a destroy (F13).
    with contextlib.suppress(GpucError):
        deps.functions.notify(title, message)


def _finish_down(run: Run, deps: Deps, note: str | None) -> None:
    deps.runs.set_phase(run.run_id, "ended", now=deps.clock.now(), note=note)
    if run.pod_id:
        _close_ledger(deps, run.pod_id, note)


# -- ls --------------------------------------------------------------------------------------------
LS_FIELDS = (
    "provider",
    "id",
    "name",
    "experiment",
    "status",
    "gpu",
    "price_per_hour",
    "created_at",
    "managed",
)


# Fields that hold a time: epoch seconds in the rows, ISO 8601 UTC in `gpuc ls --json`.
LS_TIMES = ("created_at", "last_seen", "lease_until", "destroy_at")
READ = "read"


def configured_providers(settings: Settings) -> list[str]:
    return ["local", *keyed_providers(settings)]


@dataclass
class Listing:
    """What `gpuc ls` found. `providers` says, for EVERY provider, whether it was read: an empty list
    means "no pods" only when each says READ (a provider without a key was never asked)."""

    rows: list[dict[str, object]]
    warnings: list[str]
    providers: dict[str, str]  # name -> READ | "not checked (no key: set ...)" | "not read: why"
    watchdog: bool  # the watchdog answered (its view is in the rows)
    now: float

    @property
    def complete(self) -> bool:
        return all(state == READ for state in self.providers.values())


def survey(deps: Deps) -> Listing:
    """Every pod at every configured provider, joined with what the laptop and the watchdog know."""
    runs = deps.runs.by_pod_id()
    warnings: list[str] = []
    watch: dict[str, PodRecord] = {}
    server_time: float | None = None
    try:
        status = deps.functions.status()
        watch = {p.pod_id: p for p in status.pods}
        server_time = status.server_time
        warnings.extend(ledger_intake(deps, status.pods))
        warnings.extend(status_warnings(status))
    except GpucError as exc:
        warnings.append(f"watchdog unreachable: {exc.message}")
    now = deps.clock.now()
    configured = configured_providers(deps.settings)
    states = {name: f"not checked (no key: set {env_name(field)})" for name, field in KEY_FIELDS.items()}
    rows: list[dict[str, object]] = []
    for name in configured:
        try:
            pods = deps.provider(name).list_pods()
        except GpucError as exc:
            warnings.append(f"{name}: {exc.message}")
            states[name] = f"not read: {exc.message}"
            continue
        states[name] = READ
        for pod in pods:
            rows.append(ls_row(pod, runs.get(pod.id), watch.get(pod.id), now, server_time))
    order = ["local", *KEY_FIELDS]
    providers = {name: states[name] for name in order if name in states}
    return Listing(rows, warnings, providers, server_time is not None, now)


def ls_row(
    pod: Pod, run: Run | None, rec: PodRecord | None, now: float, server_time: float | None
) -> dict[str, object]:
    row: dict[str, object] = {k: getattr(pod, k) for k in LS_FIELDS}
    if run and not row["experiment"]:
        row["experiment"] = run.experiment
    row["gpu_count"] = pod.gpu_count
    age = max(0.0, now - pod.created_at) if pod.created_at else None
    row["age_s"] = round(age) if age is not None else None
    # An estimate at the listed price (a stopped pod bills less); `gpuc ledger` keeps the record.
    row["cost_usd"] = round(pod.price_per_hour * age / 3600, 4) if age is not None and pod.price_per_hour else None
    row["watchdog"] = rec.state if rec else None
    row["last_seen"] = rec.last_seen if rec else None
    # The watchdog's own clock on both ends: a laptop clock that is off must not make a pod look silent.
    seen = server_time - rec.last_seen if rec and rec.last_seen is not None and server_time is not None else None
    row["heartbeat_age_s"] = round(max(0.0, seen)) if seen is not None else None
    lease = rec.lease_until if rec else None
    row["lease_until"] = lease if lease and lease > (server_time or now) else None
    row["destroy_at"] = rec.destroy_at if rec else None
    row["ssh"] = f"{pod.ssh_host}:{pod.ssh_port}" if pod.ssh_host else None
    return row


def list_all(deps: Deps) -> tuple[list[dict[str, object]], list[str]]:
    found = survey(deps)
    return found.rows, found.warnings


def ledger_intake(deps: Deps, records: list[PodRecord]) -> list[str]:
    """Take the watchdog's ends into the ledger. A ledger problem is the ledger's (said so, with its fix),
    never "watchdog unreachable", and never stops `ls` from listing the pods."""
    try:
        report = deps.ledger().sync_from_functions(records)
    except GpucError as exc:
        return [f"ledger: {exc.message}" + (f" (fix: {exc.hint})" if exc.hint else "")]
    except OSError as exc:  # a full disk, say: the ends stay with the watchdog until the next try
        return [f"ledger: could not write the ends recorded by the watchdog ({exc.strerror or exc})"]
    taken = [f"ledger: took in {report.closed} end(s) recorded by the pods or the watchdog"] if report.closed else []
    return taken + [f"ledger: {w}" for w in report.warnings]


def status_warnings(status: StatusResponse) -> list[str]:
    """What `gpuc ls` and `gpuc watchdog status` warn about: a stale reaper (F14), and each provider the
    reaper cannot read (nothing is destroyed there: a frozen pod on it bills unchecked)."""
    warnings = reaper_warnings(status.reaper_last_run, status.reaper_period_s, status.server_time)
    for blind in status.reaper_blind_since:
        lasted = max(0.0, status.server_time - blind.since)
        why = f": {blind.why}" if blind.why else ""
        warnings.append(
            f"the reaper cannot read {blind.provider} since {iso(blind.since)} ({lasted / 60:.0f} min){why}; "
            f"{blind.provider} pods are not watched until it can"
        )
    return warnings


def reaper_warnings(last_run: float | None, period_s: float, now: float) -> list[str]:
    if last_run is None:
        return ["the watchdog's reaper has never run (F14): deploy or serve it"]
    age = now - last_run
    if age > 2 * period_s:
        return [
            f"the watchdog's reaper last ran {age / 60:.0f} min ago (period {period_s / 60:.0f} min): it is STALE"
        ]
    return []


def dumps_rows(rows: list[dict[str, object]]) -> str:
    def when(key: str, value: object) -> object:
        return iso(value) if key in LS_TIMES and isinstance(value, int | float) else value

    return json.dumps([{k: when(k, v) for k, v in r.items()} for r in rows], indent=2, default=str)


def wait_gone(deps: Deps, pod: Pod, timeout_s: float, poll_s: float = 0.5) -> bool:
    """Block until the pod is gone (the wrapper destroyed it) or the timeout passes."""
    provider = deps.provider(pod.provider)
    deadline = deps.clock.now() + timeout_s
    while deps.clock.now() < deadline:
        current = provider.get(pod.id)
        if current is None:
            deps.echo(f"{pod.id} is gone")
            return True
        deps.clock.sleep(poll_s)
    deps.echo(f"{pod.id} still exists after {timeout_s:.0f}s")
    return False
