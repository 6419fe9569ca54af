"""`python -m gpuc.instance_side boot [--again]`: a pod starts itself with no laptop (core/bootkit.py's onstart).

`boot`, a re-rented pod's first start, under the image's python3 with only gpuc's own files on its path (the
onstart unpacked the wheel; gpuc's dependencies are not installed yet, so this half is stdlib only):
    boot.json (the watchdog's BootAnswer, validated by hand) -> install the wheel with the kit's installer (the
    same scripts as `up`, core/podinstall.py) -> secrets.env and config.json (mode 600, as `up` writes them)
then, re-run through the installed launcher (`boot --installed`, with the dependencies):
    the agent (detached) -> the project (fetched, checked, unpacked as `ask unpack` does) -> the bootstrap, if
    any -> verify the GPU (a failure ends the pod: sync -> notify -> destroy) -> the last push restored into
    results/ (a failure starts no job: exit 75, the agent keeps watching, the pod's event says why) -> the job
    under the wrapper (detached, as `up` starts it) -> boot.json removed (its secrets are in secrets.env).

`boot --again`, at every later container start (a paused Vast pod resumed: its processes were killed, its disk
kept): the agent again if none holds its lock, and the job wrapper again with the same command and job id (the
job resumes from its own results/ on disk). Never a second bootstrap, restore or verification; nothing but the
agent when the job had ended, a wrapper still runs, or the pod ended.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpuc.core import wire
from gpuc.core.bootkit import BOOT_FILE, BOOT_SITE, BOOT_TICKET_ENV
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.podinstall import image_environ, installer_named
from gpuc.core.podpaths import CLAIM_ENV, RESUME_ENV
from gpuc.core.podsecrets import pod_secrets, render_env_file
from gpuc.core.wire import WireError
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, atomic_write

FETCH_TIMEOUT_S = 600.0
BOOTSTRAP_TIMEOUT_S = 3 * 3600.0
VERIFY_TIMEOUT_S = 300.0
NOTIFY_BUDGET_S = 8.0
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class BootError(GpucError):
    """This pod cannot boot from its kit; what was wrong is the message (never a secret)."""


def say(text: str) -> None:
    """One line into boot.out (the onstart sends this process's output there)."""
    print(f"gpuc boot: {text}", flush=True)


# -- boot.json --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BootPlan:
    """core/api.py BootAnswer (and its BootKit), read against their one declaration (core/wire.py: the bundle's
    schema of the watchdog's models), with the standard library: half of the boot runs under the image's
    python3 with only gpuc's own files on its path."""

    wheel_name: str
    wheel_sha256: str
    installer: str
    offline_python: str | None
    config: dict[str, Any]
    secrets: dict[str, str]
    token: str
    claim: str | None = None
    resume_from: str | None = None
    project_url: str | None = None
    project_sha256: str | None = None
    bootstrap: dict[str, Any] | None = None
    command: list[str] | None = None
    job_id: str | None = None

    @classmethod
    def load(cls, path: Path) -> BootPlan:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"no {BOOT_FILE} at {path}", hint="only a re-rented pod's onstart writes it") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {BOOT_FILE}: {type(exc).__name__}", hint="the watchdog's answer") from None
        return cls.parse(data)

    @classmethod
    def parse(cls, data: object) -> BootPlan:
        try:
            answer = wire.read("BootAnswer", data)
        except WireError as exc:
            raise ConfigError(f"{BOOT_FILE}: {exc}", hint="the watchdog's boot kit is not one gpuc wrote") from None
        kit: dict[str, Any] = answer["kit"]
        try:
            installer_named(kit["installer"], kit["offline_python"])
        except ValueError as exc:
            raise ConfigError(f"{BOOT_FILE}: kit.installer: {exc}", hint="re-run `gpuc up --recover`") from None
        if (kit["project_url"] is None) != (kit["project_sha256"] is None):
            raise ConfigError(f"{BOOT_FILE}: kit.project_url comes with its project_sha256", hint="re-run `gpuc up`")
        if kit["job_id"] is not None and not _JOB_ID.fullmatch(kit["job_id"]):
            raise ConfigError(f"{BOOT_FILE}: kit.job_id is not a job id", hint="re-run `gpuc up`")  # a file name here
        if kit["command"] is not None and not kit["command"]:
            raise ConfigError(f"{BOOT_FILE}: kit.command is empty", hint="re-run `gpuc up`")
        return cls(
            wheel_name=kit["wheel_name"],
            wheel_sha256=kit["wheel_sha256"],
            installer=kit["installer"],
            offline_python=kit["offline_python"],
            config=kit["config"],
            secrets=kit["secrets"],
            token=answer["token"],
            claim=answer["claim"],
            resume_from=answer["resume_from"],
            project_url=kit["project_url"],
            project_sha256=kit["project_sha256"],
            bootstrap=kit["bootstrap"],
            command=kit["command"],
            job_id=kit["job_id"],
        )


