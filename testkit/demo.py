"""`gpuc demo`: the whole pod life on the embedded default, in well under two minutes.

Story 0 (RunPod): a first rental's traps, each caught before money: no ssh key registered at the account,
a 3 GB volume, a 4-GPU quote, a pool the account cannot use.
Story 1: a job writes results/; the wrapper syncs, notifies and destroys; the ledger row closes.
Story 2 (drill): a pod's agent is killed; heartbeats stop; the reaper destroys it; you are told.
Everything runs for real (processes, HTTP, SQLite) with the intervals scaled from minutes to seconds. The results
go to an S3 API on loopback (ministack, which checks every signature) through the pod's real grant path: the pod
holds no key, asks the watchdog for presigned URLs for its run's prefix, and the watchdog signs them with its own.

`--provider runpod|vast` runs the same stories against the provider's emulator over loopback HTTP,
through the path a rented pod takes: create over the API, ssh (a loopback sshd), the offline install,
the agent; the wrapper destroys with the pod-scoped key, the reaper with the account key
(testkit/platform.py plays the platform's container side).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gpuc.client.context import Ctx
from gpuc.client.pods.down import wait_gone
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.survey import list_all
from gpuc.client.pods.up import up
from gpuc.core import gpunames
from gpuc.core.clock import SystemClock
from gpuc.core.destinations import S3Location
from gpuc.core.errors import ConfigError, GpucError
from gpuc.core.pod import Pod
from gpuc.core.providers.base import Provider
from gpuc.core.providers.local import LocalProvider
from gpuc.core.providers.registry import get_provider
from gpuc.core.settings import SECRET_ENV, Settings
from gpuc.core.settingsload import load_settings
from gpuc.core.signing import new_token
from gpuc.functions.server import start_in_thread

if TYPE_CHECKING:
    from gpuc.testkit.platform import Platform
    from gpuc.testkit.s3server import LoopbackS3

Echo = Callable[[str], None]

# Minutes become seconds: same code paths, same order of events, a demo that fits in a minute.
FAST = {
    "heartbeat_interval_s": 0.5,
    "idle_check_interval_s": 0.5,
    "idle_warn_s": 120.0,
    "idle_destroy_s": 180.0,
    "silence_limit_s": 3.0,
    "destroy_grace_s": 1.5,
    "reaper_period_s": 0.5,
    "local_boot_s": 1.0,
    "sync_interval_s": 60.0,
    "nag_interval_s": 30.0,
    "watchdog_timeout_s": 3.0,
}
# A rented pod is seen running before gpuc is installed over ssh and its agent pings. That install takes
# REAL time, which the demo does not scale: from the create to the agent's first ping, 3 s on an idle
# 2-core machine, 7-9 s at load 8-15 (measured). The real limits (silence 5 min + grace 4 min) leave a real
# install several times its length; 6 s left a loaded machine less than the install, and the demo's own
# watchdog reaped the pod mid-install (its ssh commands then died: exit 255); 20 s still gave a false
# "will destroy" at load 28. 40 s keeps the margin.
# The grace after a wrapper's end covers its self-destroy call (real 4 min): at load 20, 1.5 s did not, and
# the watchdog destroyed the pod first, with the account key.
# The sandbox pods have no torch and no apt: the demo's bootstrap skips both (GPUC_BOOTSTRAP_TORCH=skip).
REMOTE = {**FAST, "silence_limit_s": 40.0, "destroy_grace_s": 10.0, "bootstrap_apt": "", "bootstrap_torch": "skip"}

JOB = (
    "import json, os, time\n"
    "os.makedirs('results', exist_ok=True)\n"
    "for step in range(3):\n"
    "    print(f'training step {step}', flush=True); time.sleep(0.5)\n"
    "json.dump({'loss': 0.123, 'steps': 3}, open('results/metrics.json', 'w'))\n"
    "open('results/weights.bin', 'wb').write(os.urandom(200_000))\n"
    "print('done', flush=True)\n"
)


class Demo:
    def __init__(
        self,
        settings: Settings,
        echo: Echo,
        provider: Provider | None = None,
        platform: Platform | None = None,
        bucket: LoopbackS3 | None = None,
    ) -> None:
        self.settings = settings
        self.bucket = bucket
        self.echo = echo
        check_offline(settings)
        self.failures: list[str] = []
        self.said: list[str] = []
        self.ctx = Ctx(settings, echo=self._say)
        self.provider: Provider = provider or LocalProvider(settings.home, settings=settings)
        self.ctx.providers[self.provider.name] = self.provider
        self.platform = platform

    def _say(self, message: str) -> None:
        self.said.append(message)
        self.echo(f"    {message}")

    def check(self, ok: bool, what: str) -> bool:
        self.echo(f"  {'✓' if ok else '✗'} {what}")
        if not ok:
            self.failures.append(what)
        return ok

    def story_first_rental(self) -> None:
        """RunPod's emulator as a new account: what a first rental trips on, each caught before money."""
        from gpuc.testkit.emulators.runpod import RunPodEmulator  # lazy: see run_remote_demo

        emulator = self.platform.emulator if self.platform is not None else None
        if not isinstance(emulator, RunPodEmulator):
            return
        self.echo("\n[0] a first RunPod rental's traps, each caught before any money")
        name = self.provider.name
        self.check(emulator.ssh_keys == [], "the account has no ssh key registered (a new account's)")
        small = self._refusal(UpOptions(experiment="demo-small", provider=name, volume_gb=3))
        self.check("--volume-gb 10" in small, f"a 3 GB volume refused before renting, with the fix: {small}")
        up(UpOptions(experiment="demo-quad", provider=name, gpu_count=4, dry_run=True), self.ctx)
        quote = next((m for m in self.said if "stock for 4 GPUs" in m), "")
        self.check("x4" in quote, f"a 4-GPU quote is RunPod's price and stock for 4: {quote.strip()}")
        told = next((m for m in self.said if "no ssh key is registered" in m), "")
        self.check(bool(told), "told that no key is registered, and that gpuc hands the pod its own")
        emulator.deny_pool(gpunames.resolve(name, "RTX 4090"), self.settings.runpod_cloud_type)
        try:
            pool = self._refusal(UpOptions(experiment="demo-pool", provider=name))
        finally:
            emulator.denied_pools.clear()
        self.check("not a bad key" in pool, f"a pool the account cannot use is said as such: {pool[:90]}...")
        self.check(emulator.alive() == [], "nothing was rented by any of them")

    def _refusal(self, opts: UpOptions) -> str:
        """`up` refused: its message and its fix, as the user reads them ("" when it did not refuse)."""
        try:
            up(opts, self.ctx)
        except GpucError as exc:
            return str(exc)
        return ""

    def story_job(self) -> None:
        self.echo("\n[1] a job runs, syncs its results, notifies, and the pod destroys itself")
        opts = UpOptions(experiment="demo-train", provider=self.provider.name, command=["python", "-c", JOB])
        pod = up(opts, self.ctx)
        assert pod is not None
        self._check_ssh_line()
        self._check_key_handed(pod)
        self._check_not_marked(pod)
        t_start = time.monotonic()
        gone = wait_gone(self.ctx, pod, 60)
        self.check(gone, f"pod {pod.id} destroyed by its wrapper ({time.monotonic() - t_start:.1f}s after start)")
        synced = self._synced("demo-train")
        # logs/job.log and logs/outcome.json: the job's output and exit code, synced beside its results;
        # logs/push-manifest.json: what the last verified push holds (a later pod resumes from it).
        expected = ["job.log", "metrics.json", "outcome.json", "push-manifest.json", "weights.bin"]
        where = f" to {self.settings.results_bucket} through the pod's grants" if self.bucket is not None else ""
        self.check(synced == expected, f"results and the job's log synced{where} before the destroy: {synced}")
        self.check(self._notified(pod, "job_exit"), "notification carries the exit code")
        self.check(self._ledger_closed(pod), "ledger row closed with end and cost")
        self._check_platform(pod, "pod-scoped key")

    def story_drill(self) -> None:
        self.echo("\n[2] drill: the agent is killed (OOM); heartbeats stop; the reaper destroys the pod")
        pod = up(UpOptions(experiment="demo-drill", provider=self.provider.name), self.ctx)
        assert pod is not None
        self.check(self._wait(lambda: self._last_seen(pod) is not None, 20), "heartbeats reach the watchdog")
        self._check_not_marked(pod)
        self._kill_agent(pod)
        t_kill = time.monotonic()
        self.echo(f"    killed the agent of {pod.id} (SIGKILL)")
        limits = self.ctx.settings.silence_limit_s + self.ctx.settings.destroy_grace_s
        gone = wait_gone(self.ctx, pod, 60 + limits)
        self.check(gone, f"reaper destroyed {pod.id} {time.monotonic() - t_kill:.1f}s after the agent died")
        self.check(self._notified(pod, "destroyed", any_kind=True), "a notification landed")
        self.check(self._ledger_closed(pod), "ledger row closed by the reaper's end record")
        self._check_platform(pod, "account key")

    def run(self) -> None:
        try:
            self.story_first_rental()
            self.story_job()
            self.story_drill()
            self.finish()
        except GpucError as exc:
            self.failures.append(str(exc))
            self.echo(f"  ✗ {exc}")
            for n in self._outbox():  # what the watchdog did meanwhile: a reaped pod explains a failed step
                if n.get("level") in ("warning", "error") and n.get("pod_id"):
                    self.echo(f"    watchdog: {n.get('title')}: {n.get('message')}")

    def finish(self) -> None:
        self.echo("\n[3] the ledger and the outbox")
        rows, _ = list_all(self.ctx)
        self.check(rows == [], "no pod left at the provider")
        if self.platform is not None:
            self.check(self.platform.alive() == {}, f"no pod left at the {self.provider.name} emulator")
        for row in self.ctx.ledger().rows():
            self.echo(f"    ledger: {', '.join(row.cells())}")
        for line in self._outbox():
            body = str(line.get("message")).replace("\n", " / ")  # a push's first line, then the pod's words
            self.echo(f"    outbox: [{line.get('level', 'info')}] {line.get('title')}: {body}")

    # -- helpers -------------------------------------------------------------------------------
    def _synced(self, experiment: str) -> list[str]:
        """The names the pod pushed for `experiment`, read where they landed (the bucket, as its owner lists it)."""
        if self.bucket is None:
            results = self.settings.home / "results" / experiment
            return sorted(p.name for p in results.rglob("*") if p.is_file())
        location = S3Location.parse(self.settings.results_bucket or "")
        listed = self.bucket.objects(location.bucket, f"{location.prefix}/{experiment}/".lstrip("/"))
        return sorted(key.rsplit("/", 1)[-1] for key in listed)

    def _kill_agent(self, pod: Pod) -> None:
        if self.platform is not None:
            self.platform.kill_agent(pod.id)
        elif isinstance(self.provider, LocalProvider):
            from gpuc.testkit.local_faults import kill_role  # lazy: testkit is not in the wheel (see run_remote_demo)

            kill_role(self.provider, pod.id, "agent")

    def _check_ssh_line(self) -> None:
        if self.platform is None:
            return
        line = next((m for m in self.said if m.startswith("ready: ssh ")), None)
        self.check(line is not None, f"up printed the ssh line: {line}")

    def _check_key_handed(self, pod: Pod) -> None:
        """RunPod: with no key registered, the pod's sshd takes only the key its create handed it."""
        from gpuc.testkit.emulators.runpod import RunPodEmulator  # lazy: see run_remote_demo

        emulator = self.platform.emulator if self.platform is not None else None
        if isinstance(emulator, RunPodEmulator) and emulator.sshd_key is not None:
            taken = emulator.pods[pod.id].authorized if pod.id in emulator.pods else ()
            handed = any(k.split()[:2] == emulator.sshd_key.split()[:2] for k in taken)
            self.check(handed, "no key registered at RunPod: the pod took the key gpuc handed it (PUBLIC_KEY)")

    def _check_not_marked(self, pod: Pod) -> None:
        """While `up` installs a pod its agent cannot ping yet: a "will destroy" then is a false alarm."""
        marked = [n for n in self._outbox() if n.get("pod_id") == pod.id and n.get("kind") == "mark"]
        self.check(not marked, "the watchdog never took the pod for silent while up installed it")

    def _check_platform(self, pod: Pod, key: str) -> None:
        """What only the emulator knows: the pod is gone there, destroyed with which key."""
        platform = self.platform
        if platform is None:
            return
        self.check(pod.id not in platform.alive(), f"{pod.id} is gone at the {self.provider.name} emulator")
        by = platform.destroyed_by.get(pod.id)
        self.check(by == key, f"destroyed with the {by or 'no key at all'} (expected: the {key})")

    def _outbox(self) -> list[dict[str, object]]:
        path = self.settings.home / "outbox.jsonl"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]

    def _notified(self, pod: Pod, word: str, any_kind: bool = False) -> bool:
        def found() -> bool:
            for n in self._outbox():
                text = json.dumps(n)
                if pod.id in text and (word in text if any_kind else n.get("kind") == word):
                    return True
            return False

        return self._wait(found, 10)

    def _last_seen(self, pod: Pod) -> float | None:
        status = self.ctx.watchdog.status()
        for rec in status.pods:
            if rec.pod_id == pod.id:
                return rec.last_seen
        return None

    def _ledger_closed(self, pod: Pod) -> bool:
        def closed() -> bool:
            list_all(self.ctx)  # takes in ends recorded by the pod or the reaper
            ledger = self.ctx.ledger()
            rows = ledger.rows()
            return any(r.experiment == pod.experiment and r.end and r.cost_usd for r in rows)

        return self._wait(closed, 10)

    @staticmethod
    def _wait(pred: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if pred():
                return True
            time.sleep(0.2)
        return pred()


# Loopback port 9 (discard): nothing answers there. A provider URL the local demo could ever use points
# at it, so even a slip fails at once instead of reaching a provider.
NOWHERE = "http://127.0.0.1:9"
# What the local demo must never take from the user's shell, .env or config: a provider key (the demo's
# throw-away watchdog reaps at every provider with a key: it once destroyed a user's real gpuc pod and
# still said "demo passed"), a provider URL, a phone, a bucket or a repository.
DEMO_ISOLATION: dict[str, object] = {
    "provider": "local",
    **{field: None for field in SECRET_ENV if field != "admin_token"},
    "runpod_graphql_url": f"{NOWHERE}/graphql",
    "runpod_rest_url": f"{NOWHERE}/v2",
    "vast_url": f"{NOWHERE}/api/v0",
    "results_bucket": None,
    "s3_endpoint_url": None,
    "git_remote": None,
    "ledger_path": None,
}
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


RESULTS_FIELDS = ("results_bucket", "s3_endpoint_url", "s3_access_key_id", "s3_secret_access_key")
DEMO_BUCKET = "gpuc-demo"


def demo_settings(home: Path, results: Mapping[str, str] | None = None) -> Settings:
    """The local demo's settings, built from nothing the user has: its home, its own (empty) .env, and `results`
    (the demo's own loopback bucket: testkit/s3server.py `results_env`), else no destination."""
    environ = {"GPUC_HOME": str(home), "GPUC_ENV_FILE": str(home / ".env"), **(results or {})}
    isolation = {k: v for k, v in DEMO_ISOLATION.items() if not (results and k in RESULTS_FIELDS)}
    return load_settings(environ, admin_token=new_token(), **FAST, **isolation)


def quiet_ssh_warnings() -> None:
    """asyncssh (the loopback ssh server and the throwaway keys) looks up every cipher cryptography still has,
    the deprecated ones included, and some pairs of their versions warn at each lookup: a screenful before the
    demo's first line, about asyncssh's own cipher list, never about the demo. Silenced for asyncssh's modules
    only, before anything imports it; every other warning still shows."""
    asyncssh = r"asyncssh(\.|$)"
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=asyncssh)
    try:
        from cryptography.utils import CryptographyDeprecationWarning
    except ImportError:  # no cryptography: no asyncssh either, and require_ssh says what to install
        return
    warnings.filterwarnings("ignore", category=CryptographyDeprecationWarning, module=asyncssh)


