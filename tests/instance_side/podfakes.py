"""Fakes for the pod side: every I/O edge (functions, GPU, /proc, sync, destroy) behind one seam.

The fake functions check what a real server would: the signature over `timestamp.seq.body`, a seq
that rises, and a body that validates against the shared pydantic contract (core.api).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from gpuc.core.api import HeartbeatBody, PodEvent
from gpuc.core.clock import FakeClock
from gpuc.core.podconfig import PodConfig, render_env_file
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, verify
from gpuc.instance_side.agent import Agent, Probes
from gpuc.instance_side.context import PodContext, load_context
from gpuc.instance_side.ending import Ender
from gpuc.instance_side.gpu import GpuReadError, GpuSample
from gpuc.instance_side.heartbeat import HttpResult, TransportError
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.procs import PythonProc, SshSession
from gpuc.instance_side.sync import Manifest

TOKEN = "tok-" + "s3cr3t" * 6
POD_ID = "lp-abc123"


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], server: type[HTTPServer] = HTTPServer) -> Iterator[str]:
    """A real HTTP server on a free local port, for tests of the real (urllib) transport; yields its URL."""
    httpd = server(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def reply_json(handler: BaseHTTPRequestHandler, status: int, payload: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
MINUTE = 60.0


class ContractViolation(BaseException):
    """Not an Exception: the pod code swallows transport errors, and must not swallow this."""


def check(condition: bool, what: str) -> None:
    if not condition:
        raise ContractViolation(what)


class Calls(list[str]):
    """The order things happened in, across every fake."""


def validated(model: Any, body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValueError as exc:
        raise ContractViolation(str(exc)) from None


@dataclass
class FakeFunctions:
    """The functions' two pod routes, strict like the real ones."""

    calls: Calls
    clock: FakeClock
    down: bool = False
    status: int = 200
    lease_until: float | None = None
    heartbeats: list[HeartbeatBody] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list)
    last_seq: int = -1
    attempts: int = 0

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        self.attempts += 1
        check(0 < timeout_s <= 10, "bounded timeout")
        if self.down:
            raise TransportError("ConnectionRefusedError: [Errno 111] Connection refused")
        seq, ts = int(headers["X-Gpuc-Seq"]), int(headers["X-Gpuc-Timestamp"])
        check(verify(derive_key(TOKEN), ts, seq, body, headers["X-Gpuc-Signature"]), "bad signature")
        check(headers["X-Gpuc-Pod"] == POD_ID, "pod header")
        check(seq > self.last_seq, "seq must rise")
        check(abs(ts - self.clock.now()) <= 300, "timestamp window")
        self.last_seq = seq
        check(TOKEN.encode() not in body, "token in body")
        if self.status != 200:
            return HttpResult(self.status, b'{"error": "try later"}')
        if url.endswith("/v1/heartbeat"):
            hb = validated(HeartbeatBody, body)
            check(hb.seq == seq, "body seq = header seq")
            self.heartbeats.append(hb)
            self.calls.append("heartbeat")
            answer = {"ok": True, "server_time": self.clock.now(), "lease_until": self.lease_until}
            return HttpResult(200, json.dumps(answer).encode())
        check(url.endswith("/v1/events"), url)
        event = validated(PodEvent, body)
        self.events.append(event)
        self.event_times.append(self.clock.now())
        self.calls.append(f"notify:{event.kind}")
        return HttpResult(200, b'{"ok": true}')

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


@dataclass
class FakeSync:
    calls: Calls
    fail: str | None = None
    verified: bool = True
    pushes: int = 0

    def describe(self) -> str:
        return "fake://bucket"

    def push(self, results_dir: Path) -> Manifest:
        self.pushes += 1
        self.calls.append("sync")
        if self.fail:
            raise OSError(self.fail)
        return Manifest("fake://bucket", {"a.txt": 3})

    def verify(self, manifest: Manifest) -> bool:
        self.calls.append("verify")
        return self.verified


