"""gpuc's Vast client and the Vast emulator held to Vast's published spec (vast_spec.py, the project's
restatement of it): the real core/providers/vast.py (the account's client, its billing, the pod's
self-destroy) drives the emulator over real HTTP through a whole life and its refusals, every exchange is
taped on the wire, and each request gpuc sent and each answer the emulator gave is validated against the
route's schema: a documented path and method, only documented query parameters and body fields of their
documented types and bounds, the bearer key on every call; an answer on a documented status with only
documented properties of their documented types (a 429 may be plain text)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fakes.providers import VAST_KEY, spec
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from vast_spec import DEVIATIONS, ROUTES, Route, route_for

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, ProviderAuthError, ProviderError
from gpuc.core.providers.endpoints import VAST_URL_ENV
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.podhttp import Sent, urllib_send
from gpuc.core.providers.podkey import VastSelfDestroyer
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_billing import VastBilling
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

OFFER = "11684738"  # the emulator's RTX 4090 that passes every default filter (min_bid 0.20)
RTX3090 = "11684741"  # min_bid 0.07
A100 = "11684743"
PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPLANTEDpublicHalfOfTheKey gpuc@laptop"


@dataclass(frozen=True)
class Exchange:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes
    status: int
    answer: bytes
    content_type: str


class Tape(httpx.BaseTransport):
    """Real HTTP to the emulator's server, every exchange kept as it crossed the wire."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.exchanges: list[Exchange] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        answer = response.read()
        self.exchanges.append(
            Exchange(
                request.method,
                str(request.url),
                {k.lower(): v for k, v in request.headers.items()},
                request.read(),
                response.status_code,
                answer,
                response.headers.get("content-type", ""),
            )
        )
        return httpx.Response(response.status_code, headers=response.headers, content=answer, request=request)

    def pod_send(self, method: str, url: str, headers: Any, body: bytes | None, timeout_s: float) -> Sent:
        """The pod's own sender (urllib, core/providers/podkey.py) over real HTTP, taped the same way."""
        sent = urllib_send(method, url, headers, body, timeout_s)
        self.exchanges.append(
            Exchange(
                method,
                url,
                {k.lower(): v for k, v in headers.items()},
                body or b"",
                sent.status,
                sent.body,
                sent.headers.get("content-type", ""),
            )
        )
        return sent

    def close(self) -> None:
        self.inner.close()


def schema_errors(schema: dict[str, Any], value: Any, where: str) -> list[str]:
    return [f"{where}: {e.json_path}: {e.message[:200]}" for e in Draft202012Validator(schema).iter_errors(value)]


def request_problems(ex: Exchange, route: Route) -> list[str]:
    url = urlsplit(ex.url)
    problems = [] if ex.headers.get("authorization", "").startswith("Bearer ") else ["no bearer key"]
    query = parse_qs(url.query, keep_blank_values=True)
    for name, values in query.items():
        param = route.query.get(name)
        if param is None:
            problems.append(f"query parameter {name!r} is not documented")
            continue
        for raw in values:
            try:
                value = json.loads(raw) if param.json else raw
            except ValueError:
                problems.append(f"query parameter {name!r} is not JSON")
                continue
            problems += schema_errors(param.schema, value, f"query {name}")
    problems += [f"query parameter {n!r} is required" for n, p in route.query.items() if p.required and n not in query]
    if route.body is None:
        return problems + (["a body on a route that takes none"] if ex.body else [])
    if not ex.body:
        return [*problems, "no body"]
    return problems + schema_errors(route.body, json.loads(ex.body), "body")


def answer_problems(ex: Exchange, route: Route) -> list[str]:
    schema = route.answers.get(ex.status)
    if schema is None:
        return [f"status {ex.status} is not documented for {route.name}"]
    if ex.status == 429 and "json" not in ex.content_type:
        return [] if ex.answer.startswith(b"API requests too frequent") else ["a 429 in words Vast does not use"]
    try:
        body = json.loads(ex.answer)
    except ValueError:
        return [f"status {ex.status}: not JSON"]
    return schema_errors(schema, body, f"answer {ex.status}")


def problems_of(ex: Exchange) -> list[str]:
    route = route_for(ex.method, urlsplit(ex.url).path)
    if route is None:
        return [f"{ex.method} {urlsplit(ex.url).path} is not a documented route"]
    return [f"{route.name} {ex.method} {urlsplit(ex.url).path}: {p}" for p in request_problems(ex, route)] + [
        f"{route.name} {ex.method} {urlsplit(ex.url).path}: {p}" for p in answer_problems(ex, route)
    ]


@pytest.fixture
def tape() -> Iterator[Tape]:
    taped = Tape()
    yield taped
    taped.close()


