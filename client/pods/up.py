"""`gpuc up`: the pod's start as the laptop drives it (docs/contributing.md, "How the flows read", walks it).

Order matters for money: the intent is recorded before the create call, the id the moment it is
known, the pod is registered with the watchdog before anything slow happens, and a failure after
the create destroys the pod rather than leaving it to bill. So does a stop signal (Ctrl-C, a closed
terminal, SIGTERM) or `up`'s own output breaking, at any step: the destroy comes before any print
(client/pods/interrupts.py says why).

Only `up` (and the demo) loads this module, so it imports provisioning, the API and the pod models at
the top.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from gpuc.client.context import Ctx, Echo
from gpuc.client.onpod.provision import IMAGE_PYTHON, install_agent, provision
from gpuc.client.onpod.script import check_command, check_in_bundle, put_project
from gpuc.client.onpod.ssh import wait_for_ssh_endpoint
from gpuc.client.pods import allowlist, budgetcheck, plan, warm
from gpuc.client.pods.abort import abort
from gpuc.client.pods.interrupts import (
    Interrupted,
    stop_signals_raise,
)
from gpuc.client.pods.plan import UpOptions, check_env_file, check_experiment
from gpuc.client.pods.recovery import prepare as recovery
from gpuc.client.pods.run import job_started, short_command, start_job
from gpuc.client.progress import Ticker, ticking
from gpuc.client.text import clock_utc, short_span
from gpuc.core.api import RegisterRequest
from gpuc.core.bootkit import onstart_script
from gpuc.core.clock import hours_text
from gpuc.core.errors import GpucError, ProviderError
from gpuc.core.ledger.rows import sane_price, sane_ts
from gpuc.core.models import PodSpec
from gpuc.core.pod import WATCHDOG_ENV, Pod, new_run_id
from gpuc.core.podinstall import Installer
from gpuc.core.podpaths import CLAIM_ENV
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, new_token


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def up(opts: UpOptions, ctx: Ctx) -> Pod | None:
    check_experiment(opts.experiment)
    if opts.upload is not None:  # a typo'd script is refused before money, not after a boot
        check_in_bundle(opts.command, opts.upload, clone=bool(ctx.settings.git_remote))
    secrets_env = check_env_file(ctx.settings, opts.provider)
    recovery.check_recovery(opts, ctx.settings)  # --recover: before the destination's probe, which it narrows
    # Everything checkable without a provider call, before money: key, ssh key, watchdog URL, GPU name.
    gpu = plan.before_create(opts, ctx)
    secrets_env = allowlist.pod_secrets(ctx.settings, secrets_env, ctx, asked=opts.env_names)  # names printed

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
        # A recovering run's pods boot themselves at every container start (a resume after an outbid too).
        onstart=onstart_script() if opts.recover else None,
        **({"image": opts.image} if opts.image else {}),
        **({"volume_gb": opts.volume_gb} if opts.volume_gb is not None else {}),
    )
    if opts.dry_run:
        _plan_up(spec, opts, ctx.echo)
        provider = ctx.provider(opts.provider)
        spec = plan.prepare_spec(provider, spec, ctx)  # what the provider would refuse, said in a dry run too
        dry_quote = plan.quote(provider, spec, opts, ctx, recovery.envelope_of(opts, spec))
        ctx.echo("  " + plan.cost_line(dry_quote, opts, gpu, ctx.clock.now()))
        budgetcheck.show_budget(dry_quote, opts, ctx)
        return None
    provider = ctx.provider(opts.provider)
    plan.check_rentable(provider, opts)
    # The provider's own refusals (a RunPod volume under 10 GB) and the ssh key the pod is handed.
    spec = plan.prepare_spec(provider, spec, ctx)
    # A ledger that cannot take the start row would fail after the create: a pod created, then destroyed.
    ctx.ledger().check()
    # A pod nobody watches is the most expensive kind: refuse before creating anything.
    watched = ctx.watchdog.status()
    plan.check_protocol(watched, ctx.settings)  # an older watchdog: 4xx to every heartbeat, the pod destroyed
    plan.check_results_grant(watched, ctx.settings)  # s3://: the watchdog, not the pod, holds the bucket's key
    if opts.recover:
        recovery.check_recovery_protocol(watched, ctx.settings)  # an older one would never re-rent the run
    if watched.new_pods_paused:  # "pause new pods" from the phone: the sentence says how to resume
        raise GpucError(f"nothing was created: {watched.new_pods_paused}")
    if watched.watchdog_id:  # where the provider shows it: another watchdog on the account leaves it alone
        spec = spec.model_copy(update={"env": {**spec.env, WATCHDOG_ENV: watched.watchdog_id}})
    warn_running_experiment(provider, opts.experiment, ctx)
    priced = plan.quote(provider, spec, opts, ctx, recovery.envelope_of(opts, spec))
    budgetcheck.check_budget(priced, opts, ctx, watched.pods)
    if not plan.confirm(priced, opts, gpu, ctx, opts.confirm):
        raise GpucError("nothing was created (not confirmed)", hint="add -y to create without the question")
    if priced.offer_id and not spec.offer_id:
        # Rent the offer whose price the user saw, not whichever is cheapest a moment later.
        spec = spec.model_copy(update={"offer_id": priced.offer_id, "price_per_hour": priced.price_per_hour})
    elif spec.price_per_hour is None and priced.price_per_hour is not None:
        # The price the user saw bounds the create: RunPod tries another pool after a 403 only within it.
        spec = spec.model_copy(update={"price_per_hour": priced.price_per_hour})
    kit = None
    if opts.recover:
        # Before the create: a run whose next pods could not boot must not be rented at all.
        assert priced.envelope is not None  # check_recovery refused a run without a bid (its price cap)
        kit = recovery.kit_files(opts, ctx.settings, run_id)
        ctx.echo(f"  boot kit (gpuc's wheel and your project) written to {kit.place}")
    now = ctx.clock.now()
    ctx.runs.record_intent(
        run_id, spec.name, opts.provider, opts.experiment, now, warm_s=opts.warm_s, warm_job_s=opts.warm_job_s
    )
    ctx.echo(f"creating {spec.name} on {opts.provider} ({opts.gpu}) ...")
    with stop_signals_raise():
        return _create_and_prepare(provider, spec, opts, ctx, secrets_env, recovery.Recovering(kit, priced.envelope))


def _create_and_prepare(
    provider: Provider,
    spec: PodSpec,
    opts: UpOptions,
    ctx: Ctx,
    secrets_env: dict[str, str],
    recovering: recovery.Recovering | None = None,
) -> Pod:
    """From the create on, anything that ends `up` early destroys what it created: an error, a stop
    signal (Ctrl-C, a closed terminal, SIGTERM), or its own output breaking (`up | tee` after Ctrl-C)."""
    made: list[Pod] = []  # filled the moment the create answers: a signal just after still finds it by name
    try:
        made.append(provider.create(spec))
        ctx.runs.set_pod_id(spec.run_id, made[0].id)
        return _after_create(made[0], spec, opts, ctx, secrets_env, recovering or recovery.Recovering())
    except BaseException as exc:
        if not made and isinstance(exc, GpucError):
            # A definite refusal, or an unclear create that create_once already looked up by name.
            ctx.runs.set_phase(spec.run_id, "failed", note="create failed")
            if recovering is not None and recovering.kit is not None:
                recovery.remove_kit(ctx.settings, spec.run_id)  # nothing was rented: nothing boots from it
            raise
        begun: list[bool] = []
        try:
            abort(made[0] if made else None, spec, ctx, exc, begun)
        except Interrupted:
            # The one signal `stop_signals_raise` raises came in the instant before the abort deferred them
            # (`up` was failing anyway): the abort from the start; no second signal can be raised.
            if not begun:
                abort(made[0] if made else None, spec, ctx, exc, begun)
        raise


def warn_running_experiment(provider: Provider, experiment: str, ctx: Ctx) -> None:
    """Two pods for one experiment are usually one forgotten: say so (a sweep may mean it; not refused)."""
    try:
        pods = provider.list_pods()
    except GpucError:
        return  # the create that follows meets the same outage and says so
    close_gone_runs(provider.name, {p.id for p in pods}, experiment, ctx)
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


def close_gone_runs(provider: str, listed: set[str], experiment: str, ctx: Ctx) -> None:
    """This experiment's runs whose pods the provider no longer lists at all are over: a warm pod that ended
    itself idle, a pod whose `up` did not wait. Else the experiment's name (`gpuc run exp`) would name two
    open runs once this `up` adds its own, and be refused as ambiguous. Only runs that got to "running" (one
    still being created by another `up` may not be listed yet); the phase is all this changes."""
    for run in ctx.runs.all():
        mine = run.experiment == experiment and run.provider == provider and run.phase == "running"
        if mine and run.pod_id is not None and run.pod_id not in listed:
            ctx.runs.set_phase(run.run_id, "ended", now=ctx.clock.now(), note="no longer listed at the provider")


def _plan_up(spec: PodSpec, opts: UpOptions, echo: Echo) -> None:
    echo("dry run: nothing will be created")
    steps = [
        f"record intent {spec.name}",
        f"create on {opts.provider}: {opts.gpu} x{opts.gpu_count}, disk {spec.container_disk_gb}+{spec.volume_gb} GB, "
        f"{'interruptible bid ' + str(opts.bid) if opts.interruptible else 'on-demand'}, "
        f"max {hours_text(opts.max_hours)}",
        "register with the watchdog (fresh per-pod token)"
        + (f"; with the run's recovery plan (--recover {opts.recover})" if opts.recover else ""),
        "write the ledger start row",
        "wait for RUNNING",
        "upload config + secrets (mode 600), start the agent",
        "rented pods: install gpuc over ssh, bootstrap, verify the machine (destroy if it fails)",
    ]
    if opts.recover:
        steps.insert(
            1,
            "write the boot kit (gpuc's wheel and the project, mode 600) to the results bucket's "
            f".gpuc-kits/{spec.run_id}/: a re-rented pod fetches it with no laptop",
        )
    if opts.upload is not None:
        steps.insert(-1, f"upload the project: {opts.upload.describe()}; check the command's files are there")
    if opts.command:
        steps.append(f"run under the wrapper: {short_command(opts.command)}")
    for i, step in enumerate(steps, 1):
        echo(f"  {i}. {step}")


def _after_create(
    pod: Pod, spec: PodSpec, opts: UpOptions, ctx: Ctx, secrets_env: dict[str, str], recovering: recovery.Recovering
) -> Pod:
    # A watchdog with a key of its own derives the pod's token and answers it with the pod's claim (its proof
    # when the watchdog's store is lost); one without (a deployment from before claims) takes ours.
    own = None if spec.env.get(WATCHDOG_ENV) else new_token()
    price = pod.price_per_hour if pod.price_per_hour is not None else opts.price_per_hour
    if price is None and opts.recover and opts.bid is not None:
        price = opts.bid * opts.gpu_count  # what a bid pod bills; the watchdog counts the run's spend from it
    if price is not None and not sane_price(price):
        ctx.echo(f"  {pod.id}: the provider reported a price of {price!r}/h: not recorded (fix the ledger row)")
        price = None
    # The provider's creation time, unless it is absurd: then ours (a bad clock must not cost the pod).
    started = pod.created_at if pod.created_at and sane_ts(pod.created_at) else ctx.clock.now()
    # gpuc's own deadline: the pod's agent and the watchdog each end the pod then (no provider field counts).
    deadline_at = started + spec.max_hours * 3600
    recovering_plan = None
    if recovering.kit is not None and recovering.envelope is not None:
        # The allowlisted secrets as chosen above: never this pod's token or claim (each attempt gets its own).
        kit = recovery.boot_kit(recovering.kit, pod, spec, opts, ctx, secrets_env, deadline_at)
        recovering_plan = recovery.recovery_request(kit, recovering.envelope, spec, opts, ctx.settings, started)
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
            recovery=recovering_plan,
            results_at=plan.results_prefix(ctx.settings, spec.experiment, spec.run_id),
            warm_s=opts.warm_s or None,
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
    access = onto_pod(
        provider,
        pod,
        spec,
        ctx,
        secrets_env,
        token,
        prepare=prepare,
        deadline_at=deadline_at,
        job=bool(opts.command),
        warm_s=opts.warm_s,
    )
    if opts.command and bundle is None:
        check_command(access, opts.command, None)  # after the bootstrap: GPUC_GIT_REMOTE's clone is there now
    ctx.runs.set_phase(spec.run_id, "running")
    ctx.echo(how_to_get_in(provider, pod))
    if opts.command:
        start_job(access, opts.command, opts.job_id)
        ctx.echo(job_started(pod, opts.command, opts.warm_s))
    elif opts.warm_s:
        ctx.echo(warm.no_job_yet(pod.id, opts.warm_s, deadline_at, ctx.clock.now()))
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
    job: bool = False,
    warm_s: float = 0.0,
) -> PodAccess:
    """A sandbox gets the agent directly; a rented pod gets ssh, the code, the agent first, the
    bootstrap and the verification (a failed verification raises, and `up` destroys the pod).
    `prepare` (the project's upload) runs once the agent watches the pod, before the bootstrap."""
    if isinstance(provider, LocalProvider):
        access = ctx.pod_access(provider, pod)
        install_agent(access, pod, spec, ctx, secrets_env, token, deadline_at=deadline_at, warm_s=warm_s)
        if prepare is not None:
            prepare(access)
        return access
    # RunPod reports RUNNING before the ssh port is mapped.
    address = Ticker("waiting for its ssh address", ctx.clock, every_s=ctx.settings.progress_every_s)
    pod = wait_for_ssh_endpoint(provider, pod, clock=ctx.clock, tick=address.tick)
    access = ctx.pod_access(provider, pod)
    with ticking("preparing the pod (gpuc, your code, the bootstrap)", every_s=ctx.settings.progress_every_s):
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
            job_needs_deps=job,
            warm_s=warm_s,
        )
    return access


def pod_installer(settings: Settings) -> Installer:
    """How gpuc gets onto a rented pod: its bundle, run by the image's python3 (a loopback sandbox names its own)."""
    python = settings.ssh_sandbox_python
    return Installer(python) if python else IMAGE_PYTHON


def wait_running(provider: Provider, pod_id: str, ctx: Ctx, timeout_s: float) -> Pod:
    start = ctx.clock.now()
    last = ""
    # A pipe or a file: a plain line every GPUC_PROGRESS_EVERY_S (30 s) instead of the \r line.
    ticker = Ticker("booting", ctx.clock, every_s=ctx.settings.progress_every_s)
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
        ticker.tick(pod.status)
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
