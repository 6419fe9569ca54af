"""One in-memory provider for every watchdog test and the drill: as strict as the real clients (`get`
answers None only when the pod is positively gone; destroy is idempotent), and able to show the hazards
a reaper must survive without a false kill or a lost watch:

- `fail` makes every call raise (an outage); `fail_on["list" | "get" | "destroy" | "balance"]` one call;
- `linger(pod_id, calls)`: after an accepted destroy the pod is still listed, and `get` still finds it,
  for `calls` more calls (a provider's eventual consistency: a destroy taken as done without
  confirmation would stop watching a pod that still bills);
- `hide(pod_id)`: missing from `list_pods`, but `get` finds it (a stale list replica);
- `page_size`: `list_pods` returns only the first page (a short page taken for the whole account);
- `lose(pod_id, calls)`: both `list_pods` and `get` say "not found" for `calls` `get` calls, though the
  pod lives and bills (a transient "not found");
- `set(pod_id, status="unknown")`: the provider cannot tell (Vast's `offline`/`unknown`).

`destroyed` lists every accepted destroy call, `destroyed_at` when each pod stopped billing, `stopped_at`
when a stop (`stop`; `start` resumes) ended its GPU billing.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Callable

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderUnavailable
from gpuc.core.models import Balance, PodSpec
from gpuc.core.pod import WATCHDOG_ENV, Pod, PodStatus, pod_name
from gpuc.core.providers.base import DestroyResult, Provider

Operation = str  # "list" | "get" | "destroy" | "balance" | "create" | "stop" | "start"


class FakeProvider(Provider):
    def __init__(self, clock: FakeClock, name: str = "fake") -> None:
        self.name = name
        self.clock = clock
        self.pods: dict[str, Pod] = {}
        self.fail: Exception | None = None
        self.fail_on: dict[Operation, Exception] = {}
        self.fail_destroy: Exception | None = None
        self.destroyed: list[str] = []
        self.destroyed_at: dict[str, float] = {}
        self.stopped_at: dict[str, float] = {}  # when a stop ended its GPU billing (its disk still bills)
        self.creates: Counter[str] = Counter()
        self.list_calls = 0
        self.get_calls = 0
        self.balance_usd = 10.0
        self.page_size: int | None = None
        self.hidden: set[str] = set()
        self.barrier: threading.Barrier | None = None
        self.on_list: Callable[[], None] | None = None  # runs inside list_pods: a ping racing the reaper
        self._lingering: dict[str, tuple[Pod, int]] = {}
        self._lost: dict[str, int] = {}
        self._lock = threading.RLock()

    # -- the world as the test arranges it ---------------------------------------------------------------
    def add(
        self,
        pod_id: str,
        *,
        status: PodStatus = "running",
        managed: bool = True,
        name: str | None = None,
        gpu_util_pct: float | None = None,
        created_at: float | None = None,
        experiment: str | None = "exp",
        interruptible: bool = False,
        price_per_hour: float = 0.5,
        watchdog: str | None = None,
    ) -> Pod:
        pod = Pod(
            provider=self.name,
            watchdog=watchdog,
            id=pod_id,
            name=name or pod_name(pod_id),
            experiment=experiment,
            status=status,
            raw_status=status.upper(),
            gpu="RTX 4090",
            price_per_hour=price_per_hour,
            created_at=created_at,
            managed=managed,
            interruptible=interruptible,
            gpu_util_pct=gpu_util_pct,
        )
        with self._lock:
            self.pods[pod_id] = pod
            self.creates[pod.name] += 1
        return pod

    def set(self, pod_id: str, **changes: object) -> None:
        if "status" in changes and "raw_status" not in changes:
            changes["raw_status"] = str(changes["status"]).upper()
        with self._lock:
            self.pods[pod_id] = dataclasses.replace(self.pods[pod_id], **changes)  # type: ignore[arg-type]

    def alive(self, pod_id: str) -> bool:
        """Still billing (whatever the listing shows)."""
        with self._lock:
            return pod_id in self.pods

    def linger(self, pod_id: str, calls: int) -> None:
        """The next accepted destroy of pod_id leaves it visible for `calls` more list/get calls."""
        with self._lock:
            self._lingering[pod_id] = (self.pods[pod_id], -calls)

    def hide(self, pod_id: str) -> None:
        with self._lock:
            self.hidden.add(pod_id)

    def lose(self, pod_id: str, calls: int = 1) -> None:
        with self._lock:
            self._lost[pod_id] = calls

    # -- the Provider interface ----------------------------------------------------------------------------
    def create(self, spec: PodSpec) -> Pod:
        self._maybe_fail("create")
        return self.add(
            spec.run_id,
            name=spec.name,
            experiment=spec.experiment,
            created_at=self.clock.now(),
            interruptible=spec.interruptible,
            watchdog=spec.env.get(WATCHDOG_ENV),
        )

    def get(self, pod_id: str) -> Pod | None:
        self._maybe_fail("get")
        with self._lock:
            self.get_calls += 1
            if self._lost.get(pod_id, 0) > 0:
                self._lost[pod_id] -= 1
                return None
            ghost = self._visible_ghost(pod_id)
            return ghost if ghost is not None else self.pods.get(pod_id)

    def list_pods(self) -> list[Pod]:
        if self.barrier is not None:
            self.barrier.wait(timeout=10)  # two reapers both read before either acts
        if self.on_list is not None:
            self.on_list()
        self._maybe_fail("list")
        with self._lock:
            self.list_calls += 1
            pods = [p for i, p in self.pods.items() if i not in self.hidden and self._lost.get(i, 0) <= 0]
            for pod_id in list(self._lingering):
                ghost = self._visible_ghost(pod_id)
                if ghost is not None and pod_id not in self.pods:
                    pods.append(ghost)
            return pods[: self.page_size] if self.page_size is not None else pods

    def stop(self, pod_id: str) -> None:
        self._maybe_fail("stop")
        self.set(pod_id, status="stopped", gpu_util_pct=None)
        self.stopped_at.setdefault(pod_id, self.clock.now())

    def start(self, pod_id: str) -> None:
        self._maybe_fail("start")
        self.set(pod_id, status="running")
        self.stopped_at.pop(pod_id, None)

    def destroy(self, pod_id: str) -> DestroyResult:
        if self.fail_destroy is not None:
            raise self.fail_destroy
        self._maybe_fail("destroy")
        with self._lock:
            self.destroyed.append(pod_id)
            pod = self.pods.pop(pod_id, None)
            if pod is None:
                return "already_gone"
            self.destroyed_at[pod_id] = self.clock.now()
            if pod_id in self._lingering:
                _, calls = self._lingering[pod_id]
                self._lingering[pod_id] = (pod, -calls)  # armed: counts down from now
            return "destroyed"

    def balance(self) -> Balance:
        self._maybe_fail("balance")
        return Balance(provider=self.name, balance_usd=self.balance_usd, spend_per_hour=0.5)

    def _visible_ghost(self, pod_id: str) -> Pod | None:
        """A destroyed pod still shown: armed lingers have a positive count left (negative = not armed)."""
        entry = self._lingering.get(pod_id)
        if entry is None or entry[1] <= 0 or pod_id in self.pods:
            return None
        pod, left = entry
        if left == 1:
            del self._lingering[pod_id]
        else:
            self._lingering[pod_id] = (pod, left - 1)
        return pod

    def _maybe_fail(self, operation: Operation = "") -> None:
        if self.fail is not None:
            raise self.fail
        failure = self.fail_on.get(operation)
        if failure is not None:
            raise failure


def outage(provider: str = "fake") -> ProviderUnavailable:
    return ProviderUnavailable("HTTP 503 after 3 tries", provider=provider, status=503)