def client(server: EmulatorServer, tape: Tape, clock: FakeClock, key: str = VAST_KEY) -> VastProvider:
    return VastProvider(key, url=server.url, transport=tape, clock=clock, backoff=zero_backoff)


def self_destroyer(server: EmulatorServer, emu: VastEmulator, pod_id: str, tape: Tape) -> VastSelfDestroyer:
    environ = {**emu.pod_environ(pod_id), VAST_URL_ENV: server.url}
    return VastSelfDestroyer.from_environ(environ, send=tape.pod_send)


def drive_a_whole_life(server: EmulatorServer, emu: VastEmulator, tape: Tape, clock: FakeClock) -> None:
    """Everything gpuc does at Vast, on the routes it uses, the refusals included."""
    gpuc = client(server, tape, clock)
    # Offers: on-demand (the default type), bids, one by its id.
    assert [o.id for o in gpuc.offers("RTX 4090")] == [OFFER]
    assert gpuc.offers("RTX 4090", interruptible=True)[0].min_bid == 0.20
    assert gpuc.offer(OFFER) is not None
    with pytest.raises(ConfigError):  # under the floor: gpuc's own refusal, no create sent
        gpuc.create(spec("vast", "run0009", interruptible=True, bid_per_gpu=0.12))
    # The account's ssh keys: none yet (a 404), then one; the key `up` logs in with handed to the pod.
    assert gpuc.registered_ssh_keys() == []
    emu.ssh_keys = [PUBLIC]
    assert gpuc.registered_ssh_keys() == [PUBLIC]
    # An on-demand life: create, boot, list, stop, start (its machine busy: scheduling), destroy, gone.
    pod = gpuc.create(spec("vast", offer_id=OFFER, ssh_public_key=PUBLIC))
    while (seen := gpuc.get(pod.id)) is not None and seen.status != "running":
        pass
    assert seen is not None and seen.ssh_port and [p.id for p in gpuc.list_pods()] == [pod.id]
    gpuc.stop(pod.id)
    emu.occupy_machine(pod.id)
    gpuc.start(pod.id)
    assert "scheduling" in gpuc.get(pod.id).raw_status  # type: ignore[union-attr]
    emu.free_machine(pod.id)
    assert gpuc.balance().balance_usd == 25.0
    assert gpuc.destroy(pod.id) == "destroyed" and gpuc.destroy(pod.id) == "already_gone"
    # The cheapest offer found by gpuc itself; a bid on it; the bid outbid.
    gpuc.create(spec("vast", "run0002"))
    bid = gpuc.create(spec("vast", "run0003", gpu_type="RTX 3090", interruptible=True, bid_per_gpu=0.09))
    emu.outbid(bid.id)
    assert gpuc.get(bid.id).status == "paused"  # type: ignore[union-attr]
    # Refusals, each answered in the body its route documents.
    refusals = [
        spec("vast", "run0004", offer_id=A100, interruptible=True, bid_per_gpu=0.05),  # 400 invalid_price
        spec("vast", "run0005", offer_id="1234567"),  # 404: no such offer
        spec("vast", "run0006", offer_id=OFFER),  # 410: taken by run0002
    ]
    for refused in refusals:
        with pytest.raises(ProviderError):
            gpuc.create(refused)
    emu.outbidder_leaves(bid.id)
    emu.offers[int(RTX3090)].rented = False
    emu.offers[int(RTX3090)].winning_bid = 0.50
    with pytest.raises(ProviderError, match="cannot be scheduled"):  # 410 with cancel_unavail
        gpuc.create(spec("vast", "run0007", offer_id=RTX3090, interruptible=True, bid_per_gpu=0.10))
    emu.ignore_cancel_unavail = True  # a server that makes the stopped instance anyway: 400 naming it
    with pytest.raises(ProviderError, match="confirmed gone"):
        gpuc.create(spec("vast", "run0008", offer_id=RTX3090, interruptible=True, bid_per_gpu=0.10))
    emu.ignore_cancel_unavail = False
    with pytest.raises(ProviderAuthError):
        client(server, tape, clock, key="0" * 32).balance()  # 401
    # A listing over pages, one of them answered 429 first (plain text, retried).
    for n in range(30):
        emu.add_foreign_pod(f"notebook-{n}")
    emu.faults.add(op="list", kind="429", times=1)
    assert len(gpuc.list_pods()) == 32  # run0002, run0003 and the 30 others
    # The bill, an hour on.
    clock.advance(3600)
    month = time.strftime("%Y-%m", time.gmtime(clock.now()))
    assert VastBilling(lambda: client(server, tape, clock)).billing(month)
    # The pod's own key: destroy itself; a refusal dressed as "not found" read back and stopped; the kept
    # window's stop.
    ours = [p for p in gpuc.list_pods() if p.managed]
    assert self_destroyer(server, emu, ours[0].id, tape).destroy_self().startswith("destroyed")
    emu.pod_key_not_found = True
    assert "still there" in self_destroyer(server, emu, ours[1].id, tape).destroy_self()
    emu.pod_key_not_found = False
    assert self_destroyer(server, emu, ours[1].id, tape).stop_self().startswith("stopped")
    gpuc.close()


