"""`gpuc demo`: the whole pod life on the embedded default, in well under two minutes.

Story 1: a job writes results/; the wrapper syncs, notifies and destroys; the ledger row closes.
Story 2 (drill): a pod's agent is killed; heartbeats stop; the reaper destroys it; you are told.
Everything runs for real (processes, HTTP, SQLite) with the intervals scaled from minutes to seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpuc.client import podlife
from gpuc.core.clock import SystemClock
from gpuc.core.errors import GpucError
from gpuc.core.models import Pod
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings, load_settings
from gpuc.core.signing import new_token

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
    "functions_timeout_s": 3.0,
}

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
    def __init__(self, settings: Settings, echo: Echo) -> None:
        self.settings = settings
        self.echo = echo
        self.failures: list[str] = []
        self.deps = podlife.build_deps(settings, echo=lambda m: echo(f"    {m}"))
        self.provider = LocalProvider(settings.home, settings=settings)
        self.deps.providers["local"] = self.provider

    def check(self, ok: bool, what: str) -> bool:
        self.echo(f"  {'✓' if ok else '✗'} {what}")
        if not ok:
            self.failures.append(what)
        return ok

    def story_job(self) -> None:
        self.echo("\n[1] a job runs, syncs its results, notifies, and the pod destroys itself")
        opts = podlife.UpOptions(experiment="demo-train", command=["python", "-c", JOB])
        pod = podlife.up(opts, self.deps)
        assert pod is not None
        t_start = time.monotonic()
        gone = podlife.wait_gone(self.deps, pod, 60)
        self.check(
            gone, f"pod {pod.id} destroyed by its wrapper ({time.monotonic() - t_start:.1f}s after start)"
        )
        results = self.settings.home / "results" / "demo-train"
        synced = sorted(p.name for p in results.rglob("*") if p.is_file())
        self.check(synced == ["metrics.json", "weights.bin"], f"results synced before the destroy: {synced}")
        self.check(self._notified(pod, "job_exit"), "notification carries the exit code")
        self.check(self._ledger_closed(pod), "ledger row closed with end and cost")

    def story_drill(self) -> None:
        self.echo("\n[2] drill: the agent is killed (OOM); heartbeats stop; the reaper destroys the pod")
        pod = podlife.up(podlife.UpOptions(experiment="demo-drill"), self.deps)
        assert pod is not None
        self.check(self._wait(lambda: self._last_seen(pod) is not None, 20), "heartbeats reach the watchdog")
        self.provider.kill_role(pod.id, "agent")
        t_kill = time.monotonic()
        self.echo(f"    killed the agent of {pod.id} (SIGKILL)")
        gone = podlife.wait_gone(self.deps, pod, 60)
        self.check(gone, f"reaper destroyed {pod.id} {time.monotonic() - t_kill:.1f}s after the agent died")
        self.check(self._notified(pod, "destroyed", any_kind=True), "a notification landed")
        self.check(self._ledger_closed(pod), "ledger row closed by the reaper's end record")

    def finish(self) -> None:
        self.echo("\n[3] the ledger and the outbox")
        rows, _ = podlife.list_all(self.deps)
        self.check(rows == [], "no pod left at the provider")
        for row in self.deps.ledger().rows():
            self.echo(f"    ledger: {', '.join(row.cells())}")
        for line in self._outbox():
            self.echo(f"    outbox: [{line.get('level', 'info')}] {line.get('title')}: {line.get('message')}")

    # -- helpers -------------------------------------------------------------------------------
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
        status = self.deps.functions.status()
        for rec in status.pods:
            if rec.pod_id == pod.id:
                return rec.last_seen
        return None

    def _ledger_closed(self, pod: Pod) -> bool:
        def closed() -> bool:
            podlife.list_all(self.deps)  # takes in ends recorded by the pod or the reaper
            ledger = self.deps.ledger()
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


def demo_settings(home: Path) -> Settings:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUC_")}
    env["GPUC_HOME"] = str(home)
    env["GPUC_ENV_FILE"] = str(home / ".env")  # the demo never reads the user's real .env
    return load_settings(env, admin_token=new_token(), **FAST)


def run_demo(echo: Echo, home: Path | None = None, keep_home: bool = False) -> int:
    from gpuc.functions.server import start_in_thread

    tmp = home is None
    home = home or Path(tempfile.mkdtemp(prefix="gpuc-demo-"))
    settings = demo_settings(home)
    server = start_in_thread(settings, port=0, reaper_interval_s=settings.reaper_period_s)
    settings = settings.with_overrides(functions_url=server.url)
    echo(f"gpuc demo: local provider + local watchdog at {server.url}, home {home}")
    demo = Demo(settings, echo)
    started = time.monotonic()
    try:
        demo.story_job()
        demo.story_drill()
        demo.finish()
    except GpucError as exc:
        demo.failures.append(str(exc))
        echo(f"  ✗ {exc}")
    finally:
        _cleanup(demo.provider)
        server.stop()
        if tmp and not keep_home:
            shutil.rmtree(home, ignore_errors=True)
    elapsed = time.monotonic() - started
    if demo.failures:
        echo(f"\ndemo FAILED ({len(demo.failures)} check(s)) in {elapsed:.0f}s")
        return 1
    echo(f"\ndemo passed in {elapsed:.0f}s: no pod and no process left behind")
    return 0


def _cleanup(provider: LocalProvider) -> None:
    """Whatever happened, leave no pod and no process behind."""
    clock = SystemClock()
    for pod in provider.list_pods():
        provider.destroy(pod.id)
        provider.confirm_gone(pod.id, clock)
