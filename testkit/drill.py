"""`gpuc drill`: the failure matrix (SPEC F1-F18 and their sub-rows) as measured scenarios on a virtual clock.

Each row is a small scenario that wires the real pieces together -- the pod's Agent and Ender, the
functions' handlers (through `dispatch`), the real SqliteStore and the real reaper -- around an
in-memory provider (or, for F12, the RunPod and Vast emulators behind the real HTTP providers), then
measures what a user pays for: minutes billed after the pod stopped being useful, pods killed that
should have lived, results lost, and notifications sent. The table is data (`RowResult`); the CLI in
client/setup/drill_text.py only prints it.

With faults on (seeded), every row also runs through: provider errors at random calls, the notifier
down, the store unavailable for a while, the functions unreachable from the pod, duplicate scheduled
reaper events and two reapers at once. A fault that blinds a reaper pass costs one period (the reaper
acts on the next pass, by design): a row's bound grows by one period per pass lost to a fault, and the
row says so.
"""

from __future__ import annotations

import importlib
import logging
import math
import random
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.errors import GpucError, ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.models import PodSpec
from gpuc.core.notify import OUTBOX_NAME, Action, Level, Notifier
from gpuc.core.pod import Pod, PodStatus, pod_name
from gpuc.core.podconfig import PodConfig, render_env_file
from gpuc.core.podpaths import CLAIM_ENV, TOKEN_ENV
from gpuc.core.providers.base import Provider
from gpuc.core.settings import SecretStr, Settings
from gpuc.core.signing import derive_key, new_token
from gpuc.functions.app import STORE_NAME, Deps, ProviderPool, Sender, build_deps
from gpuc.functions.edge import Request, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.functions.reaper import reap_once
from gpuc.functions.store import SqliteStore, Store
from gpuc.instance_side.agent import Agent, Probes
from gpuc.instance_side.context import load_context
from gpuc.instance_side.ending import Ender, Ending, Outcome
from gpuc.instance_side.heartbeat import HttpResult, TransportError
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.procs import SshSession
from gpuc.instance_side.push import InlinePusher
from gpuc.instance_side.sync import FileBucketSync, listing_matches, local_listing
from gpuc.testkit.drill_idle import IDLE_ROWS
from gpuc.testkit.fakes import FakeProvider
from gpuc.testkit.podfakes import (
    FakeDestroyer,
    FakeGpu,
    FakeJob,
    FakeProcs,
    FakeProcTree,
    FakeSsh,
    FakeSync,
    SkewedClock,
)

MIN = 60.0
STEP_S = 10.0  # the drill's tick: the agent's own due-times decide what actually runs
FUNCTIONS_URL = "http://functions.drill"
EXPERIMENT = "drill"
SYNC_S = 3.0  # virtual time a results push takes; F1's bound adds it
EXIT_SLACK_S = 10.0  # SPEC F1: destroy within 10 s of the job's exit, plus sync time
PROVIDER_FAULTS = ("503", "429", "timeout", "success_false", "schema_drift")


# -- the table --------------------------------------------------------------------------------------
@dataclass
class RowResult:
    row: str
    failure: str
    caught_by: str
    billed_min: float | None  # after the pod stopped being useful (F14: until the stale reaper shows)
    bound_min: float | None  # None: the bound is not time ("no data lost", "alert only")
    bound_text: str
    false_kills: int = 0
    results_lost: int = 0
    notifications: int = 0
    problems: list[str] = field(default_factory=list)  # anything else the row promises and broke

    @property
    def within_bound(self) -> bool:
        if self.bound_min is None:
            return True
        return self.billed_min is not None and self.billed_min <= self.bound_min + 1e-9

    @property
    def ok(self) -> bool:
        return self.within_bound and self.false_kills == 0 and self.results_lost == 0 and not self.problems


@dataclass
class FaultTally:
    injected: Counter[str] = field(default_factory=Counter)
    pods_leaked: int = 0
    double_creates: int = 0
    double_destroys: int = 0

    @property
    def total(self) -> int:
        return sum(self.injected.values())

    @property
    def ok(self) -> bool:
        return self.pods_leaked == 0 and self.double_creates == 0 and self.double_destroys == 0