def check_offline(settings: Settings) -> None:
    """Refuse to run a demo that could reach a real account: a provider holding a key must be served on
    loopback (an emulator). Checked again here, whoever built the settings."""
    reachable = {
        "runpod": (settings.runpod_api_key, (settings.runpod_graphql_url, settings.runpod_rest_url)),
        "vast": (settings.vast_api_key, (settings.vast_url,)),
    }
    for name, (key, urls) in reachable.items():
        real = [u for u in urls if urlsplit(u).hostname not in _LOOPBACK]
        if key is not None and real:
            raise ConfigError(
                f"the demo was given a {name} key and a URL off this machine ({real[0]})",
                hint="the demo runs against the local sandbox or an emulator only; report this as a bug",
            )


def run_demo(echo: Echo, home: Path | None = None, keep_home: bool = False, provider: str = "local") -> int:
    """0 when every check passed. Raises GpucError before anything starts (e.g. no sshd here)."""
    if provider != "local":
        return run_remote_demo(echo, provider, home=home, keep_home=keep_home)
    # Lazy: gpuc.testkit is not in the wheel; only a demo run from a clone reaches for it.
    from gpuc.testkit.s3server import results_env, start_s3

    tmp = home is None
    home = home or Path(tempfile.mkdtemp(prefix="gpuc-demo-"))
    with contextlib.ExitStack() as stack:
        if tmp and not keep_home:
            stack.callback(shutil.rmtree, home, True)
        bucket = start_s3(home / "s3")
        stack.callback(bucket.stop, at_once=True)  # the demo's bucket is thrown away with it
        settings = demo_settings(home, results_env(bucket, DEMO_BUCKET))
        server = start_in_thread(settings, port=0, reaper_interval_s=settings.reaper_period_s, links_here=True)
        stack.callback(server.stop)
        settings = settings.with_overrides(watchdog_url=server.url)
        echo(f"gpuc demo: local provider + local watchdog at {server.url}, results to {settings.results_bucket} "
             f"on a loopback S3 API at {bucket.url}, home {home}")  # fmt: skip
        demo = Demo(settings, echo, bucket=bucket)
        started = time.monotonic()
        try:
            demo.run()
        finally:
            cleanup_pods(demo.provider)
        return _verdict(demo, echo, time.monotonic() - started)
    raise AssertionError("unreachable")


