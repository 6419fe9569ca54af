"""RunPod REST v2 conformance: every request gpuc's provider code sends and every answer the emulator gives,
held to RunPod's published spec (runpod_v2.schema.json beside this file, derived from runpod/docs
api-reference-v2/openapi.json @a900806e, in our own words: this test never reads anything outside the repo).

The real provider code (core/providers/runpod.py, runpod_billing.py, `up`'s quote, the ssh-key check) is
driven against the emulator over real HTTP on loopback; the exchanges are recorded AT the emulator (what
crossed the wire, after the HTTP server parsed it). A request must name a route gpuc uses, carry only that
route's query parameters with valid values (RunPod would ignore an unknown one: gpuc must send none) and a
body its schema takes; an answer must be the route's schema for its status, a problem document otherwise,
with the rate-limit headers. The answers are held closed: a field the spec does not name is an invention.

The emulator's own request checks (testkit/emulators/runpod_contract.py, written by hand) and the schema
must agree on what is a 422: a hypothesis search over create bodies holds them to each other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.providers import GOOD_CREATE, RUNPOD_KEY, spec
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, FormatChecker  # type: ignore[import-untyped]

from gpuc.client.onpod.keys import key_standing
from gpuc.core.clock import FakeClock, iso
from gpuc.core.errors import ConfigError, ProviderAuthError, ProviderError, ProviderUnavailable
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_billing import RunPodBilling
from gpuc.core.providers.runpod_refusals import PoolDenied
from gpuc.testkit.emulators.common import EmuRequest, EmuResponse
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.runpod_contract import create_refusal
from gpuc.testkit.emulators.server import EmulatorServer

SCHEMA: dict[str, Any] = json.loads((Path(__file__).parent / "runpod_v2.schema.json").read_text(encoding="utf-8"))
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpucGMtdGVzdC1rZXktbm90LWEtcmVhbC1vbmUx me@laptop"
RTX4090 = "NVIDIA GeForce RTX 4090"
# The routes gpuc itself calls (PUT ssh-keys is the emulator's, for tests and rehearsals).
GPUC_ROUTES = {
    "GET /v2/pods",
    "POST /v2/pods",
    "GET /v2/pods/{id}",
    "DELETE /v2/pods/{id}",
    "POST /v2/pods/{id}/action",
    "GET /v2/catalog/gpus",
    "GET /v2/account/ssh-keys",
    "GET /v2/billing/pods",
}
FORMATS = FormatChecker()


def rfc3339(value: object) -> bool:
    """RFC 3339: a date, a time and an offset (Z or +hh:mm); Python's parser alone would take no offset."""
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


FORMATS.checks("date-time", raises=ValueError)(rfc3339)


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    return Draft202012Validator({**schema, "$defs": SCHEMA["$defs"]}, format_checker=FORMATS)


def errors_of(schema: dict[str, Any], value: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path)) or '$'}: {e.message}" for e in validator(schema).iter_errors(value)]


def route_of(method: str, path: str) -> str | None:
    for key in SCHEMA["routes"]:
        verb, pattern = key.split(" ", 1)
        if verb == method and re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", pattern), path.rstrip("/")):
            return str(key)
    return None


@dataclass(frozen=True)
class Exchange:
    request: EmuRequest
    answer: EmuResponse

    @property
    def route(self) -> str | None:
        return route_of(self.request.method, self.request.path)

    @property
    def v2(self) -> bool:
        return self.request.path.startswith("/v2/")

    def label(self) -> str:
        return f"{self.request.method} {self.request.path} -> {self.answer.status}"


def request_problems(ex: Exchange) -> list[str]:
    key = ex.route
    if key is None:
        return [f"{ex.label()}: not a route of RunPod's v2 spec that gpuc uses"]
    route = SCHEMA["routes"][key]
    problems = []
    for name, values in ex.request.query.items():
        if name not in route["query"]:
            problems.append(f"query {name!r} is not a parameter of {key} (RunPod would ignore it)")
        elif len(values) != 1:
            problems.append(f"query {name!r} sent {len(values)} times")
        else:
            problems += [f"query {name}={values[0]!r}: {e}" for e in errors_of(route["query"][name], values[0])]
    body = ex.request.body.strip()
    if "body" in route:
        try:
            problems += [f"body {e}" for e in errors_of(route["body"], json.loads(body))]
        except ValueError:
            problems.append("body: not JSON")
    elif body:
        problems.append(f"{key} takes no body")
    return problems