@dataclass
class DrillReport:
    rows: list[RowResult]
    faults: FaultTally
    faults_on: bool
    seed: int

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows) and self.faults.ok

    def as_json(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            row = asdict(r)
            row.update(within_bound=r.within_bound, ok=r.ok)
            rows.append(row)
        return {
            "ok": self.ok,
            "seed": self.seed,
            "faults_on": self.faults_on,
            "rows": rows,
            "faults": {
                "injected": self.faults.total,
                "by_kind": dict(sorted(self.faults.injected.items())),
                "pods_leaked": self.faults.pods_leaked,
                "double_creates": self.faults.double_creates,
                "double_destroys": self.faults.double_destroys,
            },
        }


# -- fault plan -------------------------------------------------------------------------------------
class FaultPlan:
    """Seeded. Off: every question answers "no fault". Counts what it injected."""

    def __init__(self, seed: int, *, on: bool, tally: FaultTally, provider_rate: float = 0.04) -> None:
        self.rng = random.Random(seed)
        self.on = on
        self.tally = tally
        self.provider_rate = provider_rate

    def provider_fault(self) -> str | None:
        if not self.on or self.rng.random() >= self.provider_rate:
            return None
        kind = self.rng.choice(PROVIDER_FAULTS)
        self.tally.injected[f"provider {kind}"] += 1
        return kind

    def window(self, kind: str, start: float, span_s: float) -> tuple[float, float] | None:
        """A random outage window of up to span_s within the first hour after start."""
        if not self.on:
            return None
        self.tally.injected[kind] += 1
        begin = start + self.rng.uniform(0, 60 * MIN)
        return begin, begin + self.rng.uniform(span_s / 4, span_s)

    def chance(self, kind: str, p: float) -> bool:
        if self.on and self.rng.random() < p:
            self.tally.injected[kind] += 1
            return True
        return False


def provider_error(kind: str, provider: str) -> ProviderError:
    """What the HTTP providers raise for each fault once their own retries are spent."""
    if kind == "schema_drift":
        return ProviderSchemaError("answer of an unknown shape", provider=provider)
    if kind == "success_false":
        return ProviderError("the provider answered success:false", provider=provider, status=200)
    if kind == "timeout":
        return ProviderUnavailable("no answer within the timeout after 3 tries", provider=provider)
    return ProviderUnavailable(f"HTTP {kind} after 3 tries", provider=provider, status=int(kind))


# -- an in-memory provider that remembers when it stopped billing ---------------------------------
class DrillProvider(FakeProvider):
    """The shared fake (gpuc.testkit.fakes), with the fault plan's provider errors on every call."""

    def __init__(self, clock: FakeClock, plan: FaultPlan, name: str = "drill") -> None:
        super().__init__(clock, name)
        self.plan = plan
        self.balance_usd = 10.0

    def add(self, pod_id: str, **kw: Any) -> Pod:
        kw.setdefault("experiment", EXPERIMENT)
        kw.setdefault("price_per_hour", 0.74)
        if kw.get("created_at") is None:
            kw["created_at"] = self.clock.now()
        return super().add(pod_id, **kw)

    def _maybe_fail(self, operation: str = "") -> None:
        super()._maybe_fail(operation)
        if operation in ("get", "list", "destroy", "stop"):
            kind = self.plan.provider_fault()
            if kind is not None:
                raise provider_error(kind, self.name)


# -- the pod's edges: transport to the real handlers, probes, sync, destroyer ---------------------
class DispatchTransport:
    """The pod's HTTP client, answered by the real handlers in-process. `down` is the pod's network
    to the functions (F10); `blocked` says whether the fault plan cuts it right now."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.down = False

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        now = self.stage.clock.now()
        if self.down or self.stage.in_window("functions unreachable"):
            raise TransportError("ConnectionRefusedError: [Errno 111] Connection refused")
        answer = dispatch(Request("POST", urlsplit(url).path, headers, body), self.stage.deps, now)
        return HttpResult(answer.status, response_bytes(answer))


class FlakySender:
    """The real notifier, unreachable while `down()` says so: always for F13, else the fault plan's window."""

    def __init__(self, inner: Sender, down: Callable[[], bool]) -> None:
        self.inner = inner
        self.down = down

    def send(
        self,
        title: str,
        message: str,
        *,
        pod_id: str | None = None,
        kind: str = "info",
        level: Level = "info",
        actions: Sequence[Action] = (),
    ) -> None:
        self._reach()
        self.inner.send(title, message, pod_id=pod_id, kind=kind, level=level, actions=actions)

    def flush(self) -> None:
        self._reach()
        self.inner.flush()

    def _reach(self) -> None:
        if self.down():
            raise ConnectionError("notification endpoint unreachable")


class FlakyStore:
    """The real store, unavailable inside the fault plan's window (every call raises)."""

    def __init__(self, stage: Stage, inner: SqliteStore) -> None:
        self._stage = stage
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not callable(target) or name == "close":
            return target

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._stage.in_window("store unavailable"):
                raise OSError("store unavailable")
            return target(*args, **kwargs)

        return call


# -- one pod under test -----------------------------------------------------------------------------
class DrillPod:
    def __init__(
        self,
        stage: Stage,
        pod_id: str,
        *,
        interruptible: bool = False,
        sync_broken: bool = False,
        clock_skew_s: float = 0.0,
    ):
        self.stage = stage
        self.pod_id = pod_id
        # The pod's own clock: `clock_skew_s` ahead of the functions' when it is off.
        self.clock = SkewedClock(stage.clock, clock_skew_s) if clock_skew_s else stage.clock
        self.destroyer = FakeDestroyer(target=lambda: stage.provider.destroy(pod_id))
        self.gpu = FakeGpu()
        self.procs = FakeProcs()
        self.ssh = FakeSsh()
        self.alive_agent = True
        root = stage.root / "pods" / pod_id
        self.paths = PodPaths(root)
        self.job = FakeJob(FakeProcTree(root / "proc"), self.paths.job, stage.clock)  # none until started
        self.paths.state.mkdir(parents=True)
        self.paths.results.mkdir(parents=True)
        (self.paths.results / "metrics.json").write_text('{"loss": 0.125}\n')
        bucket = stage.root / "bucket"
        if sync_broken:
            # A file where the bucket's directory should be: every copy fails, as a full disk would.
            bucket = stage.root / "broken-bucket"
            bucket.parent.mkdir(parents=True, exist_ok=True)
            bucket.write_text("not a directory\n")
        self.bucket_dir = bucket / EXPERIMENT / pod_id
        self._write_config(bucket)
        stage.provider.add(pod_id, interruptible=interruptible, watchdog=stage.deps.watchdog_id)
        self.transport = DispatchTransport(stage)
        self.ctx = load_context(self.paths, role="agent", environ={}, clock=self.clock, transport=self.transport)
        # The real file:// sync, taking SYNC_S of virtual time like an upload would.
        self.sync = FakeSync(inner=FileBucketSync(bucket, EXPERIMENT, pod_id), clock=stage.clock, push_s=SYNC_S)
        self.ender = Ender(
            cfg=self.ctx.cfg,
            paths=self.paths,
            sync=self.sync,
            client=self.ctx.client,
            destroyer=lambda: self.destroyer,
            clock=self.clock,
            log=self.ctx.log,
        )
        self.agent = Agent(
            self.ctx.cfg,
            self.paths,
            probes=Probes(gpu=self.gpu, procs=self.procs, ssh=self.ssh, job=self.job),
            client=self.ctx.client,
            ender=self.ender,
            sync=self.sync,
            clock=self.clock,
            log=self.ctx.log,
            # The periodic push is the real incremental one, to the same bucket. It runs beside the agent on a
            # pod (a process of its own): it takes none of the agent's time, unlike the ending's sync.
            pusher=InlinePusher(FileBucketSync(bucket, EXPERIMENT, pod_id), self.paths, self.clock),
        )
        self.agent.start()

    @property
    def refuse_destroy(self) -> bool:
        return self.destroyer.refuse

    @refuse_destroy.setter
    def refuse_destroy(self, refuse: bool) -> None:
        self.destroyer.refuse = refuse

    @property
    def self_destroys(self) -> int:
        return self.destroyer.destroys

    def _write_config(self, bucket: Path) -> None:
        cfg = PodConfig.for_pod(
            self.stage.settings,
            pod_id=self.pod_id,
            provider=self.stage.provider.name,
            experiment=EXPERIMENT,
            run_id=self.pod_id,
        )
        cfg = cfg.model_copy(update={"functions_url": FUNCTIONS_URL, "results_bucket": f"file://{bucket}"})
        self.paths.config.write_text(cfg.model_dump_json())
        # As `up` does: registered without a key of its own, the watchdog answers the pod's token and claim.
        self.token, claim = self.stage.register_claimed(self.pod_id)
        self.paths.secrets.write_text(render_env_file({TOKEN_ENV: self.token, CLAIM_ENV: claim}))
        self.paths.secrets.chmod(0o600)

    def busy(self) -> None:
        self.gpu.util, self.procs.pids = 97.0, [4242]
        self.stage.provider.set(self.pod_id, gpu_util_pct=97.0)

    def idle(self) -> None:
        self.gpu.util, self.procs.pids = 0.0, []
        if self.stage.provider.alive(self.pod_id):
            self.stage.provider.set(self.pod_id, gpu_util_pct=0.0)

    def job_exit(self, code: int, ran_s: float) -> Outcome:
        self.idle()
        return self.ender.end(
            Ending(kind="job_exit", message=f"job exited with code {code}", exit_code=code, duration_s=ran_s)
        )

    def results_lost(self) -> int:
        """Files that exist nowhere any more: the pod is gone and the bucket lacks them."""
        if self.stage.provider.alive(self.pod_id):
            return 0
        local = local_listing(self.paths.results)
        remote = local_listing(self.bucket_dir) if self.bucket_dir.is_dir() else {}
        return 0 if listing_matches(local, remote) else sum(1 for k in local if remote.get(k) != local[k])


# -- the world: clock, store, handlers, reaper ---------------------------------------------------
ADMIN = "drill-admin-" + "0" * 24


class Stage:
    def __init__(
        self,
        root: Path,
        plan: FaultPlan,
        *,
        notifier_down: bool = False,
        reaper: Callable[[Deps, float], api.ReapReport] | None = None,
        extra: tuple[Provider, ...] = (),
    ) -> None:
        self.root = root
        self.plan = plan
        self.clock = FakeClock()
        self.start = self.clock.now()
        home = root / "home"
        home.mkdir(parents=True)
        self.settings = Settings(home=home, admin_token=SecretStr(ADMIN))
        self.provider = DrillProvider(self.clock, plan)
        self.windows: dict[str, tuple[float, float]] = {}
        outages = (("notifier down", 30 * MIN), ("store unavailable", 2 * MIN), ("functions unreachable", 3 * MIN))
        for kind, span in outages:
            w = plan.window(kind, self.start, span)
            if w is not None:
                self.windows[kind] = w
        self.real_store = SqliteStore(home / STORE_NAME)
        store = cast(Store, FlakyStore(self, self.real_store)) if plan.on else self.real_store
        # Not Notifier.from_settings: the drill's phone is the outbox only, whatever GPUC_NOTIFY_URLS says.
        notifier: Sender = Notifier(home / OUTBOX_NAME, clock=self.clock, sleep=lambda s: None)
        if notifier_down:
            notifier = FlakySender(notifier, lambda: True)
        elif plan.on:
            notifier = FlakySender(notifier, lambda: self.in_window("notifier down"))
        self.deps = build_deps(
            self.settings,
            clock=self.clock,
            store=store,
            notifier=notifier,
            providers=ProviderPool.of(self.provider, *extra),
        )
        self.reaper = reaper or (lambda deps, now: reap_once(deps, now))
        self.period = self.settings.reaper_period_s
        self.next_reap = self.start + self.period
        self.lost_at: list[float] = []  # when a fault cost a reaper pass
        self.reaper_stopped_at: float | None = None
        self.pods: dict[str, DrillPod] = {}
        self.reaper_destroys: Counter[str] = Counter()

    @property
    def now(self) -> float:
        return self.clock.now()

    def in_window(self, kind: str) -> bool:
        w = self.windows.get(kind)
        return w is not None and w[0] <= self.now < w[1]

    def launch(self, pod_id: str, **kw: Any) -> DrillPod:
        pod = DrillPod(self, pod_id, **kw)  # registered as `up` registers it
        self.pods[pod_id] = pod
        return pod

    def launch_busy(self, pod_id: str, train_s: float, **kw: Any) -> DrillPod:
        """A pod whose job trains for `train_s` before the failure under test strikes."""
        pod = self.launch(pod_id, **kw)
        pod.busy()
        self.run(train_s)
        return pod

    def register_claimed(self, pod_id: str) -> tuple[str, str]:
        """`up`'s registration: no key of the pod's own; the watchdog's token and claim for it."""
        answer = api.RegisterAnswer.model_validate(self._register(self._request(pod_id, None)))
        assert answer.token is not None and answer.claim is not None, "the drill's watchdog holds a key"
        return answer.token, answer.claim

    def register(self, pod_id: str, token: str, *, provider: str | None = None, name: str | None = None) -> None:
        """A pod that made its own token (an older gpuc, or one registered at another provider)."""
        self._register(self._request(pod_id, derive_key(token), provider=provider, name=name))

    def _request(
        self, pod_id: str, key: str | None, *, provider: str | None = None, name: str | None = None
    ) -> api.RegisterRequest:
        return api.RegisterRequest.model_validate(
            {
                "pod_id": pod_id,
                "provider": provider or self.provider.name,
                "name": name or pod_name(pod_id),
                "experiment": EXPERIMENT,
                "key": key,
                "price_per_hour": 0.74,
                "started_at": self.now,
            }
        )

    def _register(self, body: api.RegisterRequest) -> dict[str, Any]:
        answer = dispatch(
            Request("POST", "/v1/pods", {"Authorization": f"Bearer {ADMIN}"}, body.model_dump_json().encode()),
            self.deps,
            self.now,
        )
        if answer.status != 200:
            # Registration is `up`'s job, outside the drill's faults: a store window must not hit it.
            self.real_store.close()
            raise RuntimeError(f"drill setup: register answered {answer.status}: {answer.body}")
        return answer.body

    def keep(self, pod_id: str, for_s: float) -> bool:
        """`gpuc keep POD --for ...`: the user's lease, through the admin route."""
        body = api.KeepRequest(until=self.now + for_s).model_dump_json().encode()
        path = f"/v1/pods/{pod_id}/keep"
        answer = dispatch(Request("POST", path, {"Authorization": f"Bearer {ADMIN}"}, body), self.deps, self.now)
        return answer.status == 200

    def status(self) -> api.StatusResponse:
        answer = dispatch(Request("GET", "/v1/status", {"Authorization": f"Bearer {ADMIN}"}), self.deps, self.now)
        return api.StatusResponse.model_validate(answer.body)

    # -- time ---------------------------------------------------------------------------------
    def run(self, seconds: float, *, step: float = STEP_S, until: Callable[[], bool] | None = None) -> None:
        end = self.now + seconds
        while self.now < end:
            self.clock.advance(step)
            now = self.now
            for pod in self.pods.values():
                if pod.alive_agent and self.provider.alive(pod.pod_id):
                    pod.agent.tick(pod.clock.now())
            if now >= self.next_reap:
                self.next_reap += self.period
                if self.reaper_stopped_at is None:
                    self.reap(now)
            if until is not None and until():
                return

    def run_until_gone(self, pod_id: str, seconds: float = 3 * 3600, *, step: float = STEP_S) -> None:
        self.run(seconds, step=step, until=lambda: not self.provider.alive(pod_id))

    def reap(self, now: float) -> None:
        passes = 1
        if self.plan.chance("duplicate scheduled event", 0.05):
            passes = 2
        if self.plan.chance("two reapers at once", 0.05):
            self._two_at_once(now)
            passes -= 1
        for _ in range(passes):
            self._one_pass(now)

    def _one_pass(self, now: float) -> None:
        try:
            report = self.reaper(self.deps, now)
        except Exception:
            self.lost_at.append(now)  # the store was down: the pass is lost, the next one acts
            return
        if report.blind:
            self.lost_at.append(now)
        for action in report.actions:
            if action.action == "destroy":
                self.reaper_destroys[action.pod_id] += 1

    def _two_at_once(self, now: float) -> None:
        threads = [threading.Thread(target=self._one_pass, args=(now,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)

    # -- measures ------------------------------------------------------------------------------
    def billed_min(self, pod_id: str, useless_at: float) -> float | None:
        gone = self.provider.destroyed_at.get(pod_id)
        return None if gone is None else (gone - useless_at) / MIN

    def sent(self, pod_id: str | None = None) -> list[api.NotificationRecord]:
        """What the functions logged as sent (about `pod_id`, or all), read past any store fault window."""
        return [n for n in self.real_store.recent_notifications(10_000) if pod_id is None or n.pod_id == pod_id]

    def notifications(self, pod_id: str | None = None) -> int:
        return len(self.sent(pod_id))

    def messages(self, pod_id: str) -> list[str]:
        return [f"{n.title} {n.message}" for n in self.sent(pod_id)]
    def lost_passes(self, since: float) -> int:
        return sum(1 for t in self.lost_at if t >= since)

    def slack(self, since: float) -> float:
        """Faults on: each reaper pass a fault blinded after the failure costs one period."""
        return self.lost_passes(since) * self.period / MIN

    def bound_note(self, since: float) -> str:
        n = self.lost_passes(since)
        return f" + {n} lost pass(es)" if n else ""

    def passes_bound_min(self, limit_s: float, since: float) -> float:
        """passes_bound_s in minutes, plus the passes a fault cost since `since`."""
        return passes_bound_s(self.settings, limit_s) / MIN + self.slack(since)

    def tally(self, tally: FaultTally, keep: Iterable[str] = ()) -> None:
        kept = set(keep)
        tally.pods_leaked += sum(1 for p in self.provider.pods if p not in kept)
        tally.double_creates += sum(n - 1 for n in self.provider.creates.values() if n > 1)
        for pod_id in set(self.reaper_destroys) | set(self.pods):
            actions = self.reaper_destroys[pod_id] + (self.pods[pod_id].self_destroys if pod_id in self.pods else 0)
            tally.double_destroys += max(0, actions - 1)

    def close(self) -> None:
        self.real_store.close()


def spec_bound_s(settings: Settings, limit_s: float) -> float:
    """SPEC's bound for states the provider reports itself (stopped, paused, unregistered): the limit
    plus one reaper period (the warning goes out one grace ahead of the deadline)."""
    return limit_s + settings.reaper_period_s


def passes_bound_s(settings: Settings, limit_s: float) -> float:
    """A limit, then one reaper period to notice, then the destroy grace rounded up to whole passes
    (the reaper warns, then destroys on a later pass: SPEC layer 4 'notifies before')."""
    period = settings.reaper_period_s
    return limit_s + period + math.ceil(settings.destroy_grace_s / period) * period


# -- the rows ---------------------------------------------------------------------------------------
Scenario = Callable[[Stage], RowResult]


def _pod_row(
    stage: Stage,
    pod: DrillPod,
    row: str,
    failure: str,
    caught_by: str,
    billed: float | None,
    bound: float | None,
    text: str,
    **kw: Any,
) -> RowResult:
    return RowResult(
        row,
        failure,
        caught_by,
        billed,
        bound,
        text,
        results_lost=pod.results_lost(),
        notifications=stage.notifications(pod.pod_id),
        **kw,
    )


def f1_job_ends(stage: Stage) -> RowResult:
    return _job_exit_row(stage, "F1", "job ends normally, user away", code=0)


def f2_job_crashes(stage: Stage) -> RowResult:
    row = _job_exit_row(stage, "F2", "job crashes (exit 137)", code=137)
    if not any("137" in m for m in stage.messages("f2-pod")):
        row.problems.append("no notification carries the exit code 137")
    return row


def _job_exit_row(stage: Stage, row: str, failure: str, *, code: int) -> RowResult:
    pod_id = f"{row.lower()}-pod"
    pod = stage.launch_busy(pod_id, 30 * MIN)
    exit_at = stage.now
    outcome = pod.job_exit(code, 30 * MIN)
    problems = [] if outcome == "destroyed" else [f"wrapper ended with {outcome}"]
    billed = stage.billed_min(pod_id, exit_at)
    if billed is None:  # a fault refused the self-destroy: the reaper takes over, as in F9
        stage.run_until_gone(pod_id, 2 * 3600)
        billed = stage.billed_min(pod_id, exit_at)
        bound = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
        text = f"self-destroy failed: as F9{stage.bound_note(exit_at)}"
        problems = []
    else:
        bound, text = (EXIT_SLACK_S + SYNC_S) / MIN, f"10 s + sync ({SYNC_S:g} s)"
    stage.run(2 * stage.period)
    return _pod_row(stage, pod, row, failure, "wrapper", billed, bound, text, problems=problems)


def f3_walks_away(stage: Stage) -> RowResult:
    pod = stage.launch("f3-pod")
    session = SshSession(tty="pts/0", last_input=stage.now)
    pod.ssh.sessions_ = [session]
    for _ in range(6):  # typing for half an hour
        stage.run(5 * MIN)
        pod.ssh.sessions_ = [SshSession(tty="pts/0", last_input=stage.now)]
    left_at = stage.now
    pod.ssh.sessions_ = []  # logs out and walks away
    return _idle_row(stage, pod, "F3", "manual ssh work, user walks away", left_at, 0.0, "20 min (setting)")


def f4_ssh_left_open(stage: Stage) -> RowResult:
    pod = stage.launch("f4-pod")
    stage.run(10 * MIN)
    left_at = stage.now
    pod.ssh.sessions_ = [SshSession(tty="pts/0", last_input=left_at)]  # open, no more input
    window = stage.settings.ssh_input_window_s
    return _idle_row(stage, pod, "F4", "ssh session left open, user at dinner", left_at, window, "20 min + N")


def _idle_row(
    stage: Stage, pod: DrillPod, row: str, failure: str, left_at: float, extra_s: float, text: str
) -> RowResult:
    stage.run_until_gone(pod.pod_id)
    check = stage.settings.idle_check_interval_s
    bound = (stage.settings.idle_destroy_s + extra_s + check) / MIN
    billed = stage.billed_min(pod.pod_id, left_at)
    return _pod_row(stage, pod, row, failure, "idle watch", billed, bound, f"{text} + 1 check")


def f5_agent_killed(stage: Stage) -> RowResult:
    return _silence_row(stage, "F5", "agent killed (OOM) / container frozen")


def f13_notifier_down(stage: Stage) -> RowResult:
    row = _silence_row(stage, "F13", "notification endpoint down (reaper's destroy)")
    if stage.provider.alive("f13-pod"):
        row.problems.append("the destroy did not happen")
    return row


def _silence_row(stage: Stage, row: str, failure: str) -> RowResult:
    pod_id = f"{row.lower()}-pod"
    # past one periodic results push (sync_interval_s): what a kill can cost is after it
    pod = stage.launch_busy(pod_id, 35 * MIN)
    died_at = stage.now
    pod.alive_agent = False  # killed: no more ticks, no more heartbeats
    pod.idle()  # the provider sees the GPU go quiet
    stage.run_until_gone(pod_id)
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, died_at)
    text = f"silence + period + grace{stage.bound_note(died_at)}"
    return _pod_row(
        stage, pod, row, failure, "reaper (heartbeat silence)", stage.billed_min(pod_id, died_at), bound, text
    )


def f6_paused(stage: Stage) -> RowResult:
    return _provider_state_row(
        stage,
        "F6",
        "interruptible outbid, instance paused",
        "paused",
        stage.settings.paused_limit_s,
        "30 min + one period",
        interruptible=True,
    )


def f7_stopped(stage: Stage) -> RowResult:
    return _provider_state_row(
        stage, "F7", "pod stopped and forgotten", "stopped", stage.settings.stopped_limit_s, "24 h + one period"
    )


def _provider_state_row(
    stage: Stage, row: str, failure: str, status: PodStatus, limit_s: float, text: str, *, interruptible: bool = False
) -> RowResult:
    pod_id = f"{row.lower()}-pod"
    pod = stage.launch_busy(pod_id, 35 * MIN, interruptible=interruptible)  # past one periodic results push
    at = stage.now
    pod.alive_agent = False  # a paused or stopped container runs nothing
    stage.provider.set(pod_id, status=status, gpu_util_pct=None)
    stage.run_until_gone(pod_id, limit_s + 3 * 3600, step=60.0)
    bound = spec_bound_s(stage.settings, limit_s) / MIN + stage.slack(at)
    billed = stage.billed_min(pod_id, at)
    return _pod_row(stage, pod, row, failure, "reaper", billed, bound, text + stage.bound_note(at))


def f8_sync_fails(stage: Stage) -> RowResult:
    pod_id = "f8-pod"
    pod = stage.launch_busy(pod_id, 20 * MIN, sync_broken=True)
    outcome = pod.job_exit(0, 20 * MIN)
    stage.run(3 * 3600)  # the user is away for three hours: the idle watch and the reaper keep trying
    nags = sum(1 for m in stage.messages(pod_id) if "sync failed" in m.lower() or "sync_failed" in m)
    problems = [] if outcome == "kept_sync_failed" else [f"wrapper ended with {outcome}"]
    if nags < 2:
        problems.append(f"the kept-alive alert was sent {nags} time(s), not repeated")
    killed = 0 if stage.provider.alive(pod_id) else 1
    failure = "results sync fails at the end"
    text = "no data lost; kept, never destroyed (stopped at the kept window: F16)"
    return _pod_row(
        stage, pod, "F8", failure, "wrapper keeps the pod", None, None, text, false_kills=killed, problems=problems
    )


def f9_key_refused(stage: Stage) -> RowResult:
    pod_id = "f9-pod"
    pod = stage.launch_busy(pod_id, 25 * MIN)
    pod.refuse_destroy = True
    exit_at = stage.now
    outcome = pod.job_exit(0, 25 * MIN)
    problems = [] if outcome == "destroy_failed" else [f"wrapper ended with {outcome}"]
    stage.run_until_gone(pod_id)
    # The pod reported its end (ledger closed, destroy_at = now + grace) before the refused call: the
    # reaper's "ended but alive" rule applies after the grace; "as F5" is the SPEC's looser bound.
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
    billed = stage.billed_min(pod_id, exit_at)
    failure = "pod's API key refused self-destroy"
    text = f"as F5{stage.bound_note(exit_at)}"
    return _pod_row(stage, pod, "F9", failure, "reaper (its own key)", billed, bound, text, problems=problems)


def f10_network_lost(stage: Stage) -> RowResult:
    pod_id = "f10-pod"
    pod = stage.launch_busy(pod_id, 15 * MIN)
    pod.transport.down = True  # cut off from the functions, still training
    stage.run(2 * 3600)
    killed = 0 if stage.provider.alive(pod_id) else 1
    alerts = sum(1 for n in stage.sent(pod_id) if n.kind == "alert")
    problems = [] if alerts else ["the reaper saw the silence but sent no alert"]
    failure = "pod lost network to the functions, still working"
    caught_by = "reaper: silence, provider says busy"
    text = "alert only, no kill"
    return _pod_row(stage, pod, "F10", failure, caught_by, None, None, text, false_kills=killed, problems=problems)


def f11_never_registered(stage: Stage) -> RowResult:
    run_id = "f11-pod"
    created_at = stage.now
    stage.provider.create(PodSpec(experiment=EXPERIMENT, run_id=run_id, provider="drill", gpu_type="RTX 4090"))
    stage.run_until_gone(run_id)
    bound = spec_bound_s(stage.settings, stage.settings.unregistered_grace_s) / MIN + stage.slack(created_at)
    return RowResult(
        "F11",
        "laptop crashed after create, before register",
        "reaper (tagged, unregistered)",
        stage.billed_min(run_id, created_at),
        bound,
        f"grace + one period{stage.bound_note(created_at)}",
        notifications=stage.notifications(run_id),
    )


def f14_reaper_stopped(stage: Stage) -> RowResult:
    from gpuc.client.pods.survey import reaper_warnings

    stage.launch("f14-pod").busy()
    stage.run(32 * MIN)
    stage.reaper_stopped_at = stage.now
    missed_at = stage.next_reap  # the first pass that does not happen
    seen_at: float | None = None
    stage.run(missed_at - stage.now)
    while stage.now < missed_at + 4 * stage.period:
        st = stage.status()
        if reaper_warnings(st.reaper_last_run, st.reaper_period_s, st.server_time):
            seen_at = stage.now
            break
        stage.run(1.0, step=1.0)
    visible = None if seen_at is None else (seen_at - missed_at) / MIN
    bound = (stage.period + 1.0) / MIN
    return RowResult(
        "F14",
        "the reaper stopped running",
        "gpuc ls / doctor (status)",
        visible,
        bound,
        "visible within one period (+1 s sampling)",
        notifications=stage.notifications(),
    )


# -- the job under the wrapper, and a pod clock that is off ------------------------------------------
def f3j_job_works_without_gpu(stage: Stage) -> RowResult:
    """A non-python job under the wrapper (a download: a little CPU, a lot of I/O) with the GPU idle, for
    longer than the idle window; then it ends and the wrapper ends the pod. Its result is written at its
    exit: a pod destroyed before then has lost it."""
    pod = stage.launch("f3j-pod")
    pod.job.start(worker="curl", cpu_per_s=0.03, io_per_s=40e6)
    ran_s = stage.settings.idle_destroy_s + 25 * MIN
    stage.run(ran_s)
    caught_by = "idle watch (job tree progress); wrapper"
    return _job_end_row(stage, pod, "F3j", "non-python job working, GPU idle (download)", caught_by, ran_s)


def f5c_clock_ahead(stage: Stage) -> RowResult:
    """The pod's clock runs 6 min ahead: outside the functions' 5-minute signature window. Its job keeps
    the GPU busy, but the provider reports no utilisation: only the heartbeats say the pod works."""
    pod = stage.launch("f5c-pod", clock_skew_s=6 * MIN)
    pod.busy()
    stage.provider.set(pod.pod_id, gpu_util_pct=None)
    ran_s = 2 * 3600.0
    stage.run(ran_s)
    caught_by = "heartbeats on the functions' time; wrapper"
    row = _job_end_row(stage, pod, "F5c", "pod clock 6 min ahead, job running", caught_by, ran_s)
    alerts = sum(1 for m in stage.messages(pod.pod_id) if "pod clock off by" in m)
    if alerts != 1:
        row.problems.append(f"the 'pod clock off' alert was sent {alerts} time(s), not once")
    return row


def _job_end_row(stage: Stage, pod: DrillPod, row: str, failure: str, caught_by: str, ran_s: float) -> RowResult:
    """The job was to run `ran_s`; a pod killed before that is a false kill and loses the job's result.
    Then the job ends: the wrapper's bound as F1 (or as F9 when a fault refused the self-destroy)."""
    killed = 0 if stage.provider.alive(pod.pod_id) else 1
    problems: list[str] = []
    billed: float | None = None
    bound, text = (EXIT_SLACK_S + SYNC_S) / MIN, f"0 false kills; then 10 s + sync ({SYNC_S:g} s)"
    if not killed:
        (pod.paths.results / "output.bin").write_bytes(b"\1" * 4096)  # what the job was run for
        pod.job.stop()
        exit_at = stage.now
        outcome = pod.job_exit(0, ran_s)
        billed = stage.billed_min(pod.pod_id, exit_at)
        if billed is None:  # a fault refused the self-destroy: the reaper takes over, as in F9
            stage.run_until_gone(pod.pod_id, 2 * 3600)
            billed = stage.billed_min(pod.pod_id, exit_at)
            bound = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
            text = f"0 false kills; then as F9{stage.bound_note(exit_at)}"
        elif outcome != "destroyed":
            problems.append(f"wrapper ended with {outcome}")
        end = stage.real_store.get_pod(pod.pod_id)
        if end is not None and end.end_at is not None and abs(end.end_at - exit_at) > MIN:
            problems.append(f"the ledger's end is {end.end_at - exit_at:+.0f} s off the job's exit")
    result = _pod_row(stage, pod, row, failure, caught_by, billed, bound, text, false_kills=killed, problems=problems)
    result.results_lost += killed  # the output the job would have written at its exit
    return result


def f9n_pod_key_hears_not_found(stage: Stage) -> RowResult:
    """F9 in disguise: the pod-scoped key's terminate answers "pod not found to terminate" while the pod
    lives on. The real RunPod self-destroyer, through the RunPod emulator with the pod's own key, must not
    believe it: it reads itself, stops itself and says so; the reaper destroys it with the account key."""
    from gpuc.core.providers.http import zero_backoff
    from gpuc.core.providers.runpod import RunPodProvider, RunPodSelfDestroyer
    from gpuc.testkit.emulators.runpod import RunPodEmulator

    stage.run(25 * MIN)  # a watchdog up for a while (a brand-new store holds its destroys: not this row)
    emu = RunPodEmulator(
        api_key=EMU_RUNPOD_KEY, clock=stage.clock, boot_polls=0, balance=10.0, pod_key_not_found=True
    )
    graphql_url = "https://api.runpod.test/graphql"
    runpod = RunPodProvider(
        EMU_RUNPOD_KEY,
        graphql_url=graphql_url,
        rest_url="https://api.runpod.test/v2",
        transport=emu.transport(),
        clock=stage.clock,
        backoff=zero_backoff,
    )
    stage.deps.providers = ProviderPool.of(stage.provider, runpod)
    problems: list[str] = []
    try:
        made = runpod.create(PodSpec(experiment=EXPERIMENT, run_id="f9n-pod", provider="runpod", gpu_type="RTX 4090"))
        pod = DrillPod(stage, made.id)
        stage.provider.pods.pop(made.id)  # the pod lives at the emulated RunPod, not the drill's provider
        stage.register(made.id, pod.token, provider="runpod", name=made.name)
        environ = {**emu.pod_environ(made.id), "GPUC_RUNPOD_GRAPHQL_URL": graphql_url}
        destroyer = RunPodSelfDestroyer.from_environ(
            environ, transport=emu.transport(), clock=stage.clock, backoff=zero_backoff
        )
        pod.ender.destroyer = lambda: destroyer
        exit_at = stage.now
        cut_off = stage.in_window("functions unreachable") or stage.in_window("notifier down")
        outcome = pod.job_exit(0, 25 * MIN)
        if outcome != "destroy_failed":
            problems.append(f"wrapper ended with {outcome}, not destroy_failed")
        if made.id in emu.pods and emu.pods[made.id].state != "exited":
            problems.append("the pod believed 'not found' and did not stop itself")
        stage.run(4 * 3600, until=lambda: made.id not in emu.pods)
        gone = made.id not in emu.pods
        if not gone:
            problems.append("the pod outlived the reaper (leak)")
        said = [m for m in stage.messages(made.id) if "stopped pod" in m]
        if not said and not cut_off:
            problems.append("no notification says the pod was only stopped")
        billed = (stage.now - exit_at) / MIN if gone else None
    finally:
        runpod.close()
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
    return _pod_row(
        stage,
        pod,
        "F9n",
        "pod key told 'pod not found' but the pod lives",
        "the pod reads itself, stops, says so; reaper",
        billed,
        bound,
        f"as F9{stage.bound_note(exit_at)}",
        problems=problems,
    )


# -- the watchdog's own failures: a lost store, a clock jump, one blind provider, a transient "not found" --
def _no_gpu_reading(stage: Stage, pod: DrillPod) -> None:
    """The provider reports no GPU utilisation (Vast often does not): the heartbeats are the only sign of
    life, so no second witness can veto a wrong kill."""
    pod.busy()
    stage.provider.set(pod.pod_id, gpu_util_pct=None)


def _survivors_killed(stage: Stage, pods: Iterable[DrillPod]) -> int:
    return sum(1 for p in pods if not stage.provider.alive(p.pod_id))


def f11s_store_lost(stage: Stage) -> RowResult:
    """watchdog.db deleted while two pods work (a new GPUC_HOME, a table restored from an old backup look the
    same): the watchdog comes back on an empty store at the same URL. The pods carry their own proof (issue
    26): each ping presents the pod's claim, signed with the watchdog's key, and the ping verifies with the
    token derived from that key, so the record is re-created from it and the pod judged as before. Both
    live, nobody had to answer a warning. (Before claims, both were warned about and destroyed unless kept.)"""
    pods = [stage.launch(f"f11s-pod-{i}") for i in (1, 2)]
    for pod in pods:
        _no_gpu_reading(stage, pod)
    stage.run(35 * MIN)  # past one periodic results push
    lose_store(stage)
    lost_at = stage.now
    # Past the grace in which a young store holds every destroy, twice, and a stray's destroy after it.
    stage.run(2 * stage.settings.unregistered_grace_s + 4 * stage.period)
    problems = [f"{p} was not re-created from its claim" for p in _unclaimed(stage, [p.pod_id for p in pods])]
    if any("cannot verify" in m for p in pods for m in stage.messages(p.pod_id)):
        problems.append("a pod that proved itself was warned about as unverifiable")
    return _pod_row(
        stage,
        pods[0],
        "F11s",
        "watchdog store lost (deleted watchdog.db), pods alive",
        "the pods' claims: records re-created",
        None,
        None,
        f"0 destroyed: each re-created from its claim ({minutes_text(stage.now - lost_at)} watched after the loss)",
        false_kills=_survivors_killed(stage, pods),
        problems=problems,
    )


def lose_store(stage: Stage) -> None:
    """The watchdog's store is lost (watchdog.db deleted): the same watchdog, key and URL, an empty store."""
    lost = stage.real_store
    stage.real_store = SqliteStore(stage.root / "home" / "new" / STORE_NAME)
    stage.deps.store = cast(Store, FlakyStore(stage, stage.real_store)) if stage.plan.on else stage.real_store
    lost.close()


def _unclaimed(stage: Stage, pod_ids: Iterable[str]) -> list[str]:
    """The pods whose record is not one their claim re-created (registered, with a key)."""
    out = []
    for pod_id in pod_ids:
        rec = stage.real_store.get_pod(pod_id)
        if rec is None or rec.origin != "registered" or not rec.key:
            out.append(pod_id)
    return out


def minutes_text(seconds: float) -> str:
    return f"{seconds / MIN:.0f} min"


def f5r_watchdog_slept(stage: Stage) -> RowResult:
    """A pod's network to the watchdog blips, the reaper marks it "will destroy at T", and the laptop that
    runs the watchdog goes to sleep for three hours. At the wake-up pass T is long past and the pod has
    not yet pinged (the functions were asleep): that pass must destroy nothing and restart every
    deadline. Another pod's agent died during the sleep: destroyed within F5's bound of the wake."""
    living, dying = stage.launch("f5r-pod-1"), stage.launch("f5r-pod-2")
    for pod in (living, dying):
        _no_gpu_reading(stage, pod)
    stage.run(35 * MIN)  # past one periodic results push: what a kill can cost is after it
    living.transport.down = True  # the blip
    stage.run(3 * 3600, until=lambda: _state(stage, living.pod_id) == "down")
    stage.reaper_stopped_at = stage.now  # the lid closes
    dying.alive_agent = False
    for pod in (living, dying):
        pod.transport.down = True
    stage.run(3 * 3600)
    for pod in (living, dying):
        pod.transport.down = False
    stage.reaper_stopped_at = None
    wake = stage.now
    stage.reap(wake)  # the timer fires on wake, before any pod's next heartbeat
    stage.run_until_gone(dying.pod_id)
    stage.run(30 * MIN)
    said = any(n.kind == "clock" for n in stage.sent())
    problems = [] if said else ["no alert said the reaper's clock jumped"]
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, wake)
    return _pod_row(
        stage,
        dying,
        "F5r",
        "watchdog slept 3 h (laptop lid) with a pod marked",
        "reaper: a late pass restarts deadlines",
        stage.billed_min(dying.pod_id, wake),
        bound,
        f"0 false kills; a dead one: as F5 after the wake{stage.bound_note(wake)}",
        false_kills=_survivors_killed(stage, [living]),
        problems=problems,
    )


def f12b_one_provider_blind(stage: Stage) -> RowResult:
    """The Vast key was revoked: every Vast read fails for hours. A pod's agent dies on the other
    provider: it is destroyed within F5's bound all the same (blindness is per provider), nothing is done
    on the Vast pod, and the blindness escalates to an error-level alert after an hour."""
    vast = FakeProvider(stage.clock, name="vast")
    vast.add("f12b-vast-pod", created_at=stage.now)
    vast.fail = ProviderError("HTTP 401: the API key was revoked", provider="vast", status=401)
    stage.deps.providers = ProviderPool.of(stage.provider, vast)
    stage.register("f12b-vast-pod", new_token(), provider="vast")
    lost: list[float] = []  # passes that could not see THIS provider (faults on): each costs one period
    inner = stage.reaper

    def reaper(deps: Deps, now: float) -> api.ReapReport:
        try:
            report = inner(deps, now)
        except Exception:
            lost.append(now)
            raise
        if stage.provider.name in report.blind_providers:
            lost.append(now)
        return report

    stage.reaper = reaper
    pod = stage.launch_busy("f12b-pod", 35 * MIN)
    died_at = stage.now
    pod.alive_agent = False
    pod.idle()
    stage.run_until_gone(pod.pod_id)
    stage.run(90 * MIN)
    blind = [n for n in stage.sent() if n.kind == "blind"]
    problems = [] if any(n.level == "error" for n in blind) else ["no error-level alert after an hour blind"]
    if vast.destroyed:
        problems.append("something was destroyed at the blind provider")
    slack = sum(1 for t in lost if t >= died_at)
    bound = passes_bound_s(stage.settings, stage.settings.silence_limit_s) / MIN + slack * stage.period / MIN
    note = f" + {slack} lost pass(es)" if slack else ""
    return _pod_row(
        stage,
        pod,
        "F12b",
        "one provider blind for hours (key revoked)",
        "reaper: blindness per provider",
        stage.billed_min(pod.pod_id, died_at),
        bound,
        f"as F5 at the other provider{note}",
        problems=problems,
    )


def f5g_transient_not_found(stage: Stage) -> RowResult:
    """For one pass the provider's list and `get` both say the pod does not exist (a stale replica). A
    watch dropped on that would never destroy it: then its agent dies."""
    pod = stage.launch_busy("f5g-pod", 20 * MIN)
    stage.provider.lose(pod.pod_id, 1)
    stage.run(stage.period)
    stage.run(10 * MIN)
    died_at = stage.now
    pod.alive_agent = False
    pod.idle()
    stage.run_until_gone(pod.pod_id)
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, died_at)
    return _pod_row(
        stage,
        pod,
        "F5g",
        "provider says 'not found' once, then the agent dies",
        "reaper: gone needs two passes",
        stage.billed_min(pod.pod_id, died_at),
        bound,
        f"as F5{stage.bound_note(died_at)}",
    )


