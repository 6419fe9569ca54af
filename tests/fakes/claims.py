"""Pods as `up` makes them with a watchdog that holds a key: registered without a key of their
own, given the derived token and the claim the watchdog answers, and pinging through the pod's real signer
and client (instance_side.heartbeat), which send the claim and keep the latest on disk."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from fakes.watchdog import World
from gpuc.core import api
from gpuc.core.signing import derive_key, sign
from gpuc.functions.edge import Request, response_bytes
from gpuc.instance_side.heartbeat import Answer, PodClient, heartbeat_body
from gpuc.instance_side.podhttp import HttpResult
from gpuc.instance_side.podlog import PodLog
from gpuc.instance_side.signer import ClaimFile, SeqCounter, Signer

KEY = "a1" * 32  # a watchdog's key (config.json / SSM in real life)
OTHER_KEY = "b2" * 32  # another watchdog's


class WorldTransport:
    """The pod's HTTP client, answered by the real handlers of whatever world (and store) is current."""

    def __init__(self, world: World) -> None:
        self.world = world

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        req = Request("POST", urlsplit(url).path, headers, body)
        answer = self.world.call(req.method, req.path, req.body, dict(req.headers))
        return HttpResult(answer.status, response_bytes(answer))


class ClaimedPod:
    def __init__(self, world: World, pod_id: str, root: Path, *, at_provider: bool = True, **fields: object) -> None:
        self.world, self.pod_id = world, pod_id
        if at_provider:
            world.provider.add(pod_id, watchdog=world.deps.watchdog_id)
        request = api.RegisterRequest.model_validate(
            {
                "pod_id": pod_id,
                "provider": world.provider.name,
                "name": f"gpuc-{pod_id}",
                "experiment": "exp",
                "price_per_hour": 0.5,
                "started_at": world.now,
                **fields,
            }
        )
        answer = world.admin("POST", "/v1/pods", request)
        assert answer.status == 200, answer.body
        got = api.RegisterAnswer.model_validate(answer.body)
        assert got.token is not None and got.claim is not None
        self.token, self.first_claim = got.token, got.claim
        state = root / pod_id
        state.mkdir(parents=True)
        self.state = state
        self.client = self.agent_restart()

    def agent_restart(self) -> PodClient:
        """A fresh agent process: the claim comes from the pod's disk (or the secrets' first one), as in
        instance_side.context.load_context."""
        clock = self.world.clock
        self.claim = ClaimFile(self.state / "claim", self.first_claim)
        signer = Signer(self.pod_id, self.token, SeqCounter(self.state / "seq", clock), clock, self.claim)
        log = PodLog(self.state / "agent.log", clock, role="agent", secrets=[self.token])
        self.client = PodClient("http://watchdog.test", signer, WorldTransport(self.world), clock, log)
        return self.client

    def ping(self) -> Answer | None:
        self.client.queue_heartbeat(heartbeat_body(self.pod_id, job_running=True))
        return self.client.flush(self.world.now)

    def log_text(self) -> str:
        path = self.state / "agent.log"
        return path.read_text() if path.exists() else ""


def ping_as(world: World, pod_id: str, token: str, claim: str | None = None, seq: int = 50) -> int:
    """A ping for `pod_id` signed with `token` (and presenting `claim`), sent now: its HTTP status."""
    body = world.heartbeat_body(pod_id, seq)
    ts = int(world.now)
    headers = {
        api.H_POD: pod_id, api.H_TIMESTAMP: str(ts), api.H_SEQ: str(seq),
        api.H_SIGNATURE: sign(derive_key(token), ts, seq, body),
    }  # fmt: skip
    if claim is not None:
        headers[api.H_CLAIM] = claim
    return world.call("POST", "/v1/heartbeat", body, headers).status