def answer_problems(ex: Exchange) -> list[str]:
    key = ex.route
    if key is None:
        return []  # the request's problem says it
    answers = SCHEMA["routes"][key]["answers"]
    status, headers = ex.answer.status, {k.lower(): v for k, v in ex.answer.headers.items()}
    if str(status) in answers:
        schema = answers[str(status)]
    elif status < 300:
        return [f"{ex.label()}: {status} is not an answer of {key}"]
    else:
        schema = answers["default"]
    problems = []
    if status != 401:
        problems += [f"no {h} header" for h in SCHEMA["headers"]["rate"] if h.lower() not in headers]
    if status == 429 and not re.fullmatch(SCHEMA["headers"]["retry_after"], headers.get("retry-after", "")):
        problems.append("a 429 without Retry-After in whole seconds")
    if schema is None:
        return problems + ([f"a {status} has no body"] if ex.answer.body else [])
    wanted = "application/json" if status < 300 else "application/problem+json"
    if headers.get("content-type") != wanted:
        problems.append(f"content-type {headers.get('content-type')!r}, not {wanted}")
    try:
        body = json.loads(ex.answer.body)
    except ValueError:
        return [*problems, "the body is not JSON"]
    return problems + [f"answer {e}" for e in errors_of(schema, body)]


class Recorder:
    """Every exchange, as the emulator's handler saw and answered it (behind the real HTTP server)."""

    def __init__(self, emu: RunPodEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
        self.exchanges: list[Exchange] = []
        handle = emu.handle

        def recorded(request: EmuRequest) -> EmuResponse:
            answer = handle(request)
            self.exchanges.append(Exchange(request, answer))
            return answer

        monkeypatch.setattr(emu, "handle", recorded)

    def mark(self) -> int:
        return len(self.exchanges)


@pytest.fixture
def served(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunPodEmulator, EmulatorServer, Recorder]]:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)
    recorder = Recorder(emu, monkeypatch)
    with EmulatorServer(emu, hang_s=5.0) as server:
        yield emu, server, recorder


def provider(server: EmulatorServer, clock: FakeClock, key: str = RUNPOD_KEY, cloud: str = "SECURE") -> RunPodProvider:
    return RunPodProvider(
        key,
        graphql_url=f"{server.url}/graphql",
        rest_url=f"{server.url}/v2",
        cloud_type=cloud,  # type: ignore[arg-type]
        clock=clock,
        backoff=zero_backoff,
        timeout_s=10.0,
    )


def drive_gpuc(emu: RunPodEmulator, server: EmulatorServer, clock: FakeClock) -> None:
    """What gpuc does to a RunPod account, through its own code: a first rental's checks, quotes for one GPU
    and for four, creates in each cloud, the pod's whole life, the refusals, the bill, a rate limit, a bad key."""
    secure, both = provider(server, clock), provider(server, clock, cloud="ALL")
    assert key_standing(secure, KEY, "id_ed25519.pub").status == "warn"  # type: ignore[union-attr]  # none yet
    emu.ssh_keys = [KEY]
    assert key_standing(secure, KEY, "id_ed25519.pub").status == "ok"  # type: ignore[union-attr]
    assert secure.offers() and secure.offers("RTX 4090", num_gpus=4)[0].gpu_count == 4
    assert both.offers(num_gpus=2)
    assert secure.pod_offer("RTX 4090", 4).price_per_hour == pytest.approx(4 * 0.74)
    with pytest.raises(ConfigError, match="at most 8"):
        secure.pod_offer("RTX 4090", 9)  # past maxCount: refused from the catalog, before any create
    pod = secure.create(spec("runpod", ssh_public_key=KEY))
    for _ in range(3):  # PROVISIONING, STARTING, RUNNING
        assert secure.get(pod.id) is not None
    emu.set_gpu_util(pod.id, 40)
    assert [p.id for p in secure.list_pods()] == [pod.id]
    secure.start(pod.id)  # a 409 (RUNNING cannot start), read back: running, done
    secure.stop(pod.id)
    assert secure.get(pod.id).status == "stopped"  # type: ignore[union-attr]
    secure.start(pod.id)
    four = both.create(spec("runpod", run_id="run0002", gpu_count=4, ssh_public_key=KEY))
    assert emu.pods[four.id].cloud == "COMMUNITY"  # the cheaper cloud that offers 4 on one pod
    emu.deny_pool(RTX4090, "SECURE")
    with pytest.raises(PoolDenied):
        secure.create(spec("runpod", run_id="run0003"))
    emu.set_stock("NVIDIA L4", 0)
    with pytest.raises(ProviderError, match="no L4"):
        secure.create(spec("runpod", run_id="run0004", gpu_type="L4"))
    emu.balance = 0.01
    with pytest.raises(ProviderError, match="insufficient balance"):
        secure.create(spec("runpod", run_id="run0005", gpu_type="RTX 3090"))
    emu.balance = 25.0
    assert secure.balance().balance_usd == 25.0  # GraphQL: no v2 route for it
    assert RunPodBilling(lambda: secure).fetch(secure, iso(clock.now())[:7]) is not None
    assert secure.destroy(pod.id) == "destroyed" and secure.destroy(four.id) == "destroyed"
    assert secure.get("nosuchpod0000") is None  # two 404 problems
    with pytest.raises(ProviderAuthError):
        provider(server, clock, key="rpa_NOTTHEKEY").list_pods()
    emu.rate_per_minute = emu._rate_used  # the quota spent: the next v2 request is a 429
    with pytest.raises(ProviderUnavailable, match="rate limited"):
        secure.list_pods()
    for client in (secure, both):
        client.close()


