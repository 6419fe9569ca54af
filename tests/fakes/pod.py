"""Fakes for the pod side: every I/O edge (functions, GPU, /proc, sync, destroy) behind one seam.

The probes, the sync, the destroyer and the job are the ones the drill uses too (gpuc.testkit.podfakes).
The fake functions check what a real server would: the signature over `timestamp.seq.body`, the
5-minute window on the server's clock (refused as the real one refuses it: 401 with `server_time` and
a Date header), a seq that rises, and a body that validates against the shared pydantic contract.
`recording_functions` is the same two routes over real HTTP, for pods that run as processes (the pod CLI, the
supervised agent, ssh provisioning, the pod pythons): it checks the signature with the pod's token and records
what arrived.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

from gpuc.core.api import HeartbeatBody, PodEvent
from gpuc.core.clock import Clock, FakeClock
from gpuc.core.podconfig import PodConfig, render_env_file
from gpuc.core.settings import Settings
from gpuc.core.signing import derive_key, verify
from gpuc.instance_side.agent import Agent
from gpuc.instance_side.context import PodContext, load_context
from gpuc.instance_side.ending import Ender
from gpuc.instance_side.idle import Thresholds, job_activity
from gpuc.instance_side.jobtree import JobTree, JobTreeProbe
from gpuc.instance_side.observe import Probes
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.podhttp import HttpResult, TransportError
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

__all__ = ["FakeDestroyer", "FakeGpu", "FakeJob", "FakeProcTree", "FakeProcs", "FakeSsh", "FakeSync", "SkewedClock"]

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
ANY_GROWTH = Thresholds(5.0, 900.0, 1200.0, 600.0, 60.0)  # floors at zero: any CPU or I/O growth is progress


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
    deadline_at: float | None = None  # the watchdog's word on the deadline, in every heartbeat answer
    heartbeats: list[HeartbeatBody] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)
    event_times: list[float] = field(default_factory=list)
    last_seq: int = -1
    attempts: int = 0
    refused_for_time: int = 0
    time_in_refusal: bool = True  # the 401 body carries server_time (else: only the Date header)
    date_header: bool = True

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        self.attempts += 1
        check(0 < timeout_s <= 10, "bounded timeout")
        if self.down:
            raise TransportError("ConnectionRefusedError: [Errno 111] Connection refused")
        now = self.clock.now()
        date = formatdate(now, usegmt=True) if self.date_header else None
        seq, ts = int(headers["X-Gpuc-Seq"]), int(headers["X-Gpuc-Timestamp"])
        check(verify(derive_key(TOKEN), ts, seq, body, headers["X-Gpuc-Signature"]), "bad signature")
        check(headers["X-Gpuc-Pod"] == POD_ID, "pod header")
        if abs(ts - now) > 300:  # the server's order: signature, then the window, then the seq
            self.refused_for_time += 1
            refusal: dict[str, Any] = {"error": "timestamp outside the 300 s window: check the pod's clock"}
            if self.time_in_refusal:
                refusal["server_time"] = now
            return HttpResult(401, json.dumps(refusal).encode(), date)
        check(seq > self.last_seq, "seq must rise")
        self.last_seq = seq
        check(TOKEN.encode() not in body, "token in body")
        if self.status != 200:
            return HttpResult(self.status, b'{"error": "try later"}', date)
        if url.endswith("/v1/heartbeat"):
            hb = validated(HeartbeatBody, body)
            check(hb.seq == seq, "body seq = header seq")
            self.heartbeats.append(hb)
            self.calls.append("heartbeat")
            answer = {"ok": True, "server_time": now, "lease_until": self.lease_until, "deadline_at": self.deadline_at}
            return HttpResult(200, json.dumps(answer).encode(), date)
        check(url.endswith("/v1/events"), url)
        event = validated(PodEvent, body)
        self.events.append(event)
        self.event_times.append(now)
        self.calls.append(f"notify:{event.kind}")
        return HttpResult(200, b'{"ok": true}', date)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]


def make_pod(root: Path, **overrides: Any) -> PodPaths:
    """A pod as `up` leaves it: config.json through the laptop's PodConfig, a mode-600 secrets file."""
    paths = PodPaths(root)
    paths.state.mkdir(parents=True)
    settings = Settings(home=root / "home")
    values: dict[str, Any] = {"watchdog_url": "http://functions.test"}
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
    job: FakeJob

    def ender(self, **kw: Any) -> Ender:
        return Ender(
            cfg=self.ctx.cfg,
            paths=self.paths,
            sync=kw.pop("sync", self.sync),
            client=self.ctx.client,
            destroyer=lambda: self.destroyer,
            clock=self.ctx.clock,
            log=self.ctx.log,
            **kw,
        )

    def agent(self) -> Agent:
        return Agent(
            self.ctx.cfg,
            self.paths,
            probes=Probes(gpu=self.gpu, procs=self.procs, ssh=self.ssh, job=self.job),
            client=self.ctx.client,
            ender=self.ender(),
            sync=self.sync,
            clock=self.ctx.clock,
            log=self.ctx.log,
        )

    def log_text(self) -> str:
        return self.paths.log.read_text() if self.paths.log.exists() else ""