@dataclass
class FakeDestroyer:
    calls: Calls
    refuse: bool = False

    def destroy_self(self) -> str:
        self.calls.append("destroy")
        if self.refuse:
            raise RuntimeError("403 pod key may not terminate")
        return "destroyed"


@dataclass
class FakeGpu:
    util: float | None = 0.0
    error: str | None = None  # the whole read fails
    device_error: str | None = None  # one GPU is lost
    note: str | None = None

    def read(self) -> list[GpuSample]:
        if self.error:
            raise GpuReadError(self.error)
        return [GpuSample(index=0, name="RTX 4090", utilization_pct=self.util, error=self.device_error)]


@dataclass
class FakeProcs:
    pids: list[int] = field(default_factory=list)
    error: Exception | None = None

    def python_procs(self) -> list[PythonProc]:
        if self.error:
            raise self.error
        return [PythonProc(pid=p, comm="python3") for p in self.pids]


@dataclass
class FakeSsh:
    sessions_: list[SshSession] = field(default_factory=list)

    def sessions(self) -> list[SshSession]:
        return list(self.sessions_)


def make_pod(root: Path, **overrides: Any) -> PodPaths:
    """A pod as `up` leaves it: config.json through the laptop's PodConfig, a mode-600 secrets file."""
    paths = PodPaths(root)
    paths.state.mkdir(parents=True)
    settings = Settings(home=root / "home")
    values: dict[str, Any] = {"functions_url": "http://functions.test"}
    values.update(overrides)
    cfg = PodConfig.for_pod(settings, pod_id=POD_ID, provider="local", experiment="exp", run_id="run01")
    cfg = cfg.model_copy(update=values)
    PodConfig.model_validate(cfg.model_dump())  # overrides must stay valid on the laptop side too
    paths.config.write_text(cfg.model_dump_json())
    paths.secrets.write_text(render_env_file({"GPUC_POD_TOKEN": TOKEN, "HF_TOKEN": "hf_abcdefghijklmnop"}))
    paths.secrets.chmod(0o600)
    return paths


@dataclass
class Pod:
    """An agent (or an ender) wired to fakes, with the shared call log."""

    paths: PodPaths
    clock: FakeClock
    calls: Calls
    functions: FakeFunctions
    ctx: PodContext
    sync: FakeSync
    destroyer: FakeDestroyer
    gpu: FakeGpu
    procs: FakeProcs
    ssh: FakeSsh

    def ender(self, **kw: Any) -> Ender:
        return Ender(
            cfg=self.ctx.cfg,
            paths=self.paths,
            sync=kw.pop("sync", self.sync),
            client=self.ctx.client,
            destroyer=lambda: self.destroyer,
            clock=self.clock,
            log=self.ctx.log,
            **kw,
        )

    def agent(self) -> Agent:
        return Agent(
            self.ctx.cfg,
            self.paths,
            probes=Probes(gpu=self.gpu, procs=self.procs, ssh=self.ssh),
            client=self.ctx.client,
            ender=self.ender(),
            sync=self.sync,
            clock=self.clock,
            log=self.ctx.log,
        )

    def log_text(self) -> str:
        return self.paths.log.read_text() if self.paths.log.exists() else ""


def wire(root: Path, clock: FakeClock, *, role: str = "agent", **cfg: Any) -> Pod:
    paths = make_pod(root, **cfg)
    calls = Calls()
    functions = FakeFunctions(calls, clock)
    ctx = load_context(paths, role=role, environ={}, clock=clock, transport=functions)
    return Pod(
        paths=paths,
        clock=clock,
        calls=calls,
        functions=functions,
        ctx=ctx,
        sync=FakeSync(calls),
        destroyer=FakeDestroyer(calls),
        gpu=FakeGpu(),
        procs=FakeProcs(),
        ssh=FakeSsh(),
    )