def run_remote_demo(echo: Echo, provider: str, home: Path | None = None, keep_home: bool = False) -> int:
    """The same stories against the `provider` emulator, a loopback sshd and sandboxed pods."""
    # Lazy: gpuc.testkit is not in the wheel; only a demo run from a clone reaches for it.
    quiet_ssh_warnings()
    from gpuc.testkit.platform import PROVIDERS, client_environ, start_platform, write_env_file
    from gpuc.testkit.s3server import results_env, start_s3
    from gpuc.testkit.sshd import require_ssh, start_loopback_sshd

    if provider not in PROVIDERS:
        raise ConfigError(f"no demo for provider {provider!r}", hint="use --provider local, runpod or vast")
    require_ssh()  # no ssh client or no asyncssh: say what to install before anything starts
    tmp = home is None
    home = home or Path(tempfile.mkdtemp(prefix="gpuc-demo-"))
    with contextlib.ExitStack() as stack:
        if tmp and not keep_home:
            stack.callback(shutil.rmtree, home, True)
        bucket = start_s3(home / "s3")
        stack.callback(bucket.stop, at_once=True)  # the demo's bucket is thrown away with it
        sshd = start_loopback_sshd(home / "sshd")
        stack.callback(sshd.stop)
        emulator, platform = start_platform(provider, sshd)
        stack.callback(emulator.stop)
        stack.callback(platform.close)  # runs before the emulator stops: containers end first
        write_env_file(home)
        environ = {**client_environ(emulator, sshd, home), **results_env(bucket, DEMO_BUCKET)}
        settings = load_settings(environ, admin_token=new_token(), **REMOTE)
        server = start_in_thread(settings, port=0, reaper_interval_s=settings.reaper_period_s, links_here=True)
        stack.callback(server.stop)
        settings = settings.with_overrides(watchdog_url=server.url)
        echo(
            f"gpuc demo: {provider} emulator at {emulator.url}, sshd at {sshd.host}:{sshd.port}, "
            f"local watchdog at {server.url}, home {home}"
        )
        demo = Demo(settings, echo, provider=get_provider(provider, settings), platform=platform, bucket=bucket)
        started = time.monotonic()
        try:
            demo.run()
        finally:
            cleanup_pods(demo.provider)
            for provider_client in demo.ctx.providers.values():
                provider_client.close()
            demo.ctx.watchdog.close()
            platform.close()
            left = platform.leftovers()
            demo.check(not left, f"no process left in the pods' sandboxes {left or ''}".rstrip())
        return _verdict(demo, echo, time.monotonic() - started)
    raise AssertionError("unreachable")


def _verdict(demo: Demo, echo: Echo, elapsed: float) -> int:
    if demo.failures:
        echo(f"\ndemo FAILED ({len(demo.failures)} check(s)) in {elapsed:.0f}s")
        return 1
    echo(f"\ndemo passed in {elapsed:.0f}s: no pod and no process left behind")
    return 0


def cleanup_pods(provider: Provider) -> None:
    """Whatever happened, leave no pod and no process behind."""
    clock = SystemClock()
    for pod in provider.list_pods():
        if pod.managed:
            provider.destroy(pod.id)
            provider.confirm_gone(pod.id, clock)
