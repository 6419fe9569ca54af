"""Provisioning a rented pod over ssh (after RUNNING; docs/contributing.md walks `up` step by step):

    wait for ssh -> the image's python3 (none usable: refused before anything else, `up` destroys the pod)
    -> upload gpuc's pod bundle (built from this install) -> unpack it -> config + secrets + start the agent
    FIRST (install_agent) -> check the agent lives -> bootstrap -> verify

The agent starts before anything slow, so from then on an idle or forgotten pod is bounded by the
idle watch and the heartbeats. A failed verification raises PodVerificationFailed: `up` destroys the
pod and prints why. A failed bootstrap step does not: the pod works, the agent watches it, and the
user (who is at the terminal) gets the step, the reason and the command to re-run it.

The bundle (client/onpod/bundle.py) is built at run time from the installed package's files (an editable
install included), never from git: what runs on the pod is what runs on the laptop. It is byte-for-byte
reproducible, so re-provisioning the same code skips the install. Nothing is installed from a package index.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from gpuc.client.onpod.access import results_bucket_for
from gpuc.client.onpod.bundle import Bundle, build_bundle
from gpuc.client.onpod.ssh import SshAccess, wait_for_ssh
from gpuc.core.clock import Clock
from gpuc.core.errors import GpucError
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.podconfig import PodConfig, pod_secrets, render_env_file
from gpuc.core.podinstall import PROBE_TIMEOUT_S, Found, Installer, probe_script, python_missing_hint, read_probe
from gpuc.core.podinstall import q as _q
from gpuc.core.podpaths import STATE_REL, PodPaths
from gpuc.core.providers.base import PodAccess, Provider
from gpuc.core.providers.local import LocalProvider
from gpuc.core.redact import redact
from gpuc.core.settings import Settings
from gpuc.instance_side.verify import parse_verdict  # the verdict is the pod's own wire format


class Caller(Protocol):
    """What provisioning needs of the command that rents (client/context.py's Ctx is one): onpod/ sits
    below the commands' context, so it names the few parts it uses instead of importing it."""

    clock: Clock
    echo: Callable[[str], None]

    @property
    def settings(self) -> Settings: ...

    def provider(self, name: str) -> Provider: ...


BOOTSTRAP_TIMEOUT_S = 3 * 3600.0
VERIFY_TIMEOUT_S = 300.0
AGENT_START_WAIT_S = 15.0


class ProvisionError(GpucError):
    """Getting gpuc onto the pod failed; `up` destroys the pod."""


class PodVerificationFailed(GpucError):
    """The machine is not what we pay for; `up` destroys the pod."""


IMAGE_PYTHON = Installer()  # the image's own python3, found on the pod


class PythonMissing(ProvisionError):
    """The image has no python3 the pod's code can run on: refused before anything is installed."""


# -- installing it -------------------------------------------------------------------------------
def _rel(paths: PodPaths, path: Path) -> str:
    """A pod path relative to the pod's root: what PodAccess.put_file takes."""
    return str(path.relative_to(paths.root))


def find_python(access: PodAccess, installer: Installer) -> Found:
    """The python the pod's code will run on, or PythonMissing with what the image has instead and the fix."""
    _, out = access.read(["sh", "-c", probe_script(installer.python)], timeout_s=PROBE_TIMEOUT_S)
    found = read_probe(out)
    if not found.usable:
        raise PythonMissing(
            f"the image has no python3 gpuc's pod side can run on (found: {redact(found.instead)[:300]})",
            hint=f"the pod was destroyed. {python_missing_hint()}",
        )
    return found


def install_code(access: PodAccess, bundle: Bundle, installer: Installer, echo: Callable[[str], None]) -> bool:
    """Find the image's python, upload the bundle and unpack it; False when this exact bundle is already
    installed (nothing done)."""
    paths = access.paths
    marker = paths.code / "installed.sha256"
    code, out = access.read(["cat", str(marker)], timeout_s=60.0)
    if code == 0 and out.strip() == bundle.sha256:
        code, _ = access.read(["test", "-x", str(paths.python)], timeout_s=60.0)
        if code == 0:
            echo(f"  gpuc already installed on the pod (this bundle, sha256 {bundle.sha256[:12]})")
            return False
    found = find_python(access, installer)
    started = time.monotonic()
    remote = paths.code / bundle.filename
    access.put_file(_rel(paths, remote), bundle.data, 0o644)
    script = installer.script(paths, PurePosixPath(str(remote)), str(found.path))
    code, out = access.run(["sh", "-c", script], timeout_s=installer.timeout_s)
    if code != 0:
        raise ProvisionError(
            f"installing gpuc on the pod failed (exit {code}): {redact(out.strip()[-400:])}",
            hint="the pod was destroyed; the pod's own error is above",
        )
    access.put_file(_rel(paths, marker), f"{bundle.sha256}\n".encode(), 0o644)
    echo(
        f"  gpuc installed on the pod for python {found.version} at {found.path}, in "
        f"{time.monotonic() - started:.1f} s (its {len(bundle.data) // 1024} KB bundle, sha256 {bundle.sha256[:12]})"
    )
    return True


# -- starting the pod's agent -------------------------------------------------------------------------
def pod_config(pod: Pod, spec: PodSpec, ctx: Caller, **extra: object) -> PodConfig:
    """The pod's config.json: what install_agent writes, and what a recovering run's boot kit carries for
    the pods the watchdog rents after an outbid (client/pods/recovery/prepare.py), so both start the same agent."""
    local = isinstance(ctx.provider(pod.provider), LocalProvider)
    return PodConfig.for_pod(
        ctx.settings,
        pod_id=pod.id,
        provider=pod.provider,
        experiment=spec.experiment,
        run_id=spec.run_id,
        gpu_expected=pod.gpu,
        gpu_count=spec.gpu_count,
        price_per_hour=pod.price_per_hour,
        simulated_gpu=local,
        local_home=str(ctx.settings.home) if local else None,
        **extra,  # deadline_at: the one `up` registered (the agent ends the pod then, F15)
    ).model_copy(update={"results_bucket": results_bucket_for(ctx.settings, local=local)})


def install_agent(
    access: PodAccess, pod: Pod, spec: PodSpec, ctx: Caller, secrets_env: dict[str, str], token: str, **extra: object
) -> None:
    """Config and secrets go in as files (mode 600), never as env vars or argv; the agent starts first."""
    config = pod_config(pod, spec, ctx, **extra)
    access.put_file(f"{STATE_REL}/config.json", config.model_dump_json(indent=2).encode(), 0o600)
    access.put_file(f"{STATE_REL}/secrets.env", render_env_file(pod_secrets(secrets_env, token)).encode(), 0o600)
    access.spawn(["python", "-m", "gpuc.instance_side", "agent"], role="agent")
    ctx.echo(f"  agent started on {pod.id} (heartbeat every {config.heartbeat_interval_s:g}s)")


# -- the agent, the bootstrap, the verdict -----------------------------------------------------------
def check_agent_alive(access: PodAccess, *, wait_s: float = AGENT_START_WAIT_S) -> int:
    """The agent's pid once it holds its lock (it writes the pid there), or ProvisionError with the
    tail of its output. A pod without a live agent has no idle watch and sends no heartbeats."""
    paths = access.paths
    lock, out = _q(paths.agent_lock), _q(paths.state / "agent.out")
    script = (
        f"i=0; while [ $i -lt {int(wait_s * 4)} ]; do "
        f'p=$(cat {lock} 2>/dev/null); if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then echo "$p"; exit 0; fi; '
        "i=$((i+1)); sleep 0.25; done; "
        f"tail -n 20 {out} 2>/dev/null; exit 1"
    )
    code, text = access.run(["sh", "-c", script], timeout_s=wait_s + 60.0)
    last = text.strip().splitlines()[-1:] or [""]
    if code != 0 or not last[0].isdigit():
        raise ProvisionError(
            f"the agent did not start on the pod: {redact(text.strip()[-400:]) or 'no output'}",
            hint="the pod was destroyed; the agent's own error is above",
        )
    return int(last[0])


def bootstrap_plan(settings: Settings) -> dict[str, Any]:
    """bootstrap.json for the pod (instance_side.bootstrap.BootstrapPlan reads it)."""
    return {
        "repo_url": settings.git_remote,
        "requirements": settings.bootstrap_requirements,
        "apt": settings.bootstrap_apt.split(),
        "torch": settings.bootstrap_torch == "check",
        "models": [m.strip() for m in (settings.bootstrap_models or "").split(",") if m.strip()],
        "smoke": settings.bootstrap_smoke,
        "python": "python3",
    }


_DEPS_FAILED = re.compile(r"^\s*deps\s+[\d.]+s\s+failed\s+(.*)$")


def run_bootstrap(
    access: PodAccess, settings: Settings, echo: Callable[[str], None], scrub: Callable[[str], str]
) -> tuple[bool, str | None]:
    """(every step worked, why the project's requirements did not install when they did not)."""
    paths = access.paths
    access.put_file(_rel(paths, paths.bootstrap_plan), json.dumps(bootstrap_plan(settings), indent=2).encode(), 0o600)
    echo("  bootstrap: system tools, torch, git, deps, HF login, models, smoke ...")
    code, out = access.run(["python", "-m", "gpuc.instance_side", "bootstrap"], timeout_s=BOOTSTRAP_TIMEOUT_S)
    for line in [line.strip() for line in out.splitlines() if line.strip()][-12:]:
        echo("    " + scrub(line))
    deps = [m.group(1) for m in map(_DEPS_FAILED.match, out.splitlines()) if m]
    if code != 0 and not deps:
        echo(
            "  bootstrap incomplete: the pod runs and is watched; fix the cause, then ssh in and re-run:"
            f" {paths.python} -m gpuc.instance_side bootstrap"
        )
    return code == 0, scrub(deps[-1]) if deps else None


def verify_pod(access: PodAccess, expect_gpu: str | None, expect_count: int = 1) -> dict[str, Any]:
    """The pod's verdict (instance_side.verify), as JSON."""
    argv = ["python", "-m", "gpuc.instance_side", "verify", "--expect-count", str(expect_count)]
    if expect_gpu:
        argv += ["--expect-gpu", expect_gpu]
    code, out = access.read(argv, timeout_s=VERIFY_TIMEOUT_S)
    verdict = parse_verdict(out)
    if verdict is None:
        raise PodVerificationFailed(
            f"verification gave no verdict (exit {code}): {redact(out.strip()[-300:]) or 'no output'}",
            hint="the pod was destroyed; run gpuc up again",
        )
    return verdict


def raise_if_failed(verdict: dict[str, Any]) -> None:
    """What `up` calls on a verdict: a failure raises with the reasons (and `up` destroys the pod)."""
    if verdict.get("ok"):
        return
    reasons = [str(c.get("detail")) for c in verdict.get("checks", []) if c.get("status") == "fail"]
    raise PodVerificationFailed(
        "the pod failed verification: " + ("; ".join(reasons) or "unknown reason"),
        hint="it was destroyed (not billed further); gpuc up again gets another machine",
    )


def describe_verdict(verdict: dict[str, Any]) -> list[str]:
    return [f"  verify {c.get('name')}: {c.get('status')} - {c.get('detail')}" for c in verdict.get("checks", [])]


@dataclass
class ProvisionReport:
    wheel_sha256: str
    installed: bool
    agent_pid: int
    bootstrap_ok: bool | None
    verdict: dict[str, Any] | None
    notes: list[str] = field(default_factory=list)
    deps_failed: str | None = None  # the requirements' install error, when it failed


def provision(
    access: PodAccess,
    pod: Pod,
    spec: PodSpec,
    ctx: Caller,
    secrets_env: dict[str, str],
    token: str,
    *,
    installer: Installer = IMAGE_PYTHON,
    ssh_timeout_s: float = 300.0,
    bootstrap: bool = True,
    verify: bool = True,
    before_bootstrap: Callable[[PodAccess], None] | None = None,
    deadline_at: float | None = None,
    job_needs_deps: bool = False,
    warm_s: float = 0.0,
) -> ProvisionReport:
    """Everything `up` does on a rented pod once it is RUNNING. Raises ProvisionError or
    PodVerificationFailed (a GpucError): `up` then destroys the pod and prints the message."""
    secrets = [*secrets_env.values(), token, *ctx.settings.secret_values()]

    def scrub(text: str) -> str:
        return redact(text, secrets)

    if isinstance(access, SshAccess):
        wait_for_ssh(access, clock=ctx.clock, timeout_s=ssh_timeout_s)
    bundle = build_bundle()
    installed = install_code(access, bundle, installer, ctx.echo)
    install_agent(access, pod, spec, ctx, secrets_env, token, deadline_at=deadline_at, warm_s=warm_s)
    agent_pid = check_agent_alive(access)
    if before_bootstrap is not None:
        before_bootstrap(access)  # the project's upload: the bootstrap installs its requirements
    report = ProvisionReport(bundle.sha256, installed, agent_pid, None, None)
    if bootstrap:
        report.bootstrap_ok, report.deps_failed = run_bootstrap(access, ctx.settings, ctx.echo, scrub)
        if report.deps_failed is not None and job_needs_deps:
            # The job would die on its first import, and the pod would then sit idle, billed: not started.
            # A fresh pod whose job never ran has nothing in results/ to sync; `up` destroys it.
            raise ProvisionError(
                f"the project's requirements did not install on the pod, so the job was not started: "
                f"{report.deps_failed}",
                hint="the pod was destroyed (nothing ran, nothing to sync); fix requirements.txt, then gpuc up again",
            )
    if verify:
        verdict = verify_pod(access, spec.gpu_type or pod.gpu, spec.gpu_count)
        report.verdict = verdict
        for line in describe_verdict(verdict):
            ctx.echo(scrub(line))
        raise_if_failed(verdict)
    return report
