"""Fakes for the watchdog tests: an in-memory provider and a small world around the handlers."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderUnavailable
from gpuc.core.models import Balance, Pod, PodSpec, PodStatus
from gpuc.core.notify import Message, Notifier, read_outbox
from gpuc.core.providers.base import DestroyResult, Provider
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, new_token, sign
from gpuc.functions.app import Deps, ProviderPool
from gpuc.functions.handlers import Request, Response, dispatch
from gpuc.functions.reaper import reap_once
from gpuc.functions.store import SqliteStore, StoredPod

ADMIN = "admin-token-for-tests-0123456789"


class FakeProvider(Provider):
    """In memory. `fail` makes every call raise (an outage); `fail_destroy` only the destroy."""

    def __init__(self, clock: FakeClock, name: str = "fake") -> None:
        self.name = name
        self.clock = clock
        self.pods: dict[str, Pod] = {}
        self.fail: Exception | None = None
        self.fail_destroy: Exception | None = None
        self.destroyed: list[str] = []
        self.list_calls = 0
        self.barrier: threading.Barrier | None = None
        self._lock = threading.Lock()

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
    ) -> Pod:
        pod = Pod(
            provider=self.name,
            id=pod_id,
            name=name or f"gpuc-{pod_id}",
            experiment=experiment,
            status=status,
            raw_status=status.upper(),
            gpu="RTX 4090",
            price_per_hour=0.5,
            created_at=created_at,
            managed=managed,
            gpu_util_pct=gpu_util_pct,
        )
        with self._lock:
            self.pods[pod_id] = pod
        return pod

    def set(self, pod_id: str, **changes: object) -> None:
        with self._lock:
            self.pods[pod_id] = self.pods[pod_id].model_copy(update=changes)

    def create(self, spec: PodSpec) -> Pod:
        return self.add(spec.run_id, name=spec.name, experiment=spec.experiment, created_at=self.clock.now())

    def get(self, pod_id: str) -> Pod | None:
        self._maybe_fail()
        with self._lock:
            return self.pods.get(pod_id)

    def list_pods(self) -> list[Pod]:
        if self.barrier is not None:
            self.barrier.wait(timeout=10)  # two reapers both read before either acts
        self._maybe_fail()
        with self._lock:
            self.list_calls += 1
            return list(self.pods.values())

    def stop(self, pod_id: str) -> None:
        self.set(pod_id, status="stopped")

    def destroy(self, pod_id: str) -> DestroyResult:
        if self.fail_destroy is not None:
            raise self.fail_destroy
        self._maybe_fail()
        with self._lock:
            self.destroyed.append(pod_id)
            return "destroyed" if self.pods.pop(pod_id, None) is not None else "already_gone"

    def balance(self) -> Balance:
        return Balance(provider=self.name, balance_usd=10.0, spend_per_hour=0.5)

    def _maybe_fail(self) -> None:
        if self.fail is not None:
            raise self.fail


def outage(provider: str = "fake") -> ProviderUnavailable:
    return ProviderUnavailable("HTTP 503 after 3 tries", provider=provider, status=503)


@dataclass
class World:
    """The handlers, the reaper and a fake provider, on a virtual clock."""

    clock: FakeClock
    settings: Settings
    provider: FakeProvider
    store: SqliteStore
    notifier: Notifier
    deps: Deps
    tokens: dict[str, str] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.clock.now()

    def call(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Response:
        return dispatch(Request(method, path, headers or {}, body), self.deps, self.now)

    def admin(self, method: str, path: str, model: BaseModel | None = None) -> Response:
        body = model.model_dump_json().encode() if model is not None else b""
        return self.call(method, path, body, {"Authorization": f"Bearer {ADMIN}"})

    def register(self, pod_id: str, *, at_provider: bool = True, **fields: object) -> str:
        if at_provider:
            self.provider.add(pod_id)
        token = new_token()
        request = api.RegisterRequest.model_validate(
            {
                "pod_id": pod_id,
                "provider": self.provider.name,
                "name": f"gpuc-{pod_id}",
                "experiment": "exp",
                "key": derive_key(token),
                "price_per_hour": 0.5,
                "started_at": self.now,
                **fields,
            }
        )
        answer = self.admin("POST", "/v1/pods", request)
        assert answer.status == 200, answer.body
        self.tokens[pod_id] = token
        return token

    def signed(self, pod_id: str, body: bytes, seq: int, timestamp: int | None = None) -> dict[str, str]:
        ts = int(self.now) if timestamp is None else timestamp
        return {
            api.H_POD: pod_id,
            api.H_TIMESTAMP: str(ts),
            api.H_SEQ: str(seq),
            api.H_SIGNATURE: sign(derive_key(self.tokens[pod_id]), ts, seq, body),
        }

    def next_seq(self, pod_id: str) -> int:
        self.seqs[pod_id] = self.seqs.get(pod_id, 0) + 1
        return self.seqs[pod_id]

    def heartbeat_body(self, pod_id: str, seq: int, **fields: object) -> bytes:
        return (
            api.HeartbeatBody.model_validate({"pod_id": pod_id, "seq": seq, "sent_at": self.now, **fields})
            .model_dump_json()
            .encode()
        )

    def ping(self, pod_id: str, seq: int | None = None, **fields: object) -> Response:
        seq = self.next_seq(pod_id) if seq is None else seq
        body = self.heartbeat_body(pod_id, seq, **fields)
        return self.call("POST", "/v1/heartbeat", body, self.signed(pod_id, body, seq))

    def event(self, pod_id: str, kind: str = "info", message: str = "hi", **fields: object) -> Response:
        seq = self.next_seq(pod_id)
        body = (
            api.PodEvent.model_validate({"pod_id": pod_id, "kind": kind, "message": message, **fields})
            .model_dump_json()
            .encode()
        )
        return self.call("POST", "/v1/events", body, self.signed(pod_id, body, seq))

    def reap(self, dry_run: bool = False) -> api.ReapReport:
        return reap_once(self.deps, self.now, dry_run=dry_run)

    def pod(self, pod_id: str) -> StoredPod:
        rec = self.store.get_pod(pod_id)
        assert rec is not None
        return rec

    def kinds(self, pod_id: str | None = None) -> list[str]:
        """Notification kinds logged so far (oldest first), optionally for one pod."""
        return [n.kind for n in self.store.recent_notifications(1000) if pod_id is None or n.pod_id == pod_id]

    def outbox(self) -> list[Message]:
        return read_outbox(self.settings.home / "outbox.jsonl")


def make_world(
    home: Path, clock: FakeClock, *, notifier: Notifier | None = None, **overrides: object
) -> World:
    settings = Settings(home=home, admin_token=ADMIN, **overrides)  # type: ignore[arg-type]
    provider = FakeProvider(clock)
    store = SqliteStore(home / "watchdog.db")
    notifier = notifier or Notifier(home / "outbox.jsonl", clock=clock, sleep=lambda s: None)
    deps = Deps(
        settings=settings,
        store=store,
        providers=ProviderPool.of(provider),
        notifier=notifier,
        admin_token=settings.admin_token,  # type: ignore[arg-type]
        clock=clock,
    )
    return World(clock, settings, provider, store, notifier, deps)