# -- the first half: install, then the pod's files ---------------------------------------------------------
def boot(paths: PodPaths, environ: Mapping[str, str]) -> int:
    """The first start of a re-rented pod; on success this process becomes `boot --installed` (never returns)."""
    boot_file = paths.state / BOOT_FILE
    try:
        plan = BootPlan.load(boot_file)
        config = AgentConfig.from_mapping(plan.config)  # the agent's own reading, before anything is installed
        container = environ.get("CONTAINER_ID")
        if container and container != config.pod_id:
            raise BootError(f"the kit is for pod {config.pod_id}, this is {container}")
        install(paths, plan, child_environ(environ, paths))
        write_pod_files(paths, plan)
    except (GpucError, OSError, subprocess.SubprocessError) as exc:
        boot_file.unlink(missing_ok=True)
        say(f"boot failed: {reason(exc)}; nothing started")
        return 1
    say("gpuc installed, config and secrets written; starting the pod")
    python = str(paths.python)
    os.execve(python, [python, "-m", "gpuc.instance_side", "boot", "--installed"], child_environ(environ, paths))


def install(paths: PodPaths, plan: BootPlan, env: Mapping[str, str]) -> None:
    """The wheel the onstart fetched, checked again, installed as `up` installs it (client/onpod/provision.py)."""
    wheel = paths.code / plan.wheel_name
    if hashlib.sha256(wheel.read_bytes()).hexdigest() != plan.wheel_sha256:
        raise BootError(f"{plan.wheel_name} does not match the kit's sha256")
    installer = installer_named(plan.installer, plan.offline_python)
    # The onstart found this python (core/podinstall.py's search) and runs the boot with it.
    script = installer.script(paths, PurePosixPath(str(wheel)), installer.python or sys.executable)
    done = subprocess.run(
        ["sh", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, timeout=installer.timeout_s, env=env
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).decode(errors="replace").strip()[-400:]
        raise BootError(f"installing gpuc failed (exit {done.returncode}): {tail}")
    atomic_write(paths.code / "installed.sha256", f"{plan.wheel_sha256}\n", 0o644)


def write_pod_files(paths: PodPaths, plan: BootPlan) -> None:
    """secrets.env and config.json exactly as `up` writes them (client/onpod/provision.py install_agent): mode
    600 from the first byte. config.json last: its presence tells the next container start to boot --again."""
    chosen = {**plan.secrets, **({CLAIM_ENV: plan.claim} if plan.claim else {})}
    atomic_write(paths.secrets, render_env_file(pod_secrets(chosen, plan.token)), 0o600)
    atomic_write(paths.config, json.dumps(plan.config, indent=2) + "\n", 0o600)


def child_environ(environ: Mapping[str, str], paths: PodPaths) -> dict[str, str]:
    """What the pod's processes start with: the container's env without the spent ticket, without
    GPUC_RESUME_FROM (restored once, by the boot: a wrapper started again must never put an older push over
    what the job wrote since) and without the wheel's unpacked copy on PYTHONPATH (the install's launcher
    puts gpuc on the path)."""
    env = {k: v for k, v in environ.items() if k not in (BOOT_TICKET_ENV, RESUME_ENV)}
    return image_environ(env, str(paths.code / BOOT_SITE))


def reason(exc: BaseException) -> str:
    if isinstance(exc, GpucError):
        return exc.message
    if isinstance(exc, OSError):
        return f"{exc.strerror or type(exc).__name__} ({getattr(exc, 'filename', None) or ''})"
    return type(exc).__name__


# -- what the second half (instance_side/podstart.py) uses ----------------------------------------------
def fetch(url: str, sha256: str, timeout_s: float = FETCH_TIMEOUT_S) -> bytes:
    """A kit file by its URL (file:// or a presigned https GET), checked against its sha256."""
    if not url.startswith(("file://", "https://", "http://")):
        raise BootError("a kit URL must be file://, https:// or http://")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            data: bytes = answer.read()
    except (OSError, ValueError) as exc:
        # Never the URL itself: a presigned URL is a key to the file for days.
        raise BootError(f"could not fetch a kit file: {type(exc).__name__}") from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise BootError("a kit file does not match its sha256")
    return data


def run_logged(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float, scrub: Callable[[str], str]
) -> tuple[int, str]:
    """A step's exit code and output; the output also goes to boot.out, every secret masked."""
    try:
        done = subprocess.run(
            list(argv), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s, env=dict(env)
        )
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:.0f}s"
    text = (done.stdout + done.stderr).decode(errors="replace")
    for line in text.splitlines()[-40:]:
        say("  " + scrub(line))
    return done.returncode, done.stdout.decode(errors="replace")