def _state(stage: Stage, pod_id: str) -> str | None:
    rec = stage.real_store.get_pod(pod_id)
    return None if rec is None else rec.state


def later_rows(module: str, *names: str) -> tuple[Scenario, ...]:
    """Rows kept in a testkit/drill_<topic>.py module, which builds on this one: imported when they run."""

    def row(name: str) -> Scenario:
        def scenario(stage: Stage) -> RowResult:
            found: Scenario = getattr(importlib.import_module(module), name)
            return found(stage)

        scenario.__name__ = name
        return scenario

    return tuple(row(n) for n in names)


SCENARIOS: tuple[Scenario, ...] = (
    f1_job_ends,
    f2_job_crashes,
    f3_walks_away,
    f4_ssh_left_open,
    f5_agent_killed,
    f6_paused,
    f7_stopped,
    f8_sync_fails,
    f9_key_refused,
    f10_network_lost,
    f11_never_registered,
    # F12 runs against the emulators: see f12_provider_errors
    f13_notifier_down,
    f14_reaper_stopped,
    f3j_job_works_without_gpu,
    *IDLE_ROWS,  # F3h F3hs F3hn F3b: the idle rule on real processes
    f5c_clock_ahead,
    f9n_pod_key_hears_not_found,
    f11s_store_lost,
    f5r_watchdog_slept,
    f12b_one_provider_blind,
    f5g_transient_not_found,
    *later_rows("gpuc.testkit.drill_deadline", "f15_runpod", "f15v_vast", "f15h_host_fakes_pings"),
    *later_rows("gpuc.testkit.drill_unauth", "f11u_unsigned_pings_for_a_stray", "f18_ingest_flooded"),
    *later_rows("gpuc.testkit.drill_kept", "f16_kept_then_stopped", "f16b_watchdog_stops_it"),
    *later_rows("gpuc.testkit.drill_budget", "f17_budget_spent"),
    *later_rows("gpuc.testkit.drill_actions", "f20_keep_from_the_phone"),
    *later_rows("gpuc.testkit.drill_interrupt", "f11i_up_interrupted"),
    *later_rows("gpuc.testkit.drill_claims", "f26s_store_lost_three_pods_and_a_stray", "f26w_two_watchdogs"),
    *later_rows("gpuc.testkit.drill_push", "f26a_agent_killed_job_running", "f26f_pod_frozen_mid_job"),
    # Only the create's rule is the product's today; the recovery rows (s30a, s30b, s30d) join when the
    # watchdog's pass runs recover_pass (docs/interruptible.md: what is not built yet).
    *later_rows("gpuc.testkit.drill_spot", "s30c_bid_loses_at_create"),
)
KEEP: dict[str, tuple[str, ...]] = {"F8": ("f8-pod",), "F10": ("f10-pod",), "F14": ("f14-pod",)}
KEEP.update({"F11s": ("f11s-pod-1", "f11s-pod-2"), "F5r": ("f5r-pod-1",)})  # alive at the end: the rows' point
KEEP.update({"F18": ("f18-pod-1",)})


