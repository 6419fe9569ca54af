"""Drill row F11i: `gpuc up ... | tee log` stopped at each of its steps leaves 0 pods.
F11 is the laptop dying after the create (the watchdog's unregistered grace finds the pod); this row is
the laptop still alive, told to stop: `up` itself destroys what it created, before it prints anything.

The real `up` (client/pods/up.py) rents from the local provider (real sandboxes, a real agent process), registers
with the drill's functions through the real watchdog client, and writes the real ledger and run store. At each
step a real signal is raised in the process (SIGINT, SIGHUP, SIGTERM in turn) as the step runs, and `tee` has died
first: every line `up` prints from then on fails with BrokenPipeError. One more run has no signal at all, only the
pipe closing (`up | head -1`). A pod of the same experiment started before by another `up` must live through all
of it (a false kill otherwise).

Billed minutes: from the signal to the destroy, the worst step (the bound is the abort's own time limit).
"""

from __future__ import annotations

import contextlib
import errno
import io
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from gpuc.client.context import Ctx
from gpuc.client.onpod.access import pod_access
from gpuc.client.onpod.upload import UPLOAD_DIR
from gpuc.client.onpod.upload import prepare as prepare_upload
from gpuc.client.pods.abort import CLEANUP_LIMIT_S
from gpuc.client.pods.interrupts import Interrupted
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.client.runs import RunStore
from gpuc.core.models import PodSpec
from gpuc.core.pod import Pod
from gpuc.core.providers.base import PodAccess
from gpuc.core.providers.local import LocalProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.app import ProviderPool
from gpuc.functions.edge import Request, response_bytes
from gpuc.functions.handlers import dispatch
from gpuc.testkit.demo import demo_settings
from gpuc.testkit.drill_stage import ADMIN, FUNCTIONS_URL, MIN, RowResult, Stage

EXPERIMENT = "f11i"
# Each step of `up`, and the signal that stops it there (None: only the pipe closes).
STEPS: tuple[tuple[str, int | None], ...] = (
    ("create", signal.SIGINT),  # the pod exists at the provider; `up` never got the create's answer
    ("registration", signal.SIGHUP),
    ("boot wait", signal.SIGTERM),
    ("agent start", signal.SIGINT),
    ("upload", signal.SIGHUP),
    ("job start", signal.SIGTERM),
    ("upload", None),  # `up | head -1`: no signal, the reader went away
)


@dataclass
class Trap:
    """Where this run stops: at `step`, `tee` dies (every later print fails) and `sig` is raised."""

    step: str
    sig: int | None
    sprung_at: float | None = None
    destroyed_at: dict[str, float] = field(default_factory=dict)

    def spring(self, step: str) -> None:
        if step != self.step or self.sprung_at is not None:
            return
        self.sprung_at = time.monotonic()
        if self.sig is not None:
            signal.raise_signal(self.sig)  # Python's handler runs in this thread, at the next instruction

    def echo(self, text: str) -> None:
        if self.sprung_at is not None:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")


class TrappedLocal(LocalProvider):
    """The local provider, the trap sprung where a step of `up` waits on it; destroys are timed."""

    trap: Trap | None = None

    def create(self, spec: PodSpec) -> Pod:
        pod = super().create(spec)
        self._spring("create")  # the pod exists; its answer is what the signal cuts off
        return pod

    def get(self, pod_id: str) -> Pod | None:
        pod = super().get(pod_id)
        if pod is not None and pod.status not in ("running", "terminated"):
            self._spring("boot wait")
        return pod

    def destroy(self, pod_id: str) -> Any:
        if self.trap is not None:
            self.trap.destroyed_at.setdefault(pod_id, time.monotonic())
        return super().destroy(pod_id)

    def _spring(self, step: str) -> None:
        if self.trap is not None:
            self.trap.spring(step)