def drive_the_rest(emu: RunPodEmulator, server: EmulatorServer, clock: FakeClock) -> None:
    """Answers gpuc never asks for but the emulator gives: an ERROR pod, a pod without a volume, a 422 and
    its `errors`, the handler's 400s, the ssh keys replaced, an action the status does not allow."""
    clock.advance(61)  # a new rate window
    emu.rate_per_minute = 100_000
    auth = {"Authorization": f"Bearer {RUNPOD_KEY}"}
    body: dict[str, Any] = {"name": "raw", "image": "x", "gpu": {"id": "NVIDIA GeForce RTX 3090"}, "ports": ["22/tcp"]}
    with httpx.Client(base_url=server.url, headers=auth) as http:
        bare = http.post("/v2/pods", json=body).json()  # no volume, no cloud: SECURE
        emu.set_status(bare["id"], "error")
        http.get(f"/v2/pods/{bare['id']}")
        http.post(f"/v2/pods/{bare['id']}/action", json={"action": "stop"})  # 409: ERROR cannot stop
        http.post(f"/v2/pods/{bare['id']}/action", json={"action": "terminate"})  # 204
        http.post("/v2/pods", json={**body, "mounts": {"persistent": {"size": 3}}})  # 422: under 10 GB, no path
        http.post("/v2/pods", json={**body, "cpu": {"id": "cpu3c", "vcpuCount": 2}})  # 400: gpu and cpu
        http.post("/v2/pods", json={**body, "mounts": {"network": [{"volumeId": "v1", "path": "/data"}]}})
        http.put("/v2/account/ssh-keys", json={"keys": [KEY, "not a key"]})  # 422
        http.put("/v2/account/ssh-keys", json={"keys": []})
        http.get("/v2/catalog/gpus")  # no availability asked: none answered
        http.get("/v2/catalog/gpus", params={"include": "AVAILABILITY"})  # 400: product is required with it
        http.get("/v2/billing/pods", params={"lastN": "2", "bucketSize": "day"})


