"""A small world around the handlers and the reaper, on a virtual clock. The provider is the shared fake
(gpuc.testkit.fakes); FakeProvider and outage are re-exported here for the tests that import them so."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import boto3
from moto import mock_aws
from pydantic import BaseModel

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.notify.message import Message
from gpuc.core.notify.notifier import Notifier, read_outbox
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, new_token, sign
from gpuc.functions.app import Deps, ProviderPool
from gpuc.functions.dynamo import DynamoStore, create_table
from gpuc.functions.edge import Request, Response
from gpuc.functions.handlers import dispatch
from gpuc.functions.reaper import reap_once
from gpuc.functions.store import META_STORE, SqliteStore, Store, StoredPod
from gpuc.testkit.fakes import FakeProvider, outage

__all__ = ["ADMIN", "FakeProvider", "World", "make_world", "outage"]

ADMIN = "admin-token-for-tests-0123456789"


@dataclass
class World:
    """The handlers, the reaper and a fake provider, on a virtual clock."""

    clock: FakeClock
    settings: Settings
    provider: FakeProvider
    store: Store
    notifier: Notifier
    deps: Deps
    tokens: dict[str, str] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return self.clock.now()

    def use_public_url(self, url: str) -> None:
        """The phone's links point at `url` (a server started after the world: the watchdog on loopback)."""
        self.settings = replace(self.settings, public_url=url)
        self.deps.settings = self.settings

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        return dispatch(Request(method, path, headers or {}, body), self.deps, self.now)

    def admin(self, method: str, path: str, model: BaseModel | None = None) -> Response:
        body = model.model_dump_json().encode() if model is not None else b""
        return self.call(method, path, body, {"Authorization": f"Bearer {ADMIN}"})

    def register(
        self, pod_id: str, *, at_provider: bool = True, provider: FakeProvider | None = None, **fields: object
    ) -> str:
        provider = provider or self.provider
        if at_provider:
            provider.add(pod_id)
        token = new_token()
        request = api.RegisterRequest.model_validate(
            {
                "pod_id": pod_id,
                "provider": provider.name,
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

    def run(self, seconds: float, *, keep_alive: tuple[str, ...] = (), period: float | None = None) -> None:
        """A live reaper for `seconds`: one pass every period, the `keep_alive` pods pinging before each.
        (Hours between two passes is a clock jump to the reaper: it holds every destroy.)"""
        step = period or self.settings.reaper_period_s
        end = self.now + seconds
        while self.now + step <= end + 1e-6:
            self.clock.advance(step)
            for pod_id in keep_alive:
                self.ping(pod_id)
            self.reap()
        if end > self.now:
            self.clock.advance(end - self.now)

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
    home: Path,
    clock: FakeClock,
    *,
    notifier: Notifier | None = None,
    store_age_s: float | None = 86400.0,
    store: Store | None = None,
    providers: tuple[FakeProvider, ...] = (),
    **overrides: object,
) -> World:
    """store_age_s: the watchdog has been serving that long (a young store holds every destroy); None = a
    brand-new store, dated by its first registration or reaper pass."""
    settings = Settings(home=home, admin_token=ADMIN, **overrides)  # type: ignore[arg-type]
    provider = FakeProvider(clock)
    store = store if store is not None else SqliteStore(home / "watchdog.db")
    if store_age_s is not None:
        store.put_meta(META_STORE, {"created_at": clock.now() - store_age_s}, None)
    notifier = notifier or Notifier(home / "outbox.jsonl", clock=clock, sleep=lambda s: None)
    deps = Deps(
        settings=settings,
        store=store,
        providers=ProviderPool.of(provider, *providers),
        notifier=notifier,
        admin_token=settings.admin_token,  # type: ignore[arg-type]
        clock=clock,
        watchdog_key=settings.watchdog_key,  # None unless given: pods register with their own keys
    )
    return World(clock, settings, provider, store, notifier, deps)


@contextmanager
def moto_store() -> Iterator[DynamoStore]:
    """A DynamoStore on moto's in-process DynamoDB, its table as the stack creates it."""
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_table(client, "gpuc-watchdog")
        yield DynamoStore("gpuc-watchdog", client)
