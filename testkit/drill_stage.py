"""The drill's shared stage: the virtual clock and the real pieces wired around an in-memory provider
(Stage), a pod on it (DrillPod), the fault plan, a row's result and its bounds, and the helpers several
stories' rows use. Each story's rows live in testkit/drill_<story>.py; testkit/drill.py lists them and runs
the drill."""

from __future__ import annotations

import math
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.notify.message import Action, Level
from gpuc.core.notify.notifier import OUTBOX_NAME, Notifier
from gpuc.core.pod import Pod, pod_name
from gpuc.core.podconfig import PodConfig, render_env_file
from gpuc.core.podpaths import CLAIM_ENV, TOKEN_ENV
from gpuc.core.providers.base import Provider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key
from gpuc.functions.app import STORE_NAME, Deps, ProviderPool, Sender, build_deps
from gpuc.functions.edge import Request, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.functions.reaper import reap_once
from gpuc.functions.store import SqliteStore, Store
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.context import load_context
from gpuc.instance_side.ending import Ender, Ending, Outcome
from gpuc.instance_side.filesync import FileBucketSync
from gpuc.instance_side.manifest import listing_matches
from gpuc.instance_side.observe import Probes
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.podhttp import HttpResult, TransportError
from gpuc.instance_side.pushrun import InlinePusher
from gpuc.instance_side.scan import local_listing
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


EXIT_SLACK_S = 10.0  # F1: destroy within 10 s of the job's exit, plus sync time


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
        self.faulted_at: list[float] = []  # when the fault plan's outage refused a post: the row's evidence

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        now = self.stage.clock.now()
        cut = self.stage.in_window("functions unreachable")
        if cut:
            self.faulted_at.append(now)
        if self.down or cut:
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
        cfg = cfg.model_copy(update={"watchdog_url": FUNCTIONS_URL, "results_bucket": f"file://{bucket}"})
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

    def cut_off_since(self, since: float) -> bool:
        """Whether the fault plan's outage refused a post of this pod's since `since`: a word it said then (its
        end, "only stopped") reached no one, and the watchdog goes by its own rules instead."""
        return any(t >= since for t in self.transport.faulted_at)

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

    def status(self) -> api.StatusResponse | None:
        """`gpuc ls`'s read of the watchdog; None when it could not answer (its store down, with faults on): the
        user sees an error and looks again, as the row does a second later."""
        answer = dispatch(Request("GET", "/v1/status", {"Authorization": f"Bearer {ADMIN}"}), self.deps, self.now)
        return api.StatusResponse.model_validate(answer.body) if answer.status == 200 else None

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
    """The failure matrix's bound for states the provider reports itself (stopped, paused, unregistered): the limit
    plus one reaper period (the warning goes out one grace ahead of the deadline)."""
    return limit_s + settings.reaper_period_s


def passes_bound_s(settings: Settings, limit_s: float) -> float:
    """A limit, then one reaper period to notice, then the destroy grace rounded up to whole passes
    (the reaper warns, then destroys on a later pass: layer 4 of docs/money.md, "notifies before")."""
    period = settings.reaper_period_s
    return limit_s + period + math.ceil(settings.destroy_grace_s / period) * period


# -- the rows ---------------------------------------------------------------------------------------
Scenario = Callable[[Stage], RowResult]


def pod_row(
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


def job_end_row(stage: Stage, pod: DrillPod, row: str, failure: str, caught_by: str, ran_s: float) -> RowResult:
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
    result = pod_row(stage, pod, row, failure, caught_by, billed, bound, text, false_kills=killed, problems=problems)
    result.results_lost += killed  # the output the job would have written at its exit
    return result


# -- the watchdog's own failures: a lost store, a clock jump, one blind provider, a transient "not found" --
def no_gpu_reading(stage: Stage, pod: DrillPod) -> None:
    """The provider reports no GPU utilisation (Vast often does not): the heartbeats are the only sign of
    life, so no second witness can veto a wrong kill."""
    pod.busy()
    stage.provider.set(pod.pod_id, gpu_util_pct=None)


def survivors_killed(stage: Stage, pods: Iterable[DrillPod]) -> int:
    return sum(1 for p in pods if not stage.provider.alive(p.pod_id))


def lose_store(stage: Stage) -> None:
    """The watchdog's store is lost (watchdog.db deleted): the same watchdog, key and URL, an empty store."""
    lost = stage.real_store
    stage.real_store = SqliteStore(stage.root / "home" / "new" / STORE_NAME)
    stage.deps.store = cast(Store, FlakyStore(stage, stage.real_store)) if stage.plan.on else stage.real_store
    lost.close()


def unclaimed(stage: Stage, pod_ids: Iterable[str]) -> list[str]:
    """The pods whose record is not one their claim re-created (registered, with a key)."""
    out = []
    for pod_id in pod_ids:
        rec = stage.real_store.get_pod(pod_id)
        if rec is None or rec.origin != "registered" or not rec.key:
            out.append(pod_id)
    return out


def minutes_text(seconds: float) -> str:
    return f"{seconds / MIN:.0f} min"


def state_of(stage: Stage, pod_id: str) -> str | None:
    rec = stage.real_store.get_pod(pod_id)
    return None if rec is None else rec.state