@contextmanager
def _quiet() -> Iterator[None]:
    """The drill breaks things on purpose: the pieces' own error logs (retries, notifier down) are
    expected noise here; the table says what happened."""
    logger = logging.getLogger("gpuc")
    handler = logging.NullHandler()
    logger.addHandler(handler)
    old = logger.propagate
    logger.propagate = False
    try:
        yield
    finally:
        logger.propagate = old
        logger.removeHandler(handler)


def run_drill(
    *,
    faults: bool = False,
    seed: int = 0,
    reaper: Callable[[Deps, float], api.ReapReport] | None = None,
    scenarios: Iterable[Scenario] | None = None,
) -> DrillReport:
    tally = FaultTally()
    rows: list[RowResult] = []
    with _quiet(), tempfile.TemporaryDirectory(prefix="gpuc-drill-") as tmp:
        for i, scenario in enumerate(SCENARIOS if scenarios is None else scenarios):
            plan = FaultPlan(seed * 1000 + i, on=faults, tally=tally)
            down = scenario is f13_notifier_down
            stage = Stage(Path(tmp) / f"s{i}", plan, notifier_down=down, reaper=reaper)
            try:
                row = scenario(stage)
                stage.tally(tally, KEEP.get(row.row, ()))
            finally:
                stage.close()
            rows.append(row)
        if scenarios is None:
            rows.insert(11, f12_provider_errors(Path(tmp) / "f12", seed=seed, faults=faults, tally=tally))
    return DrillReport(rows=rows, faults=tally, faults_on=faults, seed=seed)


