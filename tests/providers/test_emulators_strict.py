"""The emulators are as strict as the real APIs: a request gpuc would get wrong in production is refused
here too, with the provider's own kind of answer."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest
from fakes.providers import RUNPOD_KEY, VAST_KEY, spec

from gpuc.core.providers.answers import SELF_READ_QUERY, STOP_MUTATION, TERMINATE_MUTATION
from gpuc.core.providers.runpod_graphql import BALANCE_QUERY
from gpuc.testkit.emulators import serve
from gpuc.testkit.emulators.common import REDACTED, EmuRequest, EmuResponse
from gpuc.testkit.emulators.runpod import RunPodEmulator
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator

# GraphQL as the official clients send it (gpuc itself now creates, lists and reads pods on REST v2): the
# emulator's GraphQL stays as strict as RunPod's for them and for what gpuc still sends (balance, pod side).
LIST_QUERY = "query Pods { myself { pods { id name desiredStatus costPerHr env runtime { uptimeInSeconds } } } }"
GET_QUERY = SELF_READ_QUERY
CREATE_ON_DEMAND = (
    "mutation Deploy($input: PodFindAndDeployOnDemandInput!) "
    "{ podFindAndDeployOnDemand(input: $input) { id name desiredStatus costPerHr env } }"
)

GOOD_INPUT = {
    "name": "gpuc-run0001",
    "imageName": "runpod/pytorch",
    "gpuTypeId": "NVIDIA GeForce RTX 4090",
    "gpuCount": 1,
    "cloudType": "SECURE",
    "startSsh": True,
    "env": [{"key": "GPUC_MANAGED", "value": "1"}],
}


def graphql(
    emu: RunPodEmulator, query: str, variables: dict[str, Any] | None = None, key: str | None = RUNPOD_KEY
) -> EmuResponse:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    return emu.handle(EmuRequest("POST", "/graphql", {}, headers, body))


def messages(answer: EmuResponse) -> list[str]:
    return [e["message"] for e in answer.decoded()["errors"]]


def test_the_graphql_gpuc_still_sends_is_valid(runpod_emu: RunPodEmulator) -> None:
    assert graphql(runpod_emu, BALANCE_QUERY).decoded()["data"]["myself"]["clientBalance"] == 25.0
    pod_id = runpod_emu.add_foreign_pod("gpuc-run0009")
    stopped = graphql(runpod_emu, STOP_MUTATION, {"podId": pod_id}).decoded()["data"]["podStop"]
    assert stopped["desiredStatus"] == "EXITED"
    assert graphql(runpod_emu, TERMINATE_MUTATION, {"podId": pod_id}).decoded() == {"data": {"podTerminate": None}}


def test_the_queries_the_official_clients_send_are_valid(runpod_emu: RunPodEmulator) -> None:
    assert graphql(runpod_emu, LIST_QUERY).status == 200
    assert graphql(runpod_emu, GET_QUERY, {"podId": "x"}).decoded() == {"data": {"pod": None}}
    created = graphql(runpod_emu, CREATE_ON_DEMAND, {"input": GOOD_INPUT}).decoded()
    assert created["data"]["podFindAndDeployOnDemand"]["name"] == "gpuc-run0001"


def test_a_misspelled_field_is_refused(runpod_emu: RunPodEmulator) -> None:
    answer = graphql(runpod_emu, "query { myself { pods { id desiredStatu } } }")
    assert answer.status == 400
    assert messages(answer) == ['Cannot query field "desiredStatu" on type "Pod".']


def test_a_misspelled_input_field_is_refused_and_nothing_is_created(runpod_emu: RunPodEmulator) -> None:
    answer = graphql(runpod_emu, CREATE_ON_DEMAND, {"input": {**GOOD_INPUT, "volumInGb": 30}})
    assert answer.status == 400
    assert 'Field "volumInGb" is not defined by type "PodFindAndDeployOnDemandInput".' in messages(answer)[0]
    assert runpod_emu.alive() == []


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("gpuCount", "1", "Int cannot represent non-integer value"),
        ("startSsh", "yes", "Boolean cannot represent a non boolean value"),
        ("cloudType", "SECURED", 'does not exist in "CloudTypeEnum" enum'),
        ("env", [{"key": "A"}], 'Field "value" of required type "String!" was not provided'),
        (
            "env",
            {"A": "1"},
            'Field "A" is not defined by type "EnvironmentVariableInput"',
        ),  # REST's object form
        ("ports", ["22/tcp"], "String cannot represent a non string value"),  # REST's list form
    ],
)
def test_a_wrong_type_is_refused(runpod_emu: RunPodEmulator, field: str, value: Any, why: str) -> None:
    answer = graphql(runpod_emu, CREATE_ON_DEMAND, {"input": {**GOOD_INPUT, field: value}})
    assert answer.status == 400 and why in messages(answer)[0]


def test_a_scalar_field_takes_no_selection_and_an_object_needs_one(runpod_emu: RunPodEmulator) -> None:
    terminate = graphql(runpod_emu, 'mutation { podTerminate(input: {podId: "x"}) { id } }')
    assert "must not have a selection" in messages(terminate)[0]
    myself = graphql(runpod_emu, "query { myself }")
    assert "must have a selection of subfields" in messages(myself)[0]


def test_literals_and_variables_are_checked_the_same_way(runpod_emu: RunPodEmulator) -> None:
    assert (
        "Enum"
        in messages(graphql(runpod_emu, 'mutation { podFindAndDeployOnDemand(input: {cloudType: "SECURE"}) { id } }'))[
            0
        ]
    )
    wrong_var = graphql(
        runpod_emu, "mutation T($podId: String) { podTerminate(input: {podId: $podId}) }", {"podId": "x"}
    )
    assert 'used in position expecting type "String!"' in messages(wrong_var)[0]
    undefined = graphql(runpod_emu, "mutation { podTerminate(input: {podId: $podId}) }")
    assert messages(undefined) == ['Variable "$podId" is not defined.']
    missing = graphql(runpod_emu, TERMINATE_MUTATION, {})
    assert messages(missing) == ['Variable "$podId" of required type "String!" was not provided.']


def test_unknown_arguments_and_syntax_errors_are_refused(runpod_emu: RunPodEmulator) -> None:
    assert "Unknown argument" in messages(graphql(runpod_emu, 'query { pod(podId: "x") { id } }'))[0]
    assert messages(graphql(runpod_emu, "query { myself { pods { id }"))[0].startswith("Syntax Error")


def test_terminate_of_a_missing_pod_answers_the_observed_body(runpod_emu: RunPodEmulator) -> None:
    answer = graphql(runpod_emu, TERMINATE_MUTATION, {"podId": "nosuchpod"})
    assert (answer.status, answer.decoded()) == (200, {"errors": [{"message": "pod not found to terminate"}]})


def test_runpod_refuses_a_missing_or_wrong_key(runpod_emu: RunPodEmulator) -> None:
    assert graphql(runpod_emu, LIST_QUERY, key=None).status == 401
    assert graphql(runpod_emu, LIST_QUERY, key="rpa_wrong").status == 401
    v2 = runpod_emu.handle(EmuRequest("GET", "/v2/pods", {}, {}, b""))
    assert (v2.status, v2.decoded()["detail"]) == (401, "missing bearer token")
    assert v2.headers["content-type"] == "application/problem+json"


def test_runpod_v2_ignores_unknown_query_parameters_and_refuses_a_bad_known_one(runpod_emu: RunPodEmulator) -> None:
    """RunPod's migration guide: unknown query parameters are "IGNORED, not rejected"; a known one with a value
    its schema refuses is a 422."""
    auth = {"authorization": f"Bearer {RUNPOD_KEY}"}
    for query in ({"nmae": ["x"]}, {"limit": ["0"]}, {"cursor": ["nope"]}, {"includeMachine": ["true"]}):
        answer = runpod_emu.handle(EmuRequest("GET", "/v2/pods", query, auth, b""))
        assert (answer.status, answer.decoded()) == (200, {"pods": []}), query
    bad = runpod_emu.handle(EmuRequest("GET", "/v2/pods", {"includeClusterPods": ["maybe"]}, auth, b""))
    assert (bad.status, bad.decoded()["detail"]) == (422, "Request validation failed.")


def vast_call(emu: VastEmulator, method: str, path: str, body: Any = None, **query: str) -> EmuResponse:
    payload = json.dumps(body).encode() if body is not None else b""
    headers = {"authorization": f"Bearer {VAST_KEY}"}
    return emu.handle(EmuRequest(method, path, {k: [v] for k, v in query.items()}, headers, payload))


GOOD_ASK = {"image": "pytorch/pytorch", "disk": 30.0, "label": "gpuc-run0001", "runtype": "ssh_direct"}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"lable": "x"}, "unexpected field 'lable'"),
        ({"disk": "30"}, "disk has the wrong type"),
        ({"disk": True}, "disk has the wrong type"),
        ({"env": {"A": 1}}, "env must be an object of strings"),
        ({"env": "-x A=1"}, "env must be an object of strings"),  # the string form takes -e / -p / -h only
        ({"image": "i" * 1025}, "image is at most 1024"),
        ({"image": None}, "image is required"),
        ({"volume_info": {"size": "15"}}, "volume_info.size"),
        ({"env": [["A", "1"]]}, "env has the wrong type"),  # the list form the listing echoes back
        ({"runtype": "ssh jupyter_lab"}, "unknown runtype"),
        ({"price": 500}, "price must be between"),
        ({"disk": 4}, "at least 8"),
        ({"label": "x" * 300}, "at most 256"),
    ],
)
def test_vast_refuses_a_create_body_it_does_not_document(
    vast_emu: VastEmulator, change: dict[str, Any], why: str
) -> None:
    answer = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", {**GOOD_ASK, **change})
    body = answer.decoded()
    assert (answer.status, body["success"], body["error"]) == (400, False, "invalid_args")
    assert why in body["msg"]
    assert vast_emu.alive() == []


def test_vast_answers_unknown_and_taken_offers_as_documented(vast_emu: VastEmulator) -> None:
    unknown = vast_call(vast_emu, "PUT", "/api/v0/asks/1234567/", GOOD_ASK)
    assert unknown.status == 404 and "no_such_ask" in unknown.decoded()["msg"]
    assert vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", GOOD_ASK).decoded()["success"] is True
    taken = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", GOOD_ASK)
    assert (taken.status, taken.decoded()["error"]) == (410, "no_such_ask")


def test_vast_refuses_filters_on_computed_columns(vast_emu: VastEmulator) -> None:
    answer = vast_call(vast_emu, "GET", "/api/v1/instances/", select_filters=json.dumps({"dph_total": {"lt": 1}}))
    assert answer.status == 400 and "dph_total" in answer.decoded()["msg"]
    ok = vast_call(vast_emu, "GET", "/api/v1/instances/", select_filters=json.dumps({"label": {"eq": "x"}}))
    assert ok.status == 200 and ok.decoded()["instances"] == []


def test_vast_refuses_an_unknown_search_field(vast_emu: VastEmulator) -> None:
    answer = vast_call(vast_emu, "POST", "/api/v0/bundles/", {"reliabilty": {"gt": 0.9}})
    assert answer.status == 400 and "reliabilty" in answer.decoded()["msg"]


def test_vast_accepts_the_clis_string_numbers(vast_emu: VastEmulator) -> None:
    answer = vast_call(vast_emu, "POST", "/api/v0/bundles/", {"reliability": {"gt": "0.98"}, "gpu_name": {"eq": "L4"}})
    assert [o["id"] for o in answer.decoded()["offers"]] == [11684747]


def test_vast_get_of_a_missing_instance_is_instances_null_and_delete_is_404(vast_emu: VastEmulator) -> None:
    assert vast_call(vast_emu, "GET", "/api/v0/instances/42/").decoded() == {"instances": None}
    gone = vast_call(vast_emu, "DELETE", "/api/v0/instances/42/", {})
    assert (gone.status, gone.decoded()) == (
        404,
        {"success": False, "error": "not_found", "msg": "Instance not found"},
    )
    assert vast_call(vast_emu, "DELETE", "/api/v0/instances/abc/", {}).decoded()["msg"] == "invalid instance_id"


def test_vast_refuses_a_missing_key_and_its_429_has_no_retry_after(vast_emu: VastEmulator) -> None:
    bare = vast_emu.handle(EmuRequest("GET", "/api/v1/instances/", {}, {}, b""))
    assert (bare.status, bare.decoded()["error"]) == (401, "auth_error")
    vast_emu.faults.add(op="list", kind="429")
    storm = vast_call(vast_emu, "GET", "/api/v1/instances/")
    assert storm.status == 429 and storm.body.startswith(b"API requests too frequent")
    assert "retry-after" not in {k.lower() for k in storm.headers}


def test_users_current_carries_the_key_like_the_real_one(vast_emu: VastEmulator) -> None:
    assert vast_call(vast_emu, "GET", "/api/v0/users/current").decoded()["api_key"] == VAST_KEY


def test_request_records_never_hold_a_key(runpod_emu: RunPodEmulator, vast_emu: VastEmulator) -> None:
    graphql(runpod_emu, LIST_QUERY)
    runpod_emu.handle(EmuRequest("POST", "/graphql", {"api_key": [RUNPOD_KEY]}, {}, b'{"query": "{ myself { id } }"}'))
    vast_call(vast_emu, "GET", "/api/v0/users/current")
    records = repr(runpod_emu.requests) + repr(vast_emu.requests)
    assert RUNPOD_KEY not in records and VAST_KEY not in records
    assert runpod_emu.requests[0].headers["authorization"] == REDACTED
    assert runpod_emu.requests[1].query["api_key"] == [REDACTED]


def test_a_fault_hits_only_its_op_and_only_as_often_as_asked(vast_emu: VastEmulator) -> None:
    vast_emu.faults.add(op="balance", kind="503", times=2)
    assert vast_call(vast_emu, "GET", "/api/v1/instances/").status == 200
    assert [vast_call(vast_emu, "GET", "/api/v0/users/current").status for _ in range(3)] == [503, 503, 200]
    with pytest.raises(ValueError, match="unknown fault kind"):
        vast_emu.faults.add(op="list", kind="teapot")


def test_served_over_http_a_timeout_hangs_and_a_drop_disconnects(runpod_server: EmulatorServer) -> None:
    emu = runpod_server.emulator
    emu.faults.add(op="list", kind="timeout")
    emu.faults.add(op="list", kind="drop")
    headers = {"Authorization": f"Bearer {RUNPOD_KEY}"}
    # The hang is told by the read's timeout (the server hangs 5 s); 2 s, so that a loaded machine neither
    # times the connect out nor the answers that follow.
    with httpx.Client(timeout=httpx.Timeout(2.0, connect=10.0)) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.get(f"{runpod_server.url}/v2/pods", headers=headers)
        with pytest.raises(httpx.RemoteProtocolError):
            client.get(f"{runpod_server.url}/v2/pods", headers=headers)
        assert client.get(f"{runpod_server.url}/v2/pods", headers=headers).json()["pods"] == []


def test_serve_starts_either_emulator_with_the_env_a_client_needs() -> None:
    for provider, key_env in (("runpod", "RUNPOD_API_KEY"), ("vast", "VAST_API_KEY")):
        server = serve(provider)
        try:
            env = server.client_env()
            assert env[key_env] and server.url.startswith("http://127.0.0.1:")
            url = env.get("GPUC_RUNPOD_REST_URL", env.get("GPUC_VAST_URL", ""))
            path = "/pods" if provider == "runpod" else "/instances/1/"
            status = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {env[key_env]}"}).status_code
            assert status == 200
        finally:
            server.stop()
    with pytest.raises(ValueError, match="no emulator"):
        serve("aws")


@pytest.mark.parametrize("provider", ["runpod", "vast"])
def test_the_emulators_env_wires_a_client_through_settings_and_the_registry(provider: str) -> None:
    from gpuc.core.providers.registry import get_provider
    from gpuc.core.settingsload import load_settings

    server = serve(provider)
    try:
        client = get_provider(provider, load_settings(environ={**os.environ, **server.client_env()}))
        try:
            pod = client.create(spec(provider))
            assert [p.id for p in client.list_pods()] == [pod.id]
            assert client.destroy(pod.id) == "destroyed"
        finally:
            client.close()
    finally:
        server.stop()


def test_runpod_answers_the_user_fields_the_official_clients_ask_for(runpod_emu: RunPodEmulator) -> None:
    answer = graphql(runpod_emu, "query { myself { id authId email pubKey networkVolumes { id dataCenterId } } }")
    assert answer.status == 200 and answer.decoded()["data"]["myself"]["networkVolumes"] == []
    assert answer.decoded()["data"]["myself"]["authId"]


def test_runpod_pod_key_not_found_mode_lies_about_its_own_pod_only(runpod_emu: RunPodEmulator) -> None:
    runpod_emu.pod_key_not_found = True
    pod_id = runpod_emu.add_foreign_pod("gpuc-run0003")
    key = runpod_emu.pod_environ(pod_id)["RUNPOD_API_KEY"]
    answer = graphql(runpod_emu, TERMINATE_MUTATION, {"podId": pod_id}, key=key)
    assert answer.decoded() == {"errors": [{"message": "pod not found to terminate"}]}
    assert [p.id for p in runpod_emu.alive()] == [pod_id]  # refused, not gone
    own = graphql(runpod_emu, GET_QUERY, {"podId": pod_id}, key=key).decoded()["data"]["pod"]
    assert own["id"] == pod_id  # the pod key may read its own pod
    assert graphql(runpod_emu, TERMINATE_MUTATION, {"podId": pod_id}).decoded() == {"data": {"podTerminate": None}}


def test_runpod_community_without_public_ip_has_no_public_ssh(runpod_emu: RunPodEmulator) -> None:
    inputs = {**GOOD_INPUT, "cloudType": "COMMUNITY"}
    bare = graphql(runpod_emu, CREATE_ON_DEMAND, {"input": inputs}).decoded()["data"]["podFindAndDeployOnDemand"]
    asked = {**inputs, "name": "gpuc-run0002", "supportPublicIp": True, "minVcpuCount": 4, "minMemoryInGb": 16}
    good = graphql(runpod_emu, CREATE_ON_DEMAND, {"input": asked}).decoded()["data"]["podFindAndDeployOnDemand"]
    assert (runpod_emu.pods[bare["id"]].public, runpod_emu.pods[good["id"]].public) == (False, True)
    assert runpod_emu.pods[bare["id"]].vcpu < 4 <= runpod_emu.pods[good["id"]].vcpu


def test_vast_creates_a_stopped_instance_for_an_unschedulable_bid_unless_cancel_unavail(
    vast_emu: VastEmulator,
) -> None:
    vast_emu.offers[11684738].winning_bid = 0.30
    bid = {**GOOD_ASK, "price": 0.22}
    refused = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", {**bid, "cancel_unavail": True})
    assert (refused.status, refused.decoded()["error"]) == (410, "no_such_ask") and vast_emu.alive() == []
    made = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", bid)  # no cancel_unavail: the hazard
    assert made.status == 400 and made.decoded()["success"] is False  # an error, yet an instance exists
    inst = vast_emu.instances[made.decoded()["new_contract"]]
    assert (inst.actual, inst.intended) == ("stopped", "running")  # waiting, billing its disk


def test_vast_accepts_the_sdks_nulls_and_refuses_a_malformed_call(vast_emu: VastEmulator) -> None:
    nulls = {k: None for k in ("price", "label", "extra", "onstart", "image_login", "jupyter_dir", "user")}
    made = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", {**GOOD_ASK, **nulls, "template_hash_id": None})
    assert made.status == 200 and made.decoded()["success"] is True
    assert vast_call(vast_emu, "PUT", "/api/v0/asks/11684739/", {**GOOD_ASK, "client_id": None}).status == 400
    assert vast_call(vast_emu, "DELETE", "/api/v0/instances/", {"ids": [1]}).status == 400
    assert vast_call(vast_emu, "PUT", "/api/v0/search/asks/", {"select_cols": ["*"]}).status == 400
    bad_bid = vast_call(vast_emu, "PUT", f"/api/v0/instances/bid_price/{made.decoded()['new_contract']}/", {"p": 1})
    assert bad_bid.status == 400


def test_vast_v1_list_answers_every_column_by_default_and_null_for_unknown_ones(vast_emu: VastEmulator) -> None:
    vast_emu.add_foreign_pod("x", env={"A": "1"})
    full = vast_call(vast_emu, "GET", "/api/v1/instances/").decoded()["instances"][0]
    star = vast_call(vast_emu, "GET", "/api/v1/instances/", select_cols='["*"]').decoded()["instances"][0]
    assert full == star and full["extra_env"] == [["A", "1"]] and "ports" in full  # "["*"] ... (default)"
    some = vast_call(vast_emu, "GET", "/api/v1/instances/", select_cols='["label", "nope"]').decoded()
    assert some["instances"] == [{"label": "x", "nope": None}]  # "Unknown column names are returned as null"


def test_vast_v1_list_takes_its_limit_order_and_token_as_documented(vast_emu: VastEmulator) -> None:
    ids = [int(vast_emu.add_foreign_pod(f"pod-{n}")) for n in range(30)]
    assert len(vast_call(vast_emu, "GET", "/api/v1/instances/", limit="0").decoded()["instances"]) == 5
    assert len(vast_call(vast_emu, "GET", "/api/v1/instances/", limit="99").decoded()["instances"]) == 25
    newest = vast_call(vast_emu, "GET", "/api/v1/instances/", order_by='[{"col": "id", "dir": "desc"}]')
    assert [r["id"] for r in newest.decoded()["instances"]][:2] == ids[::-1][:2]
    odd = vast_call(vast_emu, "GET", "/api/v1/instances/", order_by='[{"col": "label", "dir": "sideways"}]')
    assert odd.status == 200  # "anything else treated as asc"
    bad = vast_call(vast_emu, "GET", "/api/v1/instances/", order_by='[{"col": "nope"}]')
    assert (bad.status, bad.decoded()["error"]) == (400, "invalid_request")
    token = vast_call(vast_emu, "GET", "/api/v1/instances/", after_token="bm9wZQ==")
    assert (token.status, token.decoded()["error"]) == (400, "invalid_token")
    ignored = vast_call(vast_emu, "GET", "/api/v1/instances/", cursor="x")  # not a documented parameter
    assert ignored.status == 200


def test_vast_create_takes_the_specs_env_string_and_defaults(vast_emu: VastEmulator) -> None:
    ask = {**GOOD_ASK, "env": "-e HF_HOME=/workspace/hf -p 8000:8000"}
    made = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", ask).decoded()
    inst = vast_emu.instances[made["new_contract"]]
    assert inst.env == {"HF_HOME": "/workspace/hf", "-p 8000:8000": "1"}
    stopped = vast_call(vast_emu, "PUT", "/api/v0/asks/11684741/", {**GOOD_ASK, "target_state": "stopped"})
    assert vast_emu.instances[stopped.decoded()["new_contract"]].actual == "stopped"
    args = vast_call(vast_emu, "PUT", "/api/v0/asks/11684743/", {"image": "img", "args_str": "serve"})
    assert vast_emu.instances[args.decoded()["new_contract"]].runtype == "args"  # "unless args/args_str"


def test_vast_show_refuses_an_id_that_is_not_one(vast_emu: VastEmulator) -> None:
    answer = vast_call(vast_emu, "GET", "/api/v0/instances/abc/")
    assert answer.status == 400 and answer.decoded()["success"] is False


def test_vast_manage_answers_its_own_documented_errors(vast_emu: VastEmulator) -> None:
    missing = vast_call(vast_emu, "PUT", "/api/v0/instances/42/", {"state": "stopped"})
    assert (missing.status, missing.decoded()["error"]) == (404, "no_such_instance")
    made = vast_call(vast_emu, "PUT", "/api/v0/asks/11684738/", GOOD_ASK).decoded()["new_contract"]
    bad = vast_call(vast_emu, "PUT", f"/api/v0/instances/{made}/", {"state": "paused"})
    assert bad.status == 400 and "error" not in bad.decoded()  # not one of manage_instance.yaml's codes
    long = vast_call(vast_emu, "PUT", f"/api/v0/instances/{made}/", {"label": "x" * 1025})
    assert long.decoded()["error"] == "label_too_long"