def wire(root: Path, clock: FakeClock, *, role: str = "agent", pod_clock: Clock | None = None, **cfg: Any) -> Pod:
    """`pod_clock`: the pod's own clock, when it is off (SkewedClock); the functions keep `clock`."""
    paths = make_pod(root, **cfg)
    calls = Calls()
    functions = FakeFunctions(calls, clock)
    ctx = load_context(paths, role=role, environ={}, clock=pod_clock or clock, transport=functions)
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
        job=FakeJob(FakeProcTree(root / "proc"), paths.job, clock),
    )


def settled(probe: JobTreeProbe, quiet_s: float = 0.3, tries: int = 50) -> JobTree:
    """A real job's tree once it has stopped growing for `quiet_s` (exec and the loader's reads are
    charged a moment after the start, later on a loaded machine). Bounded: at most `tries` rounds."""
    tree = probe.sample()
    assert tree is not None, "no job"
    for _ in range(tries):
        time.sleep(quiet_s)
        later = probe.sample()
        assert later is not None, "the job ended"
        if not job_activity(tree, later).progressing(ANY_GROWTH):
            return later
        tree = later
    raise AssertionError(f"the job kept growing for {tries * quiet_s:.0f} s")


# -- the two pod routes over real HTTP ------------------------------------------------------------------
class RecordingFunctions(BaseHTTPRequestHandler):
    token: ClassVar[str] = ""
    heartbeats: ClassVar[list[HeartbeatBody]]
    events: ClassVar[list[PodEvent]]
    problems: ClassVar[list[str]]

    @classmethod
    def reset(cls) -> None:
        cls.heartbeats, cls.events, cls.problems = [], [], []

    def do_POST(self) -> None:
        cls = type(self)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        ts, seq = int(self.headers["X-Gpuc-Timestamp"]), int(self.headers["X-Gpuc-Seq"])
        if not verify(derive_key(cls.token), ts, seq, body, self.headers["X-Gpuc-Signature"]):
            cls.problems.append("bad signature")
        try:
            if self.path == "/v1/heartbeat":
                cls.heartbeats.append(HeartbeatBody.model_validate_json(body))
            else:
                cls.events.append(PodEvent.model_validate_json(body))
        except ValueError as exc:
            cls.problems.append(str(exc))
        payload = json.dumps({"ok": True, "server_time": time.time(), "lease_until": None}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *_: Any) -> None:
        return


def recording_functions(token: str) -> type[RecordingFunctions]:
    """A fresh handler class (its own records) that accepts pings signed with `token`."""

    class Functions(RecordingFunctions):
        pass

    Functions.token = token
    Functions.reset()
    return Functions
