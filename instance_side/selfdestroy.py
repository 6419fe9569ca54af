"""The pod destroys itself with the key the platform scopes to it, never an account key; with the same
key it stops itself when its kept window is over (F16: results it could not copy stay on its disk).

The RunPod and Vast calls are core/providers/podkey.py's (standard library only, urllib), imported at
destroy time: the agent holds this module for hours and loads them only when the pod's end needs them. The
local provider's sandbox pods run the laptop's own interpreter and gpuc, so theirs is the laptop's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from gpuc.core.errors import ConfigError
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
        from gpuc.core.providers.local import LocalSelfDestroyer

        home = cfg.local_home or env.get("GPUC_LOCAL_HOME")
        if not home:
            raise ConfigError("local pod config lacks local_home", hint="re-run `gpuc up`")
        return LocalSelfDestroyer({"GPUC_LOCAL_HOME": home, POD_ID_ENV: cfg.pod_id})
    platform_env = {**container_environ(proc_root), **env}
    if cfg.provider == "runpod":
        from gpuc.core.providers.podkey import RunPodSelfDestroyer

        return RunPodSelfDestroyer.from_environ(platform_env)
    if cfg.provider == "vast":
        from gpuc.core.providers.podkey import VastSelfDestroyer

        return VastSelfDestroyer.from_environ(platform_env)
    raise ConfigError(f"unknown provider {cfg.provider!r} in the pod config", hint="re-run `gpuc up`")
