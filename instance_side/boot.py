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
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpuc.core.bootkit import BOOT_FILE, BOOT_SITE, BOOT_TICKET_ENV
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.podinstall import installer_named
from gpuc.core.podpaths import CLAIM_ENV, RESUME_ENV
from gpuc.core.podsecrets import pod_secrets, render_env_file
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, atomic_write

FETCH_TIMEOUT_S = 600.0
BOOTSTRAP_TIMEOUT_S = 3 * 3600.0
VERIFY_TIMEOUT_S = 300.0
NOTIFY_BUDGET_S = 8.0
_WHEEL = re.compile(r"gpuc-[A-Za-z0-9.+_-]+-py3-none-any\.whl")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


class BootError(GpucError):
    """This pod cannot boot from its kit; what was wrong is the message (never a secret)."""


def say(text: str) -> None:
    """One line into boot.out (the onstart sends this process's output there)."""
    print(f"gpuc boot: {text}", flush=True)


# -- boot.json --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BootPlan:
    """core/api.py BootAnswer (and its BootKit) as the pod reads it: with the standard library, since half of
    the boot runs before gpuc's dependencies are installed. Checked field by field; extra fields are ignored."""

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
        answer = _obj(data, "the boot answer")
        kit = _obj(answer.get("kit"), "kit")
        command = kit.get("command")
        if command is not None and not (
            isinstance(command, list) and command and all(isinstance(a, str) for a in command)
        ):
            raise _bad("kit.command", "a non-empty list of strings")
        installer = _text(kit, "installer", optional=True) or "venv"
        offline_python = _text(kit, "offline_python", optional=True)
        try:
            installer_named(installer, offline_python)
        except ValueError as exc:
            raise _bad("kit.installer", f"venv, or offline with offline_python ({exc})") from None
        project_url = _text(kit, "project_url", optional=True)
        project_sha256 = _text(kit, "project_sha256", _HEX64, optional=True)
        if (project_url is None) != (project_sha256 is None):
            raise _bad("kit.project_url", "given with its project_sha256")
        return cls(
            wheel_name=str(_text(kit, "wheel_name", _WHEEL)),
            wheel_sha256=str(_text(kit, "wheel_sha256", _HEX64)),
            installer=installer,
            offline_python=offline_python,
            config=_obj(kit.get("config"), "kit.config"),
            secrets=_strings(kit.get("secrets", {}), "kit.secrets"),
            token=str(_text(answer, "token")),
            claim=_text(answer, "claim", optional=True),
            resume_from=_text(answer, "resume_from", optional=True),
            project_url=project_url,
            project_sha256=project_sha256,
            bootstrap=None if kit.get("bootstrap") is None else _obj(kit.get("bootstrap"), "kit.bootstrap"),
            command=None if command is None else list(command),
            job_id=_text(kit, "job_id", _JOB_ID, optional=True),
        )


def _bad(name: str, should: str) -> ConfigError:
    return ConfigError(f"{BOOT_FILE}: {name} should be {should}", hint="the watchdog's boot kit is not one gpuc wrote")


def _obj(value: object, name: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _bad(name, "a JSON object")
    return value


def _strings(value: object, name: str) -> dict[str, str]:
    values = _obj(value, name)
    if not all(isinstance(v, str) for v in values.values()):
        raise _bad(name, "an object of strings")
    return dict(values)


def _text(
    data: Mapping[str, Any], name: str, shape: re.Pattern[str] | None = None, *, optional: bool = False
) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or (shape is not None and not shape.fullmatch(value)):
        raise _bad(name, "a string of the expected shape")
    return value


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
    script = installer.script(paths, PurePosixPath(str(wheel)))
    done = subprocess.run(
        ["sh", "-c", script], stdin=subprocess.DEVNULL, capture_output=True, timeout=installer.timeout_s, env=env
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).decode(errors="replace").strip()[-400:]
        raise BootError(f"installing gpuc failed (exit {done.returncode}): {tail}")
    paths.python.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(paths.python, installer.launcher(paths), 0o755)
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
    site = str(paths.code / BOOT_SITE)
    kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != site]
    if kept:
        env["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        env.pop("PYTHONPATH", None)
    return env


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
