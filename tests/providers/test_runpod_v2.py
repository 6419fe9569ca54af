"""RunPod on REST v2: which endpoints gpuc reaches, the money rules on v2 (a create with an
unclear outcome looked up by name for as long as the listing lags; "not found" read twice; a DELETE's 404 is
gone), GraphQL behind one function that says when it is retired, and the emulator as strict as v2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fakes.providers import GOOD_CREATE, RUNPOD_KEY, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.pod import OWNER_ENV
from gpuc.core.providers.answers import GRAPHQL_RETIRED, GraphQLRetired
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.podkey import RunPodSelfDestroyer
from gpuc.core.providers.runpod import LOOKUP_WINDOW_S, RunPodProvider
from gpuc.core.providers.runpod_graphql import legacy_graphql
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer

GOOD = GOOD_CREATE


def provider_for(emu: RunPodEmulator, clock: FakeClock, **kwargs: object) -> RunPodProvider:
    return RunPodProvider(
        RUNPOD_KEY,
        graphql_url="https://api.runpod.test/graphql",
        rest_url="https://api.runpod.test/v2",
        transport=emu.transport(),
        clock=clock,
        backoff=zero_backoff,
        **kwargs,  # type: ignore[arg-type]
    )


def raw(
    emu: RunPodEmulator, method: str, path: str, body: object = None, key: str | None = RUNPOD_KEY
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(transport=emu.transport(), base_url="https://api.runpod.test") as http:
        return http.request(method, path, json=body, headers=headers)


# -- which endpoints: v2 only, GraphQL for the balance alone ------------------------------------------------


def test_a_pods_whole_life_reaches_rest_v2_only(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    assert runpod.get(pod.id) is not None
    runpod.stop(pod.id)
    runpod.start(pod.id)
    assert [p.id for p in runpod.list_pods()] == [pod.id]
    assert runpod.destroy(pod.id) == "destroyed"
    reached = {(r.method, r.path.replace(pod.id, "{id}")) for r in runpod_emu.requests}
    assert reached == {
        ("GET", "/v2/catalog/gpus"),  # "RTX 4090" to its catalog id
        ("POST", "/v2/pods"),
        ("GET", "/v2/pods/{id}"),
        ("POST", "/v2/pods/{id}/action"),
        ("GET", "/v2/pods"),
        ("DELETE", "/v2/pods/{id}"),
    }
    actions = [json.loads(r.body)["action"] for r in runpod_emu.requests if r.path.endswith("/action")]
    assert actions == ["stop", "start"]


def test_gpuc_ls_reaches_rest_v2_only(tmp_path: Path) -> None:
    """The real `gpuc ls`, in its own process, against the emulator on loopback: GET /v2/pods and nothing else
    (no GraphQL: `ls` shows no balance)."""
    emu = RunPodEmulator(api_key=RUNPOD_KEY)
    pod_id = emu.add_foreign_pod("gpuc-lsrun0001", env={OWNER_ENV: "1", "GPUC_EXPERIMENT": "train"})
    with EmulatorServer(emu) as server:
        env_file = tmp_path / "gpuc.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in server.client_env().items()))
        env_file.chmod(0o600)
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("GPUC_", "RUNPOD_", "VAST_", "AWS_"))},
            **server.client_env(),
            "GPUC_ENV_FILE": str(env_file),
            "GPUC_PROVIDER": "runpod",
            "HOME": str(tmp_path),
        }
        gpuc = str(Path(sys.executable).parent / "gpuc")
        proc = subprocess.run([gpuc, "ls"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and pod_id in proc.stdout, proc.stdout + proc.stderr
    assert {(r.method, r.path) for r in emu.requests} == {("GET", "/v2/pods")}


# -- an unclear create: looked up by name for as long as the listing lags ------------------------------


@pytest.mark.parametrize("lag_s", [0.0, 10.0, 30.0])
def test_a_create_whose_answer_was_lost_is_found_by_name_through_the_listings_lag(
    runpod_emu: RunPodEmulator, clock: FakeClock, lag_s: float
) -> None:
    runpod_emu.list_lag_s = lag_s  # the new pod shows in GET /v2/pods only lag_s after its create
    runpod = provider_for(runpod_emu, clock)
    runpod_emu.faults.add(op="create", kind="timeout_after_commit")
    started = clock.now()
    pod = runpod.create(spec("runpod"))
    assert [p.id for p in runpod_emu.alive()] == [pod.id]
    assert len(runpod_emu.ops("create")) == 1  # never a second create: two pods would bill
    assert clock.now() - started <= lag_s + 3.0 + 0.01  # found on the first read after the lag
    assert LOOKUP_WINDOW_S >= 30.0


def test_a_lookup_window_shorter_than_the_lag_creates_twice(runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    """Why the window is not 4 s: with the old patience, a 30 s listing lag costs a second pod."""
    runpod_emu.list_lag_s = 30.0
    runpod = provider_for(runpod_emu, clock, lookup_attempts=3, lookup_delay_s=2.0)
    runpod_emu.faults.add(op="create", kind="timeout_after_commit")
    runpod.create(spec("runpod"))
    assert len(runpod_emu.alive()) == 2


def test_a_create_refused_for_capacity_balance_or_contract_is_sent_once(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod_emu.set_stock("NVIDIA GeForce RTX 4090", 0)
    with pytest.raises(ProviderError, match="no RTX 4090 to give") as caught:
        runpod.create(spec("runpod"))
    assert caught.value.status == 400 and "gpuc offers" in (caught.value.hint or "")
    runpod_emu.set_stock("NVIDIA GeForce RTX 4090", 5)
    runpod_emu.balance = 0.1
    with pytest.raises(ProviderError, match="insufficient balance") as caught:
        runpod.create(spec("runpod"))
    assert caught.value.status == 402
    runpod_emu.balance = 25.0
    runpod_emu.faults.add(op="create", kind="422")
    with pytest.raises(ProviderSchemaError, match="malformed"):
        runpod.create(spec("runpod"))
    assert len(runpod_emu.ops("create")) == 3 and runpod_emu.alive() == []


# -- "not found" is read twice before "gone"; a DELETE's 404 is gone ------------------------------------


def test_one_not_found_is_not_gone(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="get", kind="404")  # one 404 problem, then the pod again
    found = runpod.get(pod.id)
    assert found is not None and found.id == pod.id
    assert len(runpod_emu.ops("get")) == 2


def test_two_not_founds_are_gone(runpod: RunPodProvider, runpod_emu: RunPodEmulator, clock: FakeClock) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.vanish(pod.id)
    started = clock.now()
    assert runpod.get(pod.id) is None
    assert len(runpod_emu.ops("get")) == 2 and clock.now() - started >= 1.0  # read again, a moment later


def test_a_delete_of_a_gone_pod_is_success_and_never_reaches_graphql(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.vanish(pod.id)
    assert runpod.destroy(pod.id) == "already_gone"
    assert [r.method for r in runpod_emu.ops("destroy")] == ["DELETE"]
    assert not any(r.path == "/graphql" for r in runpod_emu.requests)


def test_a_stop_or_start_resent_after_a_lost_answer_is_success(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    runpod_emu.faults.add(op="stop", kind="timeout_after_commit")
    runpod.stop(pod.id)  # the resend hears 409 (EXITED cannot stop): read back, it is stopped
    assert runpod_emu.pods[pod.id].state == "exited"
    runpod.start(pod.id)
    runpod_emu.set_status(pod.id, "running")
    runpod.start(pod.id)  # 409: RUNNING cannot start; it is running: done
    assert [r.op for r in runpod_emu.requests if r.path.endswith("/action")] == ["stop", "stop", "resume", "resume"]


def test_a_start_of_a_gone_pod_says_it_is_gone(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    from gpuc.core.errors import NotFound

    pod = runpod.create(spec("runpod"))
    runpod_emu.vanish(pod.id)
    with pytest.raises(NotFound, match="no longer exists"):
        runpod.start(pod.id)


# -- GraphQL: one function, and a plain message when it is retired ----------------------------------------


def test_a_retired_graphql_says_so_and_leaves_everything_else_working(clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock, graphql_retired=True)
    runpod = provider_for(emu, clock)
    pod = runpod.create(spec("runpod"))
    with pytest.raises(GraphQLRetired) as caught:
        runpod.balance()
    assert GRAPHQL_RETIRED in caught.value.message and caught.value.status == 410
    assert "pip install -U gpuc" in (caught.value.hint or "")
    assert len(emu.ops("graphql")) == 1  # no retry of a retired API
    assert [p.id for p in runpod.list_pods()] == [pod.id] and runpod.destroy(pod.id) == "destroyed"


def test_the_pod_side_self_destroy_says_graphql_is_retired(clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)
    pod = provider_for(emu, clock).create(spec("runpod"))
    emu.graphql_retired = True
    destroyer = RunPodSelfDestroyer.from_environ(emu.pod_environ(pod.id), send=emu.pod_send(), clock=FakeClock())
    with pytest.raises(GraphQLRetired):
        destroyer.graphql("query { myself { id } }", {})


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (404, b"404 page not found"),
        (404, b"{}"),
        (410, b'{"errors": [{"message": "gone"}]}'),
        (200, b'{"errors": [{"message": "The GraphQL API is deprecated and has been retired"}]}'),
    ],
    ids=["404-text", "404-json", "410", "200-retired-words"],
)
def test_every_way_graphql_may_say_it_is_gone_reads_as_retired(status: int, body: bytes) -> None:
    from gpuc.core.providers.http import HttpClient

    transport = httpx.MockTransport(lambda request: httpx.Response(status, content=body))
    http = HttpClient(provider="runpod", api_key=RUNPOD_KEY, key_env="RUNPOD_API_KEY", transport=transport)
    with pytest.raises(GraphQLRetired, match="retired: upgrade gpuc"):
        legacy_graphql(http, "https://api.runpod.test/graphql", "query { myself { id } }")


def test_a_graphql_refusal_is_not_read_as_retired(runpod_emu: RunPodEmulator, runpod: RunPodProvider) -> None:
    with pytest.raises(ProviderError) as caught:
        runpod.legacy_graphql("mutation T($podId: String!) { podTerminate(input: {podId: $podId}) }", {"podId": "nope"})
    assert not isinstance(caught.value, GraphQLRetired) and "not found" in caught.value.message


# -- the emulator is as strict as v2 ------------------------------------------------------------------------


def test_the_emulator_accepts_a_good_create_request(runpod_emu: RunPodEmulator) -> None:
    answer = raw(runpod_emu, "POST", "/v2/pods", GOOD)
    assert answer.status_code == 201, answer.text
    assert answer.json()["status"] == "PROVISIONING" and answer.json()["env"] == {"A": "1"}


@pytest.mark.parametrize(
    "change",
    [
        {"supportPublicIp": True},  # GraphQL's, not v2's
        {"terminateAfter": "2027-01-01T00:00:00Z"},
        {"minVcpuCount": 4},
        {"imageName": "x"},
        {"gpu": {"id": "NVIDIA GeForce RTX 4090", "count": "1"}},
        {"gpu": {"id": "NVIDIA GeForce RTX 4090", "gpuCount": 1}},
        {"cloud": "ALL"},
        {"ports": "22/tcp"},
        {"env": [{"key": "A", "value": "1"}]},
        {"disk": 0},
        {"mounts": {"persistent": {"size": 30, "mountPath": "/w"}}},
        {"mounts": {"persistent": {"size": 3, "path": "/workspace"}}},  # "Upstream enforces a 10 GB floor"
        {"mounts": {"persistent": {"size": 30}}},  # `path` is required
        {"mounts": {"network": [{"volumeId": "v1", "path": "/a"}, {"volumeId": "v2", "path": "/b"}]}},
        {"registry": {"id": "r"}},
        {"gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1, "minCudaVersion": "12"}},
        {"startSsh": "yes"},
        {"name": None},
    ],
    ids=lambda change: next(iter(change)) + ("-" + "-".join(change["gpu"]) if "gpu" in change else ""),
)
def test_the_emulator_refuses_a_create_request_v2_would_refuse(
    runpod_emu: RunPodEmulator, change: dict[str, object]
) -> None:
    answer = raw(runpod_emu, "POST", "/v2/pods", {**GOOD, **change})
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert (problem["title"], problem["status"], problem["detail"]) == (
        "Unprocessable Entity",
        422,
        "Request validation failed.",
    )
    assert problem["errors"] and runpod_emu.alive() == []


@pytest.mark.parametrize("missing", ["name", "image"])
def test_the_emulator_refuses_a_create_request_without_a_required_field(
    runpod_emu: RunPodEmulator, missing: str
) -> None:
    answer = raw(runpod_emu, "POST", "/v2/pods", {k: v for k, v in GOOD.items() if k != missing})
    assert answer.status_code == 422 and answer.json()["errors"], answer.text


@pytest.mark.parametrize(
    "change",
    [
        {"gpu": None},  # neither gpu nor cpu
        {"cpu": {"id": "cpu3c", "vcpuCount": 2}},  # both
        {"mounts": {"persistent": {"size": 30, "path": "/w"}, "network": [{"volumeId": "v", "path": "/n"}]}},
    ],
    ids=["no-compute", "gpu-and-cpu", "two-mount-kinds"],
)
def test_a_create_that_keeps_the_contract_but_breaks_a_handler_rule_is_a_400(
    runpod_emu: RunPodEmulator, change: dict[str, object]
) -> None:
    """The spec's table: 400 is a body that "breaks a cross-field rule" (exactly one of gpu/cpu is "enforced at
    the handler layer"); 422 is a broken contract."""
    body = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    answer = raw(runpod_emu, "POST", "/v2/pods", body)
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json" and runpod_emu.alive() == []


