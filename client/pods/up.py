"""`gpuc up`: the pod's start as the laptop drives it (SPEC "The pod's life").

Order matters for money: the intent is recorded before the create call, the id the moment it is
known, the pod is registered with the watchdog before anything slow happens, and a failure after
the create destroys the pod rather than leaving it to bill.

Only `up` (and the demo) loads this module, so it imports provisioning, the API and the pod models at
the top.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from gpuc.client.context import Ctx, Echo
from gpuc.client.onpod.provision import VENV_INSTALLER, Installer, install_agent, offline_installer, provision
from gpuc.client.onpod.ssh import wait_for_ssh_endpoint
from gpuc.client.onpod.upload import check_command, put_project
from gpuc.client.pods import plan
from gpuc.client.pods.down import close_ledger
from gpuc.client.pods.plan import UpOptions, check_env_file, check_experiment
from gpuc.client.pods.run import job_started, short_command, start_job
from gpuc.client.text import clock_utc, short_span
from gpuc.core.api import RegisterRequest
from gpuc.core.errors import GpucError, ProviderError
from gpuc.core.ledger import sane_price, sane_ts
from gpuc.core.models import PodSpec
from gpuc.core.pod import WATCHDOG_ENV, Pod, new_run_id
from gpuc.core.podpaths import CLAIM_ENV
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, new_token


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def up(opts: UpOptions, ctx: Ctx) -> Pod | None:
    check_experiment(opts.experiment)
    secrets_env = check_env_file(ctx.settings, opts.provider)
    # Everything checkable without a provider call, before money: key, ssh key, watchdog URL, GPU name.
    gpu = plan.before_create(opts, ctx)
    secrets_env = plan.pod_secrets(ctx.settings, secrets_env, ctx, asked=opts.env_names)  # the allowlist, names printed

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
        _plan_up(spec, opts, ctx.echo)
        provider = ctx.provider(opts.provider)
        dry_quote = plan.quote(provider, spec, opts, ctx)
        ctx.echo("  " + plan.cost_line(dry_quote, opts, gpu, ctx.clock.now()))
        plan.show_budget(dry_quote, opts, ctx)
        return None
    provider = ctx.provider(opts.provider)
    plan.check_rentable(provider, opts)
    # A ledger that cannot take the start row would fail after the create: a pod created, then destroyed.
    ctx.ledger().check()
    # A pod nobody watches is the most expensive kind: refuse before creating anything.
    watched = ctx.watchdog.status()
    if watched.new_pods_paused:  # "pause new pods" from the phone (issue 20): the sentence says how to resume
        raise GpucError(f"nothing was created: {watched.new_pods_paused}")
    if watched.watchdog_id:  # where the provider shows it: another watchdog on the account leaves it alone
        spec = spec.model_copy(update={"env": {**spec.env, WATCHDOG_ENV: watched.watchdog_id}})
    warn_running_experiment(provider, opts.experiment, ctx)
    priced = plan.quote(provider, spec, opts, ctx)
    plan.check_budget(priced, opts, ctx, watched.pods)
    if not plan.confirm(priced, opts, gpu, ctx, opts.confirm):
        raise GpucError("nothing was created (not confirmed)", hint="add -y to create without the question")
    if priced.offer_id and not spec.offer_id:
        # Rent the offer whose price the user saw, not whichever is cheapest a moment later.
        spec = spec.model_copy(update={"offer_id": priced.offer_id, "price_per_hour": priced.price_per_hour})
    now = ctx.clock.now()
    ctx.runs.record_intent(run_id, spec.name, opts.provider, opts.experiment, now)
    ctx.echo(f"creating {spec.name} on {opts.provider} ({opts.gpu}) ...")
    try:
        pod = provider.create(spec)
    except GpucError:
        ctx.runs.set_phase(run_id, "failed", note="create failed")
        raise
    ctx.runs.set_pod_id(run_id, pod.id)
    try:
        return _after_create(pod, spec, opts, ctx, secrets_env)
    except BaseException as exc:
        why = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else str(exc) or type(exc).__name__
        _abort_pod(pod, run_id, ctx, reason=why)
        raise


def warn_running_experiment(provider: Provider, experiment: str, ctx: Ctx) -> None:
    """Two pods for one experiment are usually one forgotten: say so (a sweep may mean it; not refused)."""
    try:
        pods = provider.list_pods()
    except GpucError:
        return  # the create that follows meets the same outage and says so
    runs = ctx.runs.by_pod_id()
    same = [
        p.id
        for p in pods
        if p.managed
        and p.status not in ("terminated", "exited")
        and (p.experiment or getattr(runs.get(p.id), "experiment", None)) == experiment
    ]
    if same:
        ctx.echo(
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


def _after_create(pod: Pod, spec: PodSpec, opts: UpOptions, ctx: Ctx, secrets_env: dict[str, str]) -> Pod:
    # A watchdog with a key of its own derives the pod's token and answers it with the pod's claim (its proof
    # when the watchdog's store is lost); one without (a deployment from before claims) takes ours.
    own = None if spec.env.get(WATCHDOG_ENV) else new_token()
    price = pod.price_per_hour if pod.price_per_hour is not None else opts.price_per_hour
    if price is not None and not sane_price(price):
        ctx.echo(f"  {pod.id}: the provider reported a price of {price!r}/h: not recorded (fix the ledger row)")
        price = None
    # The provider's creation time, unless it is absurd: then ours (a bad clock must not cost the pod).
    started = pod.created_at if pod.created_at and sane_ts(pod.created_at) else ctx.clock.now()
    # gpuc's own deadline: the pod's agent and the watchdog each end the pod then (no provider field counts).
    deadline_at = started + spec.max_hours * 3600
    answer = ctx.watchdog.register(
        RegisterRequest(
            pod_id=pod.id,
            provider=pod.provider,
            name=pod.name,
            experiment=spec.experiment,
            key=None if own is None else derive_key(own),
            gpu=pod.gpu,
            price_per_hour=price,
            started_at=started,
            interruptible=spec.interruptible,
            deadline_at=deadline_at,
        )
    )
    token = own or answer.token
    if not token:
        raise GpucError(
            "the watchdog registered the pod but sent no token for it", hint="update it: `gpuc watchdog deploy`"
        )
    if answer.claim:
        secrets_env = {**secrets_env, CLAIM_ENV: answer.claim}
    ctx.runs.set_phase(spec.run_id, "registered")
    try:
        ctx.ledger().start(
            pod.id,
            provider=pod.provider,
            experiment=spec.experiment,
            gpu=pod.gpu or spec.gpu_type,
            price_per_hour=price,
            start_ts=started,
        )
        if opts.note:
            ctx.ledger().note(pod.id, opts.note)
    except (GpucError, OSError) as exc:
        # Never worth the pod: the watchdog has it on record (registered above), and the next `gpuc ls` or
        # `gpuc ledger` adds the row from that record once the ledger takes writes again.
        reason = exc.message if isinstance(exc, GpucError) else f"{exc.strerror or type(exc).__name__}"
        ctx.echo(f"  ledger: start row not written ({reason}); it is added from the watchdog's record later")
    provider = ctx.provider(pod.provider)
    pod = wait_running(provider, pod.id, ctx, opts.wait_timeout_s)
    bundle = opts.upload
    prepare = (lambda access: put_project(access, bundle, opts.command, ctx.echo)) if bundle is not None else None
    access = onto_pod(provider, pod, spec, ctx, secrets_env, token, prepare=prepare, deadline_at=deadline_at)
    if opts.command and bundle is None:
        check_command(access, opts.command, None)  # after the bootstrap: GPUC_GIT_REMOTE's clone is there now
    ctx.runs.set_phase(spec.run_id, "running")
    ctx.echo(how_to_get_in(provider, pod))
    if opts.command:
        start_job(access, opts.command, opts.job_id)
        ctx.echo(job_started(pod, opts.command))
    else:
        ctx.echo(no_job_yet(pod.id, ctx.settings.idle_destroy_s, deadline_at, ctx.clock.now()))
    return pod


def no_job_yet(pod_id: str, idle_destroy_s: float, deadline_at: float, now: float) -> str:
    """A pod with no job bills from now: say when it ends by itself, and how to hold it."""
    return (
        f"no job started: the pod is destroyed after {short_span(idle_destroy_s)} idle (no GPU use, no ssh "
        f"input, no process making progress), and at the latest at {clock_utc(deadline_at, now)}; "
        f"`gpuc run {pod_id} -- CMD` starts a job, `gpuc keep {pod_id} --for 2h` holds it"
    )


def onto_pod(
    provider: Provider,
    pod: Pod,
    spec: PodSpec,
    ctx: Ctx,
    secrets_env: dict[str, str],
    token: str,
    prepare: Callable[[PodAccess], None] | None = None,
    deadline_at: float | None = None,
) -> PodAccess:
    """A sandbox gets the agent directly; a rented pod gets ssh, the code, the agent first, the
    bootstrap and the verification (a failed verification raises, and `up` destroys the pod).
    `prepare` (the project's upload) runs once the agent watches the pod, before the bootstrap."""
    if isinstance(provider, LocalProvider):
        access = ctx.pod_access(provider, pod)
        install_agent(access, pod, spec, ctx, secrets_env, token, deadline_at=deadline_at)
        if prepare is not None:
            prepare(access)
        return access
    # RunPod reports RUNNING before the ssh port is mapped.
    pod = wait_for_ssh_endpoint(provider, pod, clock=ctx.clock)
    access = ctx.pod_access(provider, pod)
    provision(
        access,
        pod,
        spec,
        ctx,
        secrets_env,
        token,
        installer=pod_installer(ctx.settings),
        before_bootstrap=prepare,
        deadline_at=deadline_at,
    )
    return access


def pod_installer(settings: Settings) -> Installer:
    """How gpuc gets onto a rented pod: a venv of its own, or (a loopback sandbox, no network) offline."""
    python = settings.ssh_sandbox_python
    return offline_installer(python) if python else VENV_INSTALLER


def wait_running(provider: Provider, pod_id: str, ctx: Ctx, timeout_s: float) -> Pod:
    start = ctx.clock.now()
    last = ""
    while True:
        pod = provider.get(pod_id)
        if pod is None:
            raise ProviderError(f"pod {pod_id} disappeared while starting", provider=provider.name)
        waited = ctx.clock.now() - start
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
        ctx.clock.sleep(min(2.0, max(0.2, ctx.settings.local_boot_s / 4)))


def how_to_get_in(provider: Provider, pod: Pod) -> str:
    if isinstance(provider, LocalProvider):
        return f"ready: {pod.id} ({pod.name}); workspace: {provider.paths(pod.id).workspace}"
    if pod.ssh_host and pod.ssh_port:
        return f"ready: ssh -p {pod.ssh_port} root@{pod.ssh_host}"
    return f"ready: {pod.id} ({pod.name}); ssh details: gpuc ls"


def _abort_pod(pod: Pod, run_id: str, ctx: Ctx, reason: str) -> None:
    """`up` failed after the create: destroy rather than leave a pod billing."""
    ctx.echo(f"up failed after create ({reason.splitlines()[0][:200]}); destroying {pod.id}")
    provider = ctx.provider(pod.provider)
    try:
        provider.destroy(pod.id)
        provider.confirm_gone(pod.id, ctx.clock)
        ctx.runs.set_phase(run_id, "failed", now=ctx.clock.now(), note="up failed; destroyed")
        close_ledger(ctx, pod.id, note=f"up failed: {reason[:120]}")
    except GpucError as exc:
        ctx.echo(f"could not destroy {pod.id}: {exc} - the watchdog will retry; check `gpuc ls`")


