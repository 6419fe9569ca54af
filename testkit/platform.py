"""The emulated platform behind `gpuc demo --provider runpod|vast` and the CLI tests against it.

The RunPod and Vast emulators speak the HTTP APIs; a real platform also runs each pod as a container.
Here a loopback sshd is every pod's ssh server and `<ssh_sandbox_root>/<pod id>` its root, and this
module does the rest of the platform's job:

- the moment a pod exists, its `container.env` holds what the platform injects into the container
  (pod id, pod-scoped key, the API's URL): SshAccess sources it in every remote command, so the
  wrapper's self-destroy really goes through the emulator with the pod's own key. It also names the
  GPU the pod rented, which the NVML stand-in (client/emulated_gpu) reports to verification and the
  agent: this machine has no GPU, and a pod without one would rightly be destroyed.
- when the emulator no longer has the pod, its processes die, as a container's would: the emulator
  knows nothing of processes, and a demo must leave none behind.
- a Vast container runs its `onstart` each time it starts (reference: "run after Vast's entrypoint"): when
  the instance first reads running, and again when a paused (outbid) instance resumes. A pause stops the
  container: its processes die at once ("killing running processes"), its disk (the sandbox) is kept.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from gpuc.core.podpaths import POD_ROOT_ENV, PodPaths
from gpuc.core.settings import SECRET_ENV
from gpuc.testkit import emulated_gpu
from gpuc.testkit.emulated_gpu import pynvml as nvml_standin
from gpuc.testkit.emulators.runpod import EmuPod, RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator, VastInst, VastOfferState
from gpuc.testkit.sshd import LoopbackSshd

PROVIDERS = ("runpod", "vast")
KILL_GRACE_S = 1.0  # a destroyed container's processes die a moment after the API answers, not during
KILL_POLL_S = 0.2
KILL_WAIT_S = 5.0  # a stop waits this long at most for its killed processes to end
ACCOUNT = "account key"
POD_KEY = "pod-scoped key"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The stand-in account's prepaid credit: under the balance cap (GPUC_BALANCE_CAP_USD, $20) and over its low mark
# ($5), as docs/first-rental.md asks of a real one, so `gpuc doctor` passes out of the box; it bills down as the
# pods run (the emulators' billing), as a real balance does.
ACCOUNT_USD = 15.0
# Vast hosts a re-rent can take after an outbid (the first machine's going price is then above the bid): RTX
# 4090s passing the default filters, dearer than the first choice, with the floor ($0.20) a $0.22 bid clears.
SPARE_HOSTS = (11684800, 11684801, 11684802)


class Platform:
    """The container side of an emulated platform; `sync()` runs after every API request."""

    def __init__(self, sandbox: Path, *, kill_grace_s: float = KILL_GRACE_S) -> None:
        self.sandbox = sandbox
        self.kill_grace_s = kill_grace_s
        self.emulator: RunPodEmulator | VastEmulator | None = None
        self.base_url = ""
        self.destroyed_by: dict[str, str] = {}  # pod id -> ACCOUNT | POD_KEY
        self._started: set[str] = set()
        self._gone_at: dict[str, float] = {}
        self._up: set[str] = set()  # Vast containers whose processes run (their instance reads running)
        self.onstarts: dict[str, int] = {}  # pod id -> how many times its onstart ran
        self._shells: list[subprocess.Popen[bytes]] = []  # the onstart shells, waited for at close
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._killer = threading.Thread(target=self._kill_loop, name="gpuc-platform", daemon=True)

    def attach(self, emulator: RunPodEmulator | VastEmulator, base_url: str) -> None:
        self.emulator, self.base_url = emulator, base_url
        if isinstance(emulator, VastEmulator):
            emulator.on_pause = self._paused
        self._killer.start()

    # -- what the emulator's request handler calls -----------------------------------------------
    def sync(self, caller: object) -> None:
        """Containers for new pods; pods that went away during this request are noted with the key
        that ended them (the wrapper's pod-scoped key, or the account key of `down` / the reaper)."""
        alive = self.alive()
        with self._lock:
            for pod_id, (gpu, count) in alive.items():
                if pod_id not in self._started:
                    self._start_container(pod_id, gpu, count)
            for pod_id in self._started - set(alive) - set(self._gone_at):
                self._gone_at[pod_id] = time.monotonic()
                self.destroyed_by[pod_id] = ACCOUNT if caller == "account" else POD_KEY
            self._follow_vast_states(alive)

    def _follow_vast_states(self, alive: Mapping[str, tuple[str, int]]) -> None:
        """A Vast container starts when its instance reads running (then its onstart runs) and stops when it
        no longer does (a pause, a stop): its processes die then, its sandbox stays."""
        if not isinstance(self.emulator, VastEmulator):
            return
        for inst in self.emulator.alive():
            pod_id = str(inst.id)
            running = inst.actual == "running" and pod_id in alive
            if running and pod_id not in self._up:
                self._up.add(pod_id)
                if inst.onstart:
                    self._run_onstart(pod_id, inst.onstart, *alive[pod_id])
            elif not running and pod_id in self._up:
                self._up.discard(pod_id)
                self.kill_container(pod_id)

    def _paused(self, pod_id: str) -> None:
        """The emulator's outbid: the container stops at once, before the next API request."""
        with self._lock:
            self._up.discard(pod_id)
        self.kill_container(pod_id)

    def _run_onstart(self, pod_id: str, script: str, gpu: str, count: int) -> None:
        root = self.root(pod_id)
        env = {**self.container_env(pod_id, gpu, count), POD_ROOT_ENV: str(root), "HOME": str(root)}
        self.onstarts[pod_id] = self.onstarts.get(pod_id, 0) + 1
        with open(root / "onstart.out", "ab") as out:
            self._shells.append(subprocess.Popen(  # the script the instance was created with, run in its sandbox
                ["/bin/sh", "-c", script], cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            ))  # fmt: skip

    def alive(self) -> dict[str, tuple[str, int]]:
        """Pod id -> (GPU name, count) for every pod the emulator has."""
        if self.emulator is None:
            return {}
        return {str(p.id): _gpu_of(p) for p in self.emulator.alive()}

    # -- the containers ---------------------------------------------------------------------------
    def root(self, pod_id: str) -> Path:
        return self.sandbox / pod_id

    def container_env(self, pod_id: str, gpu: str, count: int) -> dict[str, str]:
        assert self.emulator is not None
        # The env the pod was created with (a container gets it), then what the platform injects.
        env = dict(_created_env(self.emulator, pod_id))
        env.update(self.emulator.pod_environ(pod_id))
        # Only the URLs from the client environment: the account key never goes onto a pod.
        env.update({k: v for k, v in self.emulator.client_env(self.base_url).items() if k.startswith("GPUC_")})
        env[nvml_standin.NAME_ENV] = gpu
        env[nvml_standin.COUNT_ENV] = str(count)
        env["PYTHONPATH"] = str(Path(emulated_gpu.__file__).parent)
        # The image's PATH, with its `python` (this one) first: an ssh login gets sshd's default PATH,
        # which on a machine with only `python3` (or a venv's python) finds no `python` for the job.
        env["PATH"] = f"{Path(sys.executable).parent}:{IMAGE_PATH}"
        return env

    def _start_container(self, pod_id: str, gpu: str, count: int) -> None:
        root = self.root(pod_id)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        text = "".join(f"{k}={shlex.quote(v)}\n" for k, v in self.container_env(pod_id, gpu, count).items())
        tmp = root / ".container.env.tmp"
        # It holds the pod-scoped key: mode 600 from the first byte.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        tmp.replace(root / "container.env")
        self._started.add(pod_id)

    def processes(self, pod_id: str) -> list[int]:
        """Every process of this pod's container: started over ssh or by its onstart (both export the pod
        root), and their descendants, whose environment the job wrapper may have cleaned of it."""
        marker = f"{POD_ROOT_ENV}={self.root(pod_id)}".encode()
        found: set[int] = set()
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            pid = int(entry.name)
            try:
                environ = (entry / "environ").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            state, parent = stat.rsplit(")", 1)[1].split()[:2]
            if state in ("Z", "X"):  # killed, awaiting its parent's reap: it runs nothing and holds nothing
                continue
            parents[pid] = int(parent)
            if marker in environ.split(b"\0"):
                found.add(pid)
        grown = True
        while grown:  # children of the container's processes are the container's
            more = {pid for pid, parent in parents.items() if parent in found} - found
            found |= more
            grown = bool(more)
        return sorted(found)

    def kill_container(self, pod_id: str) -> int:
        """Every process of the container, all at once, as the kernel ends a container's processes. Killed one by
        one, the first to die would be news to the others on a busy machine: a wrapper would read its job's 137
        and report a failed job before its own kill, where a real stop leaves no one to report. So each is
        stopped (SIGSTOP) first, scanned again until no new one appears (one may have started a child between
        the scan and its stop), and only then are they killed. A SIGKILLed process lingers a moment before the
        kernel ends it, so a stop that returned at the kill would let `leftovers()` see processes already dying."""
        deadline = time.monotonic() + KILL_WAIT_S
        stopped: set[int] = set()
        while (more := set(self.processes(pod_id)) - stopped) and time.monotonic() < deadline:
            signal_each(more, signal.SIGSTOP)
            stopped |= more
        killed: set[int] = set()
        while (pids := set(self.processes(pod_id))) and time.monotonic() < deadline:
            signal_each(pids - killed, signal.SIGKILL)
            killed |= pids
            time.sleep(0.02)
        return len(killed)

    def kill_agent(self, pod_id: str) -> int:
        """The drill's OOM: SIGKILL the pod's agent by the pid it holds its lock with."""
        pid = int(PodPaths(self.root(pod_id)).agent_lock.read_text().strip())
        os.kill(pid, signal.SIGKILL)
        return pid

    def leftovers(self) -> dict[str, list[int]]:
        with self._lock:
            started = sorted(self._started)
        return {pod_id: pids for pod_id in started if (pids := self.processes(pod_id))}

    def close(self) -> None:
        """Every container ends with the platform, whatever the emulator still has."""
        self._stop.set()
        if self._killer.is_alive():
            self._killer.join(timeout=5)
        with self._lock:
            started = sorted(self._started)
        for pod_id in started:
            self.kill_container(pod_id)
        for shell in self._shells:
            with contextlib.suppress(subprocess.TimeoutExpired):
                shell.wait(timeout=5)

    def _kill_loop(self) -> None:
        while not self._stop.wait(KILL_POLL_S):
            now = time.monotonic()
            with self._lock:
                due = [p for p, at in self._gone_at.items() if now - at >= self.kill_grace_s]
            for pod_id in due:
                self.kill_container(pod_id)


def _created_env(emulator: RunPodEmulator | VastEmulator, pod_id: str) -> dict[str, str]:
    if isinstance(emulator, VastEmulator):
        return dict(emulator.instances[int(pod_id)].env)
    return dict(emulator.pods[pod_id].env)


def _gpu_of(pod: EmuPod | VastInst) -> tuple[str, int]:
    if isinstance(pod, EmuPod):
        return pod.gpu.id, pod.gpu_count
    return pod.offer.gpu_name, pod.offer.num_gpus


def start_platform(
    provider: str, sshd: LoopbackSshd, *, account_usd: float = ACCOUNT_USD
) -> tuple[EmulatorServer, Platform]:
    """The emulator of `provider` over loopback HTTP, every pod's ssh at `sshd`, and its containers; its account
    holds `account_usd`, billed down as its pods run."""
    endpoint = (sshd.host, sshd.port)
    emulator: RunPodEmulator | VastEmulator
    if provider == "runpod":
        # A new account: no ssh key registered. A pod reaches the loopback sshd only if its create handed it
        # the key (PUBLIC_KEY), as a real RunPod pod's sshd takes no other.
        user_key = sshd.key.with_name(sshd.key.name + ".pub").read_text().strip()
        emulator = RunPodEmulator(ssh_endpoint=endpoint, sshd_key=user_key, balance=account_usd, bills_down=True)
    elif provider == "vast":
        emulator = VastEmulator(ssh_endpoint=endpoint, credit=account_usd, bills_down=True)
        for offer_id in SPARE_HOSTS:
            emulator.add_offer(VastOfferState(offer_id, "RTX 4090", 0.36, 0.20))
    else:
        raise ValueError(f"no emulated platform for {provider!r}: use one of {', '.join(PROVIDERS)}")
    platform = Platform(sshd.sandbox)
    server = EmulatorServer(emulator).start()
    platform.attach(emulator, server.url)
    emulator.after_request = lambda request: platform.sync(emulator.caller(request))
    return server, platform


def client_environ(
    server: EmulatorServer,
    sshd: LoopbackSshd,
    home: Path,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """What a gpuc client (the CLI, the demo) needs to rent from the emulator and get onto its pods:
    the user's own GPUC_* settings and provider keys are left out, so nothing real is touched."""
    source = os.environ if base is None else base
    secret_names = set(SECRET_ENV.values())
    env = {k: v for k, v in source.items() if not k.startswith("GPUC_") and k not in secret_names}
    env.update(server.client_env())
    env.update(
        {
            "GPUC_HOME": str(home),
            "GPUC_ENV_FILE": str(home / ".env"),
            "GPUC_PROVIDER": server.emulator.provider,
            "GPUC_SSH_KEY_PATH": str(sshd.key),
            "GPUC_SSH_SANDBOX_ROOT": str(sshd.sandbox),
            # The sandbox is on this machine with no network: gpuc goes on offline, run by this python.
            "GPUC_SSH_SANDBOX_PYTHON": sys.executable,
            "GPUC_RESULTS_BUCKET": f"file://{home / 'results'}",
        }
    )
    return env


def write_env_file(home: Path, values: Mapping[str, str] | None = None) -> Path:
    """Rented pods need the user's `.env` (mode 600); the demo's holds nothing secret."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = home / ".env"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in (values or {}).items()))
    os.chmod(path, 0o600)
    return path


def signal_each(pids: set[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


__all__ = [
    "ACCOUNT",
    "POD_KEY",
    "PROVIDERS",
    "Platform",
    "client_environ",
    "start_platform",
    "write_env_file",
]