class TrappedAccess(PodAccess):
    """The real way onto a local pod; the trap sprung as the agent starts, the upload sends, the job starts."""

    def __init__(self, inner: PodAccess, trap: Trap) -> None:
        self.inner = inner
        self.trap = trap

    def put_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        if path.startswith(UPLOAD_DIR):
            self.trap.spring("upload")
        self.inner.put_file(path, data, mode)

    def run(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        return self.inner.run(argv, timeout_s)

    def read(self, argv: list[str], timeout_s: float = 120.0) -> tuple[int, str]:
        return self.inner.read(argv, timeout_s)

    def spawn(self, argv: list[str], role: str) -> None:
        self.inner.spawn(argv, role)
        self.trap.spring(f"{role} start")  # started: what `up` does next is where the signal lands

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Laptop:
    """The user's side: settings, run store, ledger, the local provider, and the watchdog client answered
    by the drill's real handlers. The registration step springs the trap as its request is sent."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        home = stage.root / "f11i-laptop"
        self.settings: Settings = demo_settings(home).with_overrides(
            watchdog_url=FUNCTIONS_URL, admin_token=SecretStr(ADMIN)
        )
        self.provider = TrappedLocal(self.settings.home, settings=self.settings)
        stage.deps.providers = ProviderPool.of(stage.provider, self.provider)  # the watchdog registers local pods
        self.project = stage.root / "f11i-project"
        self.project.mkdir(parents=True, exist_ok=True)
        (self.project / "train.py").write_text("import time\ntime.sleep(600)\n")
        self.trap: Trap | None = None

    def _answer(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/v1/pods" and self.trap is not None:
            self.trap.spring("registration")
        asked = Request(request.method, request.url.path, dict(request.headers), request.content)
        # The laptop's clock, not the drill's virtual one: the local pods start in real time.
        answer = dispatch(asked, self.stage.deps, time.time())
        return httpx.Response(answer.status, content=response_bytes(answer))

    def access(self, provider: Any, pod: Pod, settings: Settings) -> PodAccess:
        inner = pod_access(provider, pod, settings)
        return inner if self.trap is None else TrappedAccess(inner, self.trap)

    def ctx(self, echo: Any) -> Ctx:
        watchdog = WatchdogClient(self.settings, httpx.MockTransport(self._answer), sleep=lambda s: None)
        return Ctx(
            self.settings,
            runs=RunStore(self.settings.home),
            echo=echo,
            watchdog=watchdog,
            providers={"local": self.provider},
            access=self.access,
        )

    def up(self, trap: Trap | None) -> tuple[BaseException | None, str]:
        """One `gpuc up EXPERIMENT -y -- python train.py` from the project folder; what ended it, and stderr."""
        self.trap = self.provider.trap = trap
        opts = UpOptions(
            experiment=EXPERIMENT,
            provider="local",
            command=["python", "train.py"],
            upload=prepare_upload(self.project, self.settings.upload_max_mb, self.settings.home),
            job_id=None,
        )
        echo = trap.echo if trap is not None else (lambda text: None)
        err = io.StringIO()
        ended: BaseException | None = None
        with self.ctx(echo) as ctx, contextlib.redirect_stderr(err):
            try:
                up(opts, ctx)
            except (Interrupted, BrokenPipeError) as exc:
                if trap is None or trap.sprung_at is None:
                    raise  # not the drill's own signal: the user's Ctrl-C stops the drill
                ended = exc
        self.trap = self.provider.trap = None
        return ended, err.getvalue()

    def alive(self) -> list[Pod]:
        return [p for p in self.provider.list_pods() if p.status != "terminated"]


@contextlib.contextmanager
def _laptop(stage: Stage) -> Iterator[Laptop]:
    laptop = Laptop(stage)
    try:
        yield laptop
    finally:
        for pod in laptop.alive():  # whatever the row left, so no process outlives the drill
            laptop.provider.destroy(pod.id)


def f11i_up_interrupted(stage: Stage) -> RowResult:
    problems: list[str] = []
    billed: list[float] = []
    left: list[str] = []
    false_kills = 0
    if threading.current_thread() is not threading.main_thread():
        problems.append("the row raises real signals: it runs in the main thread only")
        return _row(None, 0, problems)
    with _laptop(stage) as laptop:
        ended, _ = laptop.up(None)  # the pod another `up` started: it must live through every stop below
        if ended is not None or len(laptop.alive()) != 1:
            problems.append("the bystander pod did not start")
        bystander = {p.id for p in laptop.alive()}
        for step, sig in STEPS:
            label = f"{step} ({signal.Signals(sig).name if sig else 'pipe closed'})"
            trap = Trap(step, sig)
            before = {p.id for p in laptop.alive()}
            ended, said = laptop.up(trap)
            if trap.sprung_at is None:
                problems.append(f"{label}: `up` never reached the step (the row proved nothing)")
                continue
            if ended is None:
                problems.append(f"{label}: `up` returned as if it had succeeded")
            alive = {p.id for p in laptop.alive()}
            new = sorted(alive - before)
            left += [f"{label}: {pod_id}" for pod_id in new]
            false_kills += len(bystander - alive)
            bystander &= alive
            for pod_id, at in trap.destroyed_at.items():
                if pod_id not in before:
                    billed.append((at - trap.sprung_at) / MIN)
            if not trap.destroyed_at:
                problems.append(f"{label}: nothing destroyed (was a pod created?)")
            elif "destroyed " not in said:
                problems.append(f"{label}: stderr did not say what was destroyed")
    if left:
        problems.append(f"{len(left)} pod(s) left billing: {'; '.join(left)}")
    return _row(max(billed) if billed else None, false_kills, problems, pods_left=len(left))


def _row(billed: float | None, false_kills: int, problems: list[str], pods_left: int = 0) -> RowResult:
    return RowResult(
        "F11i",
        f"up | tee stopped at each step: {pods_left} pods left",  # each step and signal: the module's STEPS
        "up: destroy before printing",
        billed,
        CLEANUP_LIMIT_S / MIN,
        "0 pods left; destroyed within up's cleanup limit",
        false_kills=false_kills,
        problems=problems,
    )


__all__ = ["STEPS", "f11i_up_interrupted"]
