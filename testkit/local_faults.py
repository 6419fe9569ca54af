"""What the real clouds do to pods, done to a local sandbox pod: the failure drills of tests and demos.

Not part of the product: `gpuc` itself never pauses, freezes or vanishes a pod. Each function takes the
LocalProvider whose platform state (its SQLite file, its sandboxes) it changes, as an outage or the
provider's console would.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from gpuc.core.errors import NotFound
from gpuc.core.pod import Pod, PodStatus, new_run_id
from gpuc.core.providers.local import LocalProvider


def pause(provider: LocalProvider, pod_id: str) -> None:
    """Interruptible instance outbid: processes frozen, status paused."""
    provider.signal_sandbox(pod_id, signal.SIGSTOP)
    set_status(provider, pod_id, "paused")


def freeze(provider: LocalProvider, pod_id: str) -> None:
    """Container hung: processes frozen, the provider still says running."""
    provider.signal_sandbox(pod_id, signal.SIGSTOP)


def thaw(provider: LocalProvider, pod_id: str) -> None:
    provider.signal_sandbox(pod_id, signal.SIGCONT)


def kill_role(provider: LocalProvider, pod_id: str, role: str, sig: int = signal.SIGKILL) -> None:
    """One process (and its group) dies, the pod lives on: the agent OOM-killed, say."""
    pids = provider.pids(pod_id).get(role)
    if not pids:
        raise NotFound(f"no {role} process on {pod_id}")
    for pid in pids:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue


def vanish(provider: LocalProvider, pod_id: str) -> None:
    """Deleted outside gpuc (the provider's console, a preemption that removed it): no trace is left."""
    provider.require(pod_id)
    provider.destroy(pod_id)
    with provider.transaction() as db:
        db.execute("delete from pods where id = ?", (pod_id,))


def set_status(provider: LocalProvider, pod_id: str, status: PodStatus, since: float | None = None) -> None:
    with provider.transaction() as db:
        db.execute(
            "update pods set status = ?, status_since = ? where id = ?",
            (status, provider.clock.now() if since is None else since, pod_id),
        )


def set_gpu(provider: LocalProvider, pod_id: str, **sim: Any) -> None:
    """Write the sandbox's simulated NVML state (utilisation, error, ssh sessions)."""
    path = provider.paths(pod_id).sim_gpu
    current: dict[str, Any] = {}
    if path.exists():
        current = json.loads(path.read_text())
    current.update(sim)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(current))
    os.replace(tmp, path)


def add_foreign(
    provider: LocalProvider, name: str = "my-own-pod", *, managed_env: bool = False, status: PodStatus = "running"
) -> Pod:
    """A pod the user started outside gpuc: the reaper must never touch it."""
    pod_id = "lp-" + new_run_id()
    now = provider.clock.now()
    provider.paths(pod_id).workspace.mkdir(parents=True)
    with provider.transaction() as db:
        db.execute(
            "insert into pods (id, name, experiment, status, gpu, price, created_at, ready_at, status_since,"
            " managed_env, env) values (?,?,?,?,?,?,?,?,?,?,?)",
            (pod_id, name, None, status, provider.settings.local_gpu, 0.3, now, now, now, int(managed_env), "{}"),
        )
    pod = provider.get(pod_id)
    if pod is None:
        raise NotFound(f"foreign pod {pod_id} was added as {status}: it is not listed")
    return pod
