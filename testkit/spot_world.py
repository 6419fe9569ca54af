"""A watchdog (handlers + reaper) recovering an interruptible run on the Vast emulator, through the real
VastProvider and its httpx transport, on a FakeClock: the first pod registered with `recovery` as `up` would.

The steps of a re-rent, named as the user would (STOP_STEPS, CUT_STEPS), and what lands at each: a stop asked
through the real route's write (`stop_at`), or a store write that fails there (`cut_at`), as a pass dies in a
Lambda timeout or a lost connection. The tests and the drill's rows use the same hooks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuc.core import api
from gpuc.core.budget import run_envelope_usd
from gpuc.core.clock import FakeClock
from gpuc.core.models import PodSpec
from gpuc.core.notify.message import Message
from gpuc.core.notify.notifier import Notifier, read_outbox
from gpuc.core.pod import Pod
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.core.signing import new_watchdog_key
from gpuc.functions.app import Deps, ProviderPool
from gpuc.functions.edge import Request, Response
from gpuc.functions.handlers import dispatch
from gpuc.functions.reaper import reap_once
from gpuc.functions.recovery import routes, runs
from gpuc.functions.recovery.runs import StoredRun
from gpuc.functions.store import META_STORE, SqliteStore, Store
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState

ADMIN = "admin-token-for-tests-0123456789"
OFFER = "11684738"  # the emulator's RTX 4090 that passes every default filter (min_bid 0.20)
OFFER_X2 = "11684900"  # a 2 x RTX 4090 machine for a 2-GPU run's first attempt (min_bid 0.38 for the machine)
BID = 0.22  # per GPU, as `up --bid` takes it
DISK_PER_HOUR = 0.15 * 30 / (30 * 24)
MAX_HOURS = 2.0
WAIT_S = 300.0
RUN_ID = "spot-r1"
PLANTED_SECRET = "hf" + "_PLANTEDkitsecret0123456789abcdefXYZ"  # in two parts: gpuc scans its own code before an upload
FUNCTIONS_URL = "http://127.0.0.1:8787"
# Where a stop can land in a re-rent (functions/recovery/rerent.py writes the claim's step around each call)
STOP_STEPS = (
    "before the destroy", "after the destroy", "after the create", "after the register",
    "before the ticket is saved", "after the ticket is saved",
)  # fmt: skip
Value = dict[str, Any]


def at_step(step: str) -> Callable[[Value], bool]:
    return lambda value: (value.get("acting") or {}).get("step") == step


def ticket_saved(value: Value) -> bool:
    """The write that records the new attempt with its ticket (the claim released)."""
    return value.get("acting") is None and len(value.get("attempts", [])) >= 2 and bool(value.get("tickets"))


# The run record's write that a step follows (the create and the register are provider / store calls instead)
WRITE_AFTER: dict[str, Callable[[Value], bool]] = {
    "before the destroy": at_step("claimed"),
    "after the destroy": at_step("destroyed"),
    "after the create": at_step("rented"),  # the write right after the create: a cut there loses the pod's id
    "after the register": at_step("registered"),
    "before the ticket is saved": at_step("registered"),
    "after the ticket is saved": ticket_saved,
}
# The run record's write that fails when a pass is cut at a step: the one that would have said it was done
CUT_WRITE: dict[str, Callable[[Value], bool]] = {
    "after the create": at_step("rented"),  # the instance exists, its id written nowhere
    "after the register": at_step("registered"),
    "before the ticket is saved": ticket_saved,
}
CUT_STEPS = tuple(CUT_WRITE)


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
    gpus: int = 1  # the run's GPU count: its first attempt on OFFER, or OFFER_X2 for 2
    stopped_at: float | None = None  # when ask_stop last asked (the drill measures from it)
    kit_url: str = "file:///bucket/.gpuc-kits/spot-r1/gpuc-0.1-py3-none-any.whl"  # or a presigned GET's

    @property
    def now(self) -> float:
        return self.clock.now()

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Response:
        return dispatch(Request(method, path, headers or {}, body), self.deps, self.now)

    def admin(self, method: str, path: str, body: bytes = b"") -> Response:
        return self.call(method, path, body, {"Authorization": f"Bearer {ADMIN}"})

    @property
    def cap(self) -> float:
        """The run's price cap: the bid per GPU x its GPUs, as `up` sends it for the machine."""
        return BID * self.gpus

    def spec(self) -> PodSpec:
        return PodSpec(
            experiment="spot", run_id=RUN_ID, provider="vast", gpu_type="RTX 4090", interruptible=True,
            bid_per_gpu=BID, offer_id=OFFER if self.gpus == 1 else OFFER_X2, max_hours=MAX_HOURS,
            env={"GPUC_RUN_ID": RUN_ID}, gpu_count=self.gpus,
        )  # fmt: skip

    def register_body(self, pod_id: str, **changes: object) -> api.RegisterRequest:
        spec = self.spec()
        kit = api.BootKit(
            wheel_url=self.kit_url,
            wheel_name="gpuc-0.1-py3-none-any.whl",
            wheel_sha256="a" * 64,
            config={"pod_id": pod_id, "provider": "vast", "experiment": "spot", "run_id": RUN_ID,
                    "watchdog_url": FUNCTIONS_URL, "price_per_hour": self.cap},  # as an older `up` wrote it
            secrets={"HF_TOKEN": PLANTED_SECRET},
            command=["python", "train.py"],
        )  # fmt: skip
        recovery = api.RecoveryRequest(
            recover=int(changes.pop("recover", 2)),  # type: ignore[call-overload]
            price_cap=self.cap, disk_per_hour=DISK_PER_HOUR,
            envelope_usd=run_envelope_usd(self.cap, DISK_PER_HOUR, MAX_HOURS), first_start=self.now,
            max_hours=MAX_HOURS, spec=spec, results_at=self.results_at, kit=kit,
        )  # fmt: skip
        fields: dict[str, object] = {
            "pod_id": pod_id, "provider": "vast", "name": spec.name, "experiment": "spot", "gpu": "RTX 4090",
            "price_per_hour": self.cap, "started_at": self.now, "interruptible": True,
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
        self.emu.outbid(self.latest(), by=self.cap + 0.05)

    def outbid_and_wait(self) -> None:
        """Outbid, the pause noted by a pass, and the recovery's wait over: the next pass re-rents."""
        self.outbid()
        self.reap()
        self.clock.advance(self.settings.recover_wait_s + 1)

    def creates(self) -> int:
        return len(self.emu.ops("create"))

    def outbox(self) -> list[Message]:
        return read_outbox(self.settings.home / "outbox.jsonl")

    def ticket_of(self, pod_id: str) -> str:
        """The ticket in the instance's env (as Vast lists it), destroyed since or not."""
        inst = self.emu.instances.get(int(pod_id)) or self.emu.billed[pod_id]
        return inst.env["GPUC_BOOT_TICKET"]

    def boot(self, pod_id: str, ticket: str) -> Response:
        return self.call("POST", "/v1/boot", api.BootRequest(pod_id=pod_id, ticket=ticket).model_dump_json().encode())

    # -- what lands at a step of a re-rent ------------------------------------------------------------

    def ask_stop(self) -> None:
        """The phone's tap, or `gpuc down`'s first call: the same write (functions/recovery/routes.py ask_stop)."""
        self.stopped_at = self.now
        routes.ask_stop(self.deps, RUN_ID)

    def stop_at(self, step: str) -> None:
        """The stop lands at `step` of the next re-rent."""
        if step == "after the create":
            self.after_create(self.ask_stop)
        elif step == "after the register":
            self.after_register(self.ask_stop)
        else:
            self.after_write(WRITE_AFTER[step], self.ask_stop)

    def cut_at(self, step: str) -> None:
        """The pass dies at `step`: the run record's write there fails (the store, or the Lambda's timeout)."""
        self._on_write(CUT_WRITE[step], _store_write_fails, before=True)

    def after_write(self, when: Callable[[Value], bool], then: Callable[[], None]) -> None:
        """`then`, once, right after the first write of the run's record for which `when(value)` holds."""
        self._on_write(when, then, before=False)

    def _on_write(self, when: Callable[[Value], bool], then: Callable[[], None], *, before: bool) -> None:
        store = self.store
        fired: list[bool] = []
        real = store.put_meta

        def put(key: str, value: Any, expected_version: int | None) -> bool:
            hit = key == runs.run_key(RUN_ID) and not fired and when(dict(value))
            if hit and before:
                fired.append(True)
                then()
            written = real(key, value, expected_version)
            if hit and not before and written:
                fired.append(True)
                then()
            return written

        store.put_meta = put  # type: ignore[method-assign]

    def after_create(self, then: Callable[[], None]) -> None:
        _after(self.vast, "create", then)

    def after_register(self, then: Callable[[], None]) -> None:
        _after(self.store, "register", then)

    def down_after(self) -> list[str]:
        """`gpuc down`'s part once the watchdog's pass is over (it waits while the run is `busy`): the run's live
        attempts, as the watchdog names them, destroyed and confirmed gone. Returns what it destroyed."""
        view = api.RunRecovery.model_validate(self.admin("GET", f"/v1/runs/{RUN_ID}").body)
        if view.busy is not None:
            raise AssertionError(f"down would wait: the watchdog is {view.busy}")
        live = [a.pod_id for a in view.attempts if a.end is None]
        for pod_id in live:
            self.vast.destroy(pod_id)
        return live

    def billing(self) -> list[int]:
        """The instances that still bill (GPU or disk): every one the emulator still lists."""
        return [i.id for i in self.emu.alive()]

    def close(self) -> None:
        self.vast.close()
        self.store.close()


def _after(target: object, name: str, then: Callable[[], None]) -> None:
    """`then` right after each call of target.name (the provider's create, the store's register)."""
    real = getattr(target, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        done = real(*args, **kwargs)
        then()
        return done

    setattr(target, name, call)


def _store_write_fails() -> None:
    raise ConnectionError("the store write failed")


def make_rec_world(home: Path, clock: FakeClock, store: Store | None = None, **overrides: object) -> RecWorld:
    emu = VastEmulator(clock=clock, boot_polls=2)
    emu.add_offer(VastOfferState(11684800, "RTX 4090", 0.33, 0.19))  # where a recovery goes
    # A 2 x RTX 4090 machine for a 2-GPU run's first attempt (min_bid for the whole machine, as the create's
    # `price` is); its recovery goes to the emulator's own 2-GPU offer (11684746, min_bid 0.30).
    emu.add_offer(VastOfferState(int(OFFER_X2), "RTX 4090", 0.62, 0.38, num_gpus=2))
    vast = VastProvider(
        emu.api_key, url="https://vast.test/api/v0", transport=emu.transport(), clock=clock, backoff=zero_backoff
    )
    fields: dict[str, object] = {
        "home": home, "admin_token": ADMIN, "watchdog_key": new_watchdog_key(), "provider": "vast",
        "watchdog_url": FUNCTIONS_URL, "recover_wait_s": WAIT_S,
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