# -- F12: provider API errors, through the real HTTP providers and the emulators -------------------
EMU_RUNPOD_KEY = "rpa_DRILL" + "0" * 31
EMU_VAST_KEY = "drillvast" + "0" * 31
EMU_FAULT_OPS = {
    "runpod": ("list", "get", "destroy"),
    "vast": ("list", "list_v0", "get", "destroy"),
}
# The schedule when faults are off: one of each kind, at the calls the reaper makes.
FIXED_FAULTS = (("list", "503"), ("get", "429"), ("destroy", "timeout_after_commit"), ("list", "success_false"))
EMU_KINDS = ("500", "503", "429", "timeout", "drop", "success_false", "schema_drift", "timeout_after_commit")


def _emulated(clock: FakeClock) -> tuple[Any, Any, Provider, Provider]:
    from gpuc.core.providers.http import zero_backoff
    from gpuc.core.providers.runpod import RunPodProvider
    from gpuc.core.providers.vast import VastProvider
    from gpuc.testkit.emulators.runpod import RunPodEmulator
    from gpuc.testkit.emulators.vast import VastEmulator

    rp_emu = RunPodEmulator(api_key=EMU_RUNPOD_KEY, clock=clock)
    vast_emu = VastEmulator(api_key=EMU_VAST_KEY, clock=clock)
    runpod = RunPodProvider(
        EMU_RUNPOD_KEY,
        graphql_url="https://api.runpod.test/graphql",
        rest_url="https://api.runpod.test/v2",
        transport=rp_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    vast = VastProvider(
        EMU_VAST_KEY,
        url="https://console.vast.test/api/v0",
        transport=vast_emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    return rp_emu, vast_emu, runpod, vast


def _emu_alive(emu: Any) -> set[str]:
    return {str(p.id) for p in emu.alive()}


def _emu_names(emu: Any) -> Counter[str]:
    return Counter(str(getattr(p, "name", None) or getattr(p, "label", None)) for p in emu.alive())


def f12_provider_errors(root: Path, *, seed: int, faults: bool, tally: FaultTally) -> RowResult:
    """A silent pod on each emulated provider, reaped while the providers answer 5xx / 429 / timeouts /
    success:false / schema drift. The bound is not time: no leak, no double create or destroy."""
    plan = FaultPlan(seed * 1000 + 12, on=faults, tally=tally)
    stage = Stage(root, plan)
    rp_emu, vast_emu, runpod, vast = _emulated(stage.clock)
    stage.deps.providers = ProviderPool.of(stage.provider, runpod, vast)
    emus = {"runpod": rp_emu, "vast": vast_emu}
    rng = random.Random(seed * 7919 + 12)
    problems: list[str] = []
    billed: list[float] = []
    sent = 0
    try:
        pods: dict[str, tuple[str, float]] = {}
        for name, provider in (("runpod", runpod), ("vast", vast)):
            if faults and rng.random() < 0.5:
                kind = rng.choice(("503", "timeout_after_commit", "drop_after_commit", "500_after_commit"))
                emus[name].faults.add("create", kind, times=1)
                tally.injected[f"emulator create {kind}"] += 1
            spec = PodSpec(experiment=EXPERIMENT, run_id=f"f12-{name}", provider=name, gpu_type="RTX 4090")
            try:
                pod = provider.create(spec)
            except GpucError:
                continue  # `up` failed: whatever the provider did create is a stray for the reaper (F11)
            stage.register(pod.id, new_token(), provider=name, name=pod.name)
            pods[pod.id] = (name, stage.now)  # never pings: the agent died at boot
        started = stage.now
        for name, emu in emus.items():
            for op, kind in FIXED_FAULTS:
                emu.faults.add(op, kind, times=1)
                tally.injected[f"emulator {kind}"] += 1
            if faults:
                for _ in range(rng.randint(4, 10)):
                    kind = rng.choice(EMU_KINDS)
                    emu.faults.add(rng.choice(EMU_FAULT_OPS[name]), kind, times=1)
                    tally.injected[f"emulator {kind}"] += 1

        def all_gone() -> bool:
            return not any(_emu_alive(emu) for emu in emus.values())

        gone_at: dict[str, float] = {}

        def watch() -> bool:
            for pid, (name, _) in pods.items():
                if pid not in gone_at and pid not in _emu_alive(emus[name]):
                    gone_at[pid] = stage.now
            return all_gone()

        stage.run(4 * 3600, step=30.0, until=watch)
        for pid, (_, since) in pods.items():
            if pid in gone_at:
                billed.append((gone_at[pid] - since) / MIN)
        if not pods and all_gone():
            billed.append((stage.now - started) / MIN)
        for emu in emus.values():
            tally.pods_leaked += len(_emu_alive(emu))
            tally.double_creates += sum(n - 1 for n in _emu_names(emu).values() if n > 1)
        for pid in pods:
            tally.double_destroys += max(0, stage.reaper_destroys[pid] - 1)
        if not all_gone():
            problems.append("a pod outlived the faults (leak)")
        blind = sum(1 for e in emus.values() for r in e.requests if r.fault)
        if blind == 0:
            problems.append("no fault reached the providers: the row proved nothing")
        sent = stage.notifications()
    finally:
        runpod.close()
        vast.close()
        stage.close()
    return RowResult(
        "F12",
        "provider API errors (5xx, 429, timeouts, success:false, drift)",
        "everyone retries; destroy idempotent",
        max(billed) if billed else None,
        None,
        "no leak, no double action",
        notifications=sent,
        problems=problems,
    )