def test_every_request_gpuc_sends_and_every_answer_the_emulator_gives_is_as_vast_documents(
    vast_server: EmulatorServer, vast_emu: VastEmulator, tape: Tape, clock: FakeClock
) -> None:
    drive_a_whole_life(vast_server, vast_emu, tape, clock)
    problems = [p for ex in tape.exchanges for p in problems_of(ex)]
    assert problems == []
    seen = Counter((route_for(ex.method, urlsplit(ex.url).path).name, ex.status) for ex in tape.exchanges)  # type: ignore[union-attr]
    print(f"\n{len(tape.exchanges)} exchanges validated (request and answer each):")
    for (name, status), count in sorted(seen.items()):
        print(f"  {name:24} {status}: {count}")
    assert {name for name, _ in seen} == {r.name for r in ROUTES}  # every route gpuc uses, exercised
    documented_errors = {
        ("create_instance.yaml", 400), ("create_instance.yaml", 404),
        ("create_instance.yaml", 410), ("destroy_instance.yaml", 404), ("show_instances.yaml", 429),
        ("show_user.yaml", 401), ("show_ssh_keys.yaml", 404),
    }  # fmt: skip
    assert documented_errors <= set(seen)


# ---- the check bites: what Vast does not document is caught ----------------------------------------------


def exchange(method: str, path: str, body: Any = None, status: int = 200, answer: Any = None, **query: str) -> Exchange:
    url = httpx.URL(f"http://127.0.0.1{path}", params=query or None)
    raw = json.dumps(body).encode() if body is not None else b""
    return Exchange(
        method, str(url), {"authorization": "Bearer k"}, raw, status, json.dumps(answer).encode(), "application/json"
    )


GOOD_CREATE = {"image": "img", "disk": 30.0, "label": "gpuc-x", "env": {"A": "1"}, "runtype": "ssh_direct"}
CREATED = {"success": True, "new_contract": 1}
ASK = "/api/v0/asks/1/"


@pytest.mark.parametrize(
    ("ex", "caught"),
    [
        (exchange("PUT", ASK, {**GOOD_CREATE, "client_id": "me"}, answer=CREATED), "client_id"),
        (exchange("PUT", ASK, {**GOOD_CREATE, "runtype": "ssh_direc ssh_proxy"}, answer=CREATED), "ssh_"),
        (exchange("PUT", ASK, {**GOOD_CREATE, "price": 200}, answer=CREATED), "price"),
        (exchange("PUT", ASK, {**GOOD_CREATE, "env": {"A": "x" * 257}}, answer=CREATED), "env"),
        (exchange("PUT", ASK, GOOD_CREATE, answer={**CREATED, "id": 1}), "id"),
        (exchange("POST", "/api/v0/bundles/", {"type": "on-demand"}, answer={"offers": []}), "on-demand"),
        (exchange("POST", "/api/v0/bundles/", {"reliabilty": {"gt": 1}}, answer={"offers": []}), "reliabilty"),
        (exchange("POST", "/api/v0/bundles/", {}, answer={"offers": [{"id": 1, "verified": True}]}), "verified"),
        (exchange("GET", "/api/v0/users/current", answer={}), "not a documented route"),
        (exchange("GET", "/api/v0/instances/1/", answer={"instances": {"id": 1, "actual_status": "paused"}}), "paused"),
        (exchange("GET", "/api/v1/instances/", answer={"instances": []}, cursor="x"), "cursor"),
        (exchange("GET", "/api/v1/instances/", answer={"instances": []}, limit="30"), "30"),
        (exchange("DELETE", "/api/v0/instances/1/", {}, status=409, answer={}), "409"),
        (exchange("PUT", "/api/v0/instances/1/", {"state": "paused"}, answer={"success": True}), "paused"),
        (exchange("GET", "/api/v0/charges/", answer={}, format="table"), "select_filters"),
    ],
)
def test_the_check_catches_what_vast_does_not_document(ex: Exchange, caught: str) -> None:
    found = problems_of(ex)
    assert found and any(caught in p for p in found), found


def test_every_deviation_from_a_routes_yaml_names_a_route() -> None:
    names = {r.name for r in ROUTES} | {"*"}
    assert {route for route, _ in DEVIATIONS} <= names