def test_every_request_gpuc_sends_and_every_answer_the_emulator_gives_keep_the_published_spec(
    served: tuple[RunPodEmulator, EmulatorServer, Recorder], clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    emu, server, recorder = served
    drive_gpuc(emu, server, clock)
    by_gpuc = recorder.mark()
    drive_the_rest(emu, server, clock)
    v2 = [ex for ex in recorder.exchanges if ex.v2]
    gpucs = [ex for ex in recorder.exchanges[:by_gpuc] if ex.v2]
    problems = {ex.label(): p for ex in gpucs if (p := request_problems(ex))}
    problems |= {f"answer to {ex.label()}": p for ex in v2 if (p := answer_problems(ex))}
    assert problems == {}
    assert {ex.route for ex in gpucs} == GPUC_ROUTES  # every route gpuc uses was exercised
    statuses = {ex.answer.status for ex in v2}
    assert statuses >= {200, 201, 204, 400, 401, 402, 403, 404, 409, 422, 429}, statuses
    assert [ex.request.path for ex in recorder.exchanges if not ex.v2] == ["/graphql"]  # the balance alone
    with capsys.disabled():
        print(f"\nRunPod v2 conformance: {len(gpucs)} requests gpuc sent, {len(v2)} answers, on "
              f"{len({ex.route for ex in v2})} routes, statuses {sorted(statuses)}: all within the spec")  # fmt: skip


def test_the_checks_catch_what_the_old_emulator_answered(
    served: tuple[RunPodEmulator, EmulatorServer, Recorder],
) -> None:
    """The schema is not a formality: the answers the emulator gave before it was held to the spec fail it."""
    _, server, _ = served
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {RUNPOD_KEY}"}) as http:
        pod = http.post("/v2/pods", json={"name": "x", "image": "i", "gpu": {"id": RTX4090}}).json()
    pod_schema = SCHEMA["$defs"]["Pod"]
    old_ssh = {**pod, "ssh": {"proxy": {"host": "ssh.runpod.io", "port": 22, "username": "u"}}}  # no command, no direct
    assert errors_of(pod_schema, old_ssh)
    assert errors_of(pod_schema, {**pod, "machine": {"gpuDisplayName": "RTX 4090"}})  # includeMachine is v1's
    assert errors_of(pod_schema, {**pod, "mounts": {"persistent": {"size": 1}}})  # under 10 GB, no path
    assert errors_of(pod_schema, {**pod, "cloud": "ALL"})
    assert errors_of(SCHEMA["$defs"]["PodList"], {"pods": [], "pagination": {"nextCursor": None}})
    route = SCHEMA["routes"]["GET /v2/pods"]["query"]
    assert "limit" not in route and "cursor" not in route  # what gpuc sent before: outside the contract
    assert pod["actions"] == ["stop", "terminate"]  # PROVISIONING may be stopped (the old emulator said start)


# ---- the emulator's hand-written checks and the schema agree ---------------------------------------------

GOOD = GOOD_CREATE
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 40) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=6), inner, max_size=2),
    max_leaves=4,
)
FIELDS = [*SCHEMA["$defs"]["CreatePod"]["properties"], "imageName", "supportPublicIp", "terminateAfter", "limit"]
NESTED = {
    "gpu": ["id", "count", "allowedCudaVersions", "minCudaVersion", "gpuCount"],
    "mounts": ["persistent", "network", "volume"],
}


def contract_broken(body: dict[str, Any]) -> bool:
    return bool(errors_of(SCHEMA["$defs"]["CreatePod"], body))


def emulator_says_422(body: dict[str, Any]) -> bool:
    refused = create_refusal(body)
    return refused is not None and refused[0] == 422


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=JSON, drop=st.booleans())
def test_the_emulator_refuses_a_create_body_with_422_exactly_when_the_schema_does(
    field: str, value: Any, drop: bool
) -> None:
    body = {k: v for k, v in GOOD.items() if k != field} if drop else {**GOOD, field: value}
    assert emulator_says_422(body) == contract_broken(body), body


@settings(max_examples=300, deadline=None)
@given(outer=st.sampled_from(sorted(NESTED)), data=st.data(), value=JSON)
def test_and_so_for_the_gpu_and_the_mounts_inside(outer: str, data: st.DataObject, value: Any) -> None:
    inner = data.draw(st.sampled_from(NESTED[outer]))
    if outer == "mounts" and inner in ("persistent", "network"):
        value = data.draw(st.sampled_from([
            {"size": value, "path": "/w"}, {"size": 30, "path": value}, {"size": 30}, {"path": "/w"},
            {"size": 30, "path": "/w", "extra": value}, [{"volumeId": value, "path": "/n"}], [], value,
        ]))  # fmt: skip
    body = {**GOOD, outer: {**GOOD.get(outer, {}), inner: value}} if outer == "gpu" else {**GOOD, outer: {inner: value}}
    assert emulator_says_422(body) == contract_broken(body), body