def test_the_emulator_answers_problems_for_auth_and_a_scoped_key(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    pod = runpod.create(spec("runpod"))
    pod_key = runpod_emu.pod_environ(pod.id)["RUNPOD_API_KEY"]
    for key, status, detail in [(None, 401, "missing bearer token"), (pod_key, 403, "access denied")]:
        for method, path in [("GET", "/v2/pods"), ("GET", f"/v2/pods/{pod.id}"), ("DELETE", f"/v2/pods/{pod.id}")]:
            answer = raw(runpod_emu, method, path, key=key)
            assert (answer.status_code, answer.json()["detail"]) == (status, detail), (method, path)
            assert answer.headers["content-type"] == "application/problem+json"
    missing = raw(runpod_emu, "GET", "/v2/pods/nosuchpod0")
    assert (missing.status_code, missing.json()) == (
        404,
        {"title": "Not Found", "status": 404, "detail": "resource not found"},
    )
    assert len(runpod_emu.alive()) == 1


def test_every_v2_answer_carries_the_rate_limit_and_429_says_when_to_retry(clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock, rate_per_minute=3)
    answers = [raw(emu, "GET", "/v2/pods") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert all("RateLimit" in a.headers and "q=3;w=60" in a.headers["RateLimit-Policy"] for a in answers)
    assert answers[0].headers["RateLimit"].startswith('"minute";r=2;')
    assert answers[3].json()["detail"] == "rate limit exceeded for the minute window"
    assert int(answers[3].headers["Retry-After"]) > 0
    runpod = provider_for(emu, clock)
    with pytest.raises(ProviderUnavailable, match="rate limited"):
        runpod.list_pods()  # a Retry-After past the call's overall deadline is not waited out: said at once
    clock.advance(61)  # the minute window over
    assert runpod.list_pods() == []


def test_v2_costs_zero_when_exited_and_reports_gpu_use(runpod: RunPodProvider, runpod_emu: RunPodEmulator) -> None:
    pod = runpod.create(spec("runpod", gpu_count=2))
    runpod_emu.set_status(pod.id, "running")
    runpod_emu.set_gpu_util(pod.id, 64)
    body = raw(runpod_emu, "GET", f"/v2/pods/{pod.id}").json()
    assert [g["util"] for g in body["runtime"]["gpus"]] == [64, 64] and body["cost"] == 1.48
    assert runpod.get(pod.id).gpu_util_pct == 64  # type: ignore[union-attr]
    runpod.stop(pod.id)
    assert raw(runpod_emu, "GET", f"/v2/pods/{pod.id}").json()["cost"] == 0.0


def test_the_catalog_refuses_what_v2_refuses_and_ignores_what_it_does_not_know(runpod_emu: RunPodEmulator) -> None:
    def status(query: str) -> int:
        return raw(runpod_emu, "GET", f"/v2/catalog/gpus?{query}").status_code

    assert status("product=POD&include=AVAILABILITY&count=4&cloud=COMMUNITY") == 200
    assert status("gpuTypeId=x") == 200  # unknown: ignored
    assert status("cloud=ALL") == 422  # a known one with a value its schema refuses
    assert status("include=AVAILABILITY&product=POD&count=0") == 422
    assert status("include=AVAILABILITY") == 400  # product is required with include ("stock differs by product")
    assert status("product=POD") == 400  # and valid only with it
    plain = raw(runpod_emu, "GET", "/v2/catalog/gpus").json()["gpus"][0]
    assert "availability" not in plain and "dataCenters" not in plain  # present only when asked for


def test_the_catalog_stock_is_for_the_count_asked(runpod_emu: RunPodEmulator) -> None:
    runpod_emu.set_stock("NVIDIA GeForce RTX 4090", 5)

    def stock(count: int, cloud: str = "SECURE") -> str:
        query = f"include=AVAILABILITY&product=POD&count={count}&cloud={cloud}"
        rows = raw(runpod_emu, "GET", f"/v2/catalog/gpus?{query}").json()["gpus"]
        return str(next(g for g in rows if g["id"] == "NVIDIA GeForce RTX 4090")["availability"])

    assert (stock(1), stock(2), stock(4), stock(8)) == ("MEDIUM", "LOW", "LOW", "NONE")
    assert stock(6, "COMMUNITY") == "NONE"  # past maxCount.community (4): no such pod at all
