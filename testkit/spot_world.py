"""A watchdog (handlers + reaper) recovering an interruptible run on the Vast emulator, through the real
VastProvider and its httpx transport, on a FakeClock: the first pod registered with `recovery` as `up` would."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuc.core import api
from gpuc.core.budget import run_envelope_usd
from gpuc.core.clock import FakeClock
from gpuc.core.models import PodSpec
from gpuc.core.notify import Message, Notifier, read_outbox
from gpuc.core.pod import Pod
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.core.signing import new_watchdog_key
from gpuc.functions import runs
from gpuc.functions.app import Deps, ProviderPool
from gpuc.functions.edge import Request, Response
from gpuc.functions.handlers import dispatch
from gpuc.functions.reaper import reap_once
from gpuc.functions.runs import StoredRun
from gpuc.functions.store import META_STORE, SqliteStore, Store
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState

ADMIN = "admin-token-for-tests-0123456789"
OFFER = "11684738"  # the emulator's RTX 4090 that passes every default filter (min_bid 0.20)
BID = 0.22
DISK_PER_HOUR = 0.15 * 30 / (30 * 24)
MAX_HOURS = 2.0
WAIT_S = 300.0
RUN_ID = "spot-r1"
PLANTED_SECRET = "hf" + "_PLANTEDkitsecret0123456789abcdefXYZ"  # in two parts: gpuc scans its own code before an upload
FUNCTIONS_URL = "http://127.0.0.1:8787"


@dataclass
class RecWorld:
    clock: FakeClock
    emu: VastEmulator
    vast: VastProvider
    settings: Settings
    store: Store
    deps: Deps
    first: Pod | None = None
    results_at: str = "file:///bucket/spot/spot-r1"  # where the run's pods push (GPUC_RESUME_FROM)

    @property
    def now(self) -> float:
        return self.clock.now()

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        return dispatch(Request(method, path, headers or {}, body), self.deps, self.now)

    def admin(self, method: str, path: str, body: bytes = b"") -> Response:
        return self.call(method, path, body, {"Authorization": f"Bearer {ADMIN}"})

    def spec(self) -> PodSpec:
        return PodSpec(
            experiment="spot", run_id=RUN_ID, provider="vast", gpu_type="RTX 4090", interruptible=True,
            bid_per_gpu=BID, offer_id=OFFER, max_hours=MAX_HOURS, env={"GPUC_RUN_ID": RUN_ID},
        )  # fmt: skip

    def register_body(self, pod_id: str, **changes: object) -> api.RegisterRequest:
        spec = self.spec()
        kit = api.BootKit(
            wheel_url="file:///bucket/.gpuc-kits/spot-r1/gpuc-0.1-py3-none-any.whl",
            wheel_name="gpuc-0.1-py3-none-any.whl",
            wheel_sha256="a" * 64,
            config={"pod_id": pod_id, "provider": "vast", "experiment": "spot", "run_id": RUN_ID,
                    "functions_url": FUNCTIONS_URL, "price_per_hour": BID},
            secrets={"HF_TOKEN": PLANTED_SECRET},
            command=["python", "train.py"],
        )  # fmt: skip
        recovery = api.RecoveryRequest(
            recover=int(changes.pop("recover", 2)),  # type: ignore[call-overload]
            price_cap=BID, disk_per_hour=DISK_PER_HOUR,
            envelope_usd=run_envelope_usd(BID, DISK_PER_HOUR, MAX_HOURS), first_start=self.now,
            max_hours=MAX_HOURS, spec=spec, results_at=self.results_at, kit=kit,
        )  # fmt: skip
        fields: dict[str, object] = {
            "pod_id": pod_id, "provider": "vast", "name": spec.name, "experiment": "spot", "gpu": "RTX 4090",
            "price_per_hour": BID, "started_at": self.now, "interruptible": True,
            "deadline_at": self.now + MAX_HOURS * 3600, "recovery": recovery,
        }  # fmt: skip
        fields.update(changes)
        return api.RegisterRequest.model_validate(fields)

    def up(self, recover: int = 2) -> Pod:
        """The first attempt, as `up --interruptible --recover N` rents and registers it."""
        self.first = self.vast.create(self.spec())
        answer = self.admin(
            "POST", "/v1/pods", self.register_body(self.first.id, recover=recover).model_dump_json().encode()
        )
        assert answer.status == 200, answer.body
        return self.first

    def reap(self) -> api.ReapReport:
        return reap_once(self.deps, self.now)

    def run(self) -> StoredRun:
        loaded = runs.load(self.store, RUN_ID)
        assert loaded is not None
        return loaded[0]

    def latest(self) -> str:
        return self.run().latest.pod_id

    def outbid(self) -> None:
        self.emu.outbid(self.latest(), by=BID + 0.05)

    def creates(self) -> int:
        return len(self.emu.ops("create"))

    def outbox(self) -> list[Message]:
        return read_outbox(self.settings.home / "outbox.jsonl")

    def ticket_of(self, pod_id: str) -> str:
        return self.emu.instances[int(pod_id)].env["GPUC_BOOT_TICKET"]

    def boot(self, pod_id: str, ticket: str) -> Response:
        return self.call("POST", "/v1/boot", api.BootRequest(pod_id=pod_id, ticket=ticket).model_dump_json().encode())

    def close(self) -> None:
        self.vast.close()
        self.store.close()


def make_rec_world(home: Path, clock: FakeClock, store: Store | None = None, **overrides: object) -> RecWorld:
    emu = VastEmulator(clock=clock, boot_polls=2)
    emu.add_offer(VastOfferState(11684800, "RTX 4090", 0.33, 0.19))  # where a recovery goes
    vast = VastProvider(
        emu.api_key, url="https://vast.test/api/v0", transport=emu.transport(), clock=clock, backoff=zero_backoff
    )
    fields: dict[str, object] = {
        "home": home, "admin_token": ADMIN, "watchdog_key": new_watchdog_key(), "provider": "vast",
        "functions_url": FUNCTIONS_URL, "recover_wait_s": WAIT_S,
        # The pods never ping here (no agent runs): silence is not what these tests are about.
        "silence_limit_s": 24 * 3600.0,
        **overrides,
    }  # fmt: skip
    settings = Settings(**fields)  # type: ignore[arg-type]
    store = store if store is not None else SqliteStore(home / "watchdog.db")
    store.put_meta(META_STORE, {"created_at": clock.now() - 86400.0}, None)
    notifier = Notifier(home / "outbox.jsonl", clock=clock, sleep=lambda s: None)
    deps = Deps(
        settings=settings, store=store, providers=ProviderPool.of(vast), notifier=notifier,
        admin_token=settings.admin_token, clock=clock, watchdog_key=settings.watchdog_key,  # type: ignore[arg-type]
    )  # fmt: skip
    return RecWorld(clock, emu, vast, settings, store, deps)
