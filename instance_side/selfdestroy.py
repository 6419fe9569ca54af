"""The pod destroys itself with the key the platform scopes to it, never an account key; with the same
key it stops itself when its kept window is over (F16: results it could not copy stay on its disk).

The RunPod and Vast calls are core/providers/podkey.py's (standard library only, urllib), imported at
destroy time: the agent holds this module for hours and loads them only when the pod's end needs them. The
local provider's sandbox pods run the laptop's own interpreter and gpuc, so theirs is the laptop's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from gpuc.core.errors import ConfigError
from gpuc.core.podinstall import image_environ
from gpuc.instance_side.podfiles import POD_ID_ENV, AgentConfig


class Destroyer(Protocol):
    """core.providers.base.SelfDestroyer, structurally."""

    def destroy_self(self) -> str: ...

    def stop_self(self) -> str: ...


def container_environ(proc_root: Path = Path("/proc")) -> dict[str, str]:
    """The environment the platform gave the container's first process.

    RunPod and Vast inject the pod-scoped key and the pod id there (RUNPOD_API_KEY + RUNPOD_POD_ID,
    CONTAINER_API_KEY + CONTAINER_ID); a process started over ssh sees them only if its shell happened
    to source them, so the wrapper and the agent read them from PID 1 as a fallback.
    """
    try:
        raw = (proc_root / "1" / "environ").read_bytes()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key:
            out[key.decode(errors="replace")] = value.decode(errors="replace")
    return out


def make_destroyer(
    cfg: AgentConfig, environ: Mapping[str, str] | None = None, *, proc_root: Path = Path("/proc")
) -> Destroyer:
    env = dict(os.environ if environ is None else environ)
    if cfg.provider == "local":
        home = cfg.local_home or env.get("GPUC_LOCAL_HOME")
        if not home:
            raise ConfigError("local pod config lacks local_home", hint="re-run `gpuc up`")
        try:
            from gpuc.core.providers.local import LocalSelfDestroyer
        except ImportError:  # a bundle (a sandbox pod booted from its kit): the laptop's gpuc does it
            return LaptopLocalDestroyer(home, cfg.pod_id)
        local: Destroyer = LocalSelfDestroyer({"GPUC_LOCAL_HOME": home, POD_ID_ENV: cfg.pod_id})
        return local
    platform_env = {**container_environ(proc_root), **env}
    if cfg.provider == "runpod":
        from gpuc.core.providers.podkey import RunPodSelfDestroyer

        return RunPodSelfDestroyer.from_environ(platform_env)
    if cfg.provider == "vast":
        from gpuc.core.providers.podkey import VastSelfDestroyer

        return VastSelfDestroyer.from_environ(platform_env)
    raise ConfigError(f"unknown provider {cfg.provider!r} in the pod config", hint="re-run `gpuc up`")


class LaptopLocalDestroyer:
    """A local sandbox pod that runs gpuc's bundle (booted from its kit, in the tests and the demo): the local
    provider is the laptop's (sqlite, pydantic settings), so its own interpreter, which has the laptop's gpuc
    when the bundle is off its path, ends the pod. Never on a rented pod: those have no local provider."""

    def __init__(self, home: str, pod_id: str) -> None:
        self.home = home
        self.pod_id = pod_id

    def destroy_self(self) -> str:
        return self._run("destroy_self")

    def stop_self(self) -> str:
        return self._run("stop_self")

    def _run(self, verb: str) -> str:
        code = (
            "import sys; from gpuc.core.providers.local import LocalSelfDestroyer as L; "
            f"print(getattr(L({{'GPUC_LOCAL_HOME': sys.argv[1], {POD_ID_ENV!r}: sys.argv[2]}}), {verb!r})())"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, self.home, self.pod_id],
            capture_output=True, text=True, timeout=120, env=image_environ(os.environ), check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise ConfigError(f"the local sandbox's {verb} failed: {done.stderr.strip()[-300:]}", hint="gpuc down")
        return done.stdout.strip()
