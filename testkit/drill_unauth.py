"""`gpuc drill` rows for unauthenticated and hostile input against the watchdog.

F11u  a stray kept "alive" by garbage pings every 4 minutes naming its id, while a flood of invented
      ids goes on: destroyed all the same, delayed once by at most the grace; nothing is stored for
      the invented ids.
F18   a flood fills the local ingest: the pods' real heartbeats are refused (the server's own gate,
      counted in its IngestLog), the real reaper holds silence kills and alerts; after the flood a
      pod that really died is destroyed as in F5.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuc.core import api
from gpuc.core.models import PodSpec
from gpuc.functions.edge import Request
from gpuc.functions.handlers import dispatch
from gpuc.functions.ingest import IngestLog
from gpuc.functions.server import MAX_IN_FLIGHT, OVERLOADED_BODY, Gate
from gpuc.instance_side.podhttp import HttpResult, Transport
from gpuc.testkit.drill_stage import EXPERIMENT, RowResult, Stage, no_gpu_reading, pod_row, survivors_killed

MIN = 60.0
GARBAGE_EVERY_S = 4 * MIN
INVENTED_PER_ROUND = 50


def garbage_ping(stage: Stage, pod_id: str, n: int) -> int:
    """A well-formed, current heartbeat that nobody signed: what anyone on the internet can send."""
    now = int(stage.now)
    body = api.HeartbeatBody(pod_id=pod_id, seq=n + 1, sent_at=now).model_dump_json().encode()
    headers = {api.H_POD: pod_id, api.H_TIMESTAMP: str(now), api.H_SEQ: str(n + 1), api.H_SIGNATURE: f"{n:064x}"}
    return dispatch(Request("POST", "/v1/heartbeat", headers, body), stage.deps, stage.now).status


def f11u_unsigned_pings_for_a_stray(stage: Stage) -> RowResult:
    run_id = "f11u-pod"
    created_at = stage.now
    stage.provider.create(PodSpec(experiment=EXPERIMENT, run_id=run_id, provider="drill", gpu_type="RTX 4090"))
    n = 0
    answers: set[int] = set()
    while stage.provider.alive(run_id) and stage.now < created_at + 4 * 3600:
        # With faults on, a store outage answers 500 (the store, not the request, is broken): only the
        # answers outside that window must all be 401.
        outage = stage.in_window("store unavailable")
        got = {garbage_ping(stage, run_id, n)} | {
            garbage_ping(stage, f"{run_id}-{n}-{i}", n) for i in range(INVENTED_PER_ROUND)
        }
        answers |= got - {500} if outage else got
        n += 1
        stage.run(GARBAGE_EVERY_S, until=lambda: not stage.provider.alive(run_id))
    problems = [] if answers <= {401} else [f"garbage pings answered {sorted(answers)}, not only 401"]
    stored = [p.pod_id for p in stage.real_store.list_pods()]
    if stored != [run_id]:
        problems.append(f"the store holds {len(stored)} records for one real pod: invented ids were stored")
    if not any(f"gpuc keep {run_id} --for 2h" in m for m in stage.messages(run_id)):
        problems.append("no warning told how to keep the pod")
    grace = stage.settings.unregistered_grace_s
    bound = (2 * grace + stage.period) / MIN + stage.slack(created_at)
    return RowResult(
        "F11u",
        "unsigned pings for a stray, every 4 min, plus a flood of invented ids",
        "reaper: one delay at most; nothing stored for strangers",
        stage.billed_min(run_id, created_at),
        bound,
        f"grace + one delay (grace) + one period; never past its deadline{stage.bound_note(created_at)}",
        notifications=stage.notifications(run_id),
        problems=problems,
    )


class GatedTransport:
    """The pod's way in, through the local server's real admission gate: refused there, it gets what the
    server answers (a 429) and the refusal is counted where the in-process reaper reads it."""

    def __init__(self, inner: Transport, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HttpResult:
        if not self.gate.enter():
            return HttpResult(429, OVERLOADED_BODY)
        try:
            return self.inner.post(url, body, headers, timeout_s)
        finally:
            self.gate.leave()


def f18_ingest_flooded(stage: Stage) -> RowResult:
    from gpuc.core.notify.notifier import OUTBOX_NAME, read_outbox

    ingest = IngestLog()
    stage.deps.ingest_health = ingest
    gate = Gate(ingest, stage.clock, MAX_IN_FLIGHT)
    living, dying = stage.launch("f18-pod-1"), stage.launch("f18-pod-2")
    for pod in (living, dying):
        no_gpu_reading(stage, pod)  # no second witness: the heartbeats are the only sign of life
        pod.ctx.client.transport = GatedTransport(pod.transport, gate)
    stage.run(35 * MIN)
    flood_at = stage.now
    for _ in range(MAX_IN_FLIGHT):  # the flood takes every slot: each real heartbeat is refused
        gate.enter()
    stage.run(40 * MIN)
    for _ in range(MAX_IN_FLIGHT):
        gate.leave()
    killed_in_flood = survivors_killed(stage, [living, dying])
    stage.run(30 * MIN)
    died_at = stage.now
    dying.alive_agent = False
    dying.idle()
    stage.run_until_gone(dying.pod_id)
    stage.run(20 * MIN)
    problems = []
    outbox = [m for m in read_outbox(stage.settings.home / OUTBOX_NAME) if m.kind == "ingest"]
    logged = [n for n in stage.sent() if n.kind == "ingest"]
    if not outbox and not (stage.plan.on and logged):  # faults on: the notifier may have been down then
        problems.append("no ingest alert reached the outbox")
    if not any(m.title.endswith("healthy again") for m in outbox) and not stage.plan.on:
        problems.append("no all-clear after the flood")
    if not ingest.trouble(flood_at, flood_at + 40 * MIN):
        problems.append("the ingest counted no refusal during the flood")
    bound = stage.passes_bound_min(stage.settings.silence_limit_s, died_at)
    return pod_row(
        stage,
        dying,
        "F18",
        "the ingest flooded for 40 min: heartbeats refused",
        "reaper: ingest trouble holds silence kills",
        stage.billed_min(dying.pod_id, died_at),
        bound,
        f"0 false kills in the flood; a dead one after it: as F5{stage.bound_note(died_at)}",
        false_kills=killed_in_flood + survivors_killed(stage, [living]),
        problems=problems,
    )


ROWS = (f11u_unsigned_pings_for_a_stray, f18_ingest_flooded)
