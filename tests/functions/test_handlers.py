"""The handlers as plain functions: bad input is a 4xx with a stable message and stores nothing."""

from __future__ import annotations

import json

import pytest
from fakes.watchdog import ADMIN, World

from gpuc.core import api
from gpuc.core.signing import derive_key, new_token, sign
from gpuc.functions.edge import Request
from gpuc.functions.handlers import dispatch


def register_body(**fields: object) -> bytes:
    body = {
        "pod_id": "p1",
        "provider": "fake",
        "name": "gpuc-p1",
        "experiment": "exp",
        "key": derive_key(new_token()),
        **fields,
    }
    return json.dumps(body).encode()


def admin_headers(token: str = ADMIN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# -- admin routes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": ADMIN},
        {"Authorization": "Basic " + ADMIN},
        {"Authorization": "Bearer \x85" + ADMIN},
        {"Authorization": "Bearer " + ADMIN + "\u3000"},
    ],
    ids=["missing", "wrong", "no-scheme", "basic", "nel-before", "unicode-space-after"],
)
def test_admin_routes_refuse_a_missing_or_wrong_token(world: World, headers: dict[str, str]) -> None:
    for method, path in [
        ("POST", "/v1/pods"),
        ("GET", "/v1/status"),
        ("POST", "/v1/reap"),
        ("POST", "/v1/notify"),
    ]:
        answer = world.call(method, path, register_body(), headers)
        assert (answer.status, answer.body) == (401, {"error": "missing or wrong admin token"})
    assert world.store.list_pods() == []


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"", "body is empty: send a JSON object"),
        (b"{not json", "body is not valid JSON"),
        (b"[1, 2]", "json validation error: body must be a JSON object"),
        (register_body(extra=1), "json validation error: extra is not allowed"),
        (register_body(experiment=""), "json validation error: experiment is too short"),
        (register_body(experiment=7), "json validation error: experiment has the wrong type"),
        (register_body(key="not-hex"), "json validation error: key has the wrong format"),
        (register_body(price_per_hour=-1), "json validation error: price_per_hour is too small"),
        (
            register_body(policy={"silence_limit_s": 0}),
            "json validation error: policy.silence_limit_s is too small",
        ),
        (
            register_body(provider="aws"),
            "json validation error: provider is not one of the configured providers",
        ),
        (json.dumps({"pod_id": "p1"}).encode(), "json validation error: provider is required"),
    ],
)
def test_register_answers_bad_input_with_a_stable_400(world: World, body: bytes, error: str) -> None:
    answer = world.call("POST", "/v1/pods", body, admin_headers())
    assert (answer.status, answer.body) == (400, {"error": error})
    assert world.store.list_pods() == []


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_numbers_are_refused(world: World, constant: bytes) -> None:
    world.register("p1")
    body = b'{"end_at": ' + constant + b', "note": "NaN and Infinity are fine in text"}'
    answer = world.call("POST", "/v1/pods/p1/end", body, admin_headers())
    assert (answer.status, answer.body) == (400, {"error": "json validation error: numbers must be finite"})
    assert world.pod("p1").end_at is None
    body = b'{"end_at": ' + str(int(world.now)).encode() + b', "note": "NaN Infinity"}'
    ok = world.call("POST", "/v1/pods/p1/end", body, admin_headers())
    assert ok.status == 200


def test_a_validation_error_never_echoes_the_input(world: World) -> None:
    secret = "hf_" + "A" * 30
    answer = world.call("POST", "/v1/pods", register_body(key=secret), admin_headers())
    assert answer.status == 400
    assert secret not in json.dumps(answer.body)


def test_register_is_idempotent_and_refused_after_the_end(world: World) -> None:
    world.register("p1")
    world.ping("p1")
    # A retried `up` with the same key keeps the seq stream (a replay stays a replay)
    again = world.admin("POST", "/v1/pods", _register_request(world, "p1", world.tokens["p1"]))
    assert again.status == 200
    assert world.pod("p1").last_seq == 1
    world.admin("POST", "/v1/pods/p1/end", api.EndRequest.model_validate({"end_at": world.now}))
    answer = world.admin("POST", "/v1/pods", _register_request(world, "p1", new_token()))
    assert (answer.status, answer.body) == (409, {"error": "pod already ended: register a new pod"})


def test_keep_and_end_on_an_unknown_pod_are_404(world: World) -> None:
    for path, model in [
        ("/v1/pods/nope/keep", api.KeepRequest(until=world.now)),
        ("/v1/pods/nope/end", api.EndRequest.model_validate({"end_at": world.now})),
    ]:
        answer = world.admin("POST", path, model)
        assert (answer.status, answer.body) == (404, {"error": "unknown pod"})


def test_a_lease_is_capped_at_max_hours(world: World) -> None:
    world.register("p1")
    too_long = world.now + world.settings.max_hours * 3600 + 1
    assert world.admin("POST", "/v1/pods/p1/keep", api.KeepRequest(until=too_long)).status == 400
    assert world.pod("p1").lease_until is None
    until = world.now + 3600
    assert world.admin("POST", "/v1/pods/p1/keep", api.KeepRequest(until=until)).status == 200
    assert world.ping("p1").body["lease_until"] == until


def test_end_records_the_first_end_and_keeps_the_latest_note(world: World) -> None:
    world.register("p1")
    first = world.now
    world.admin("POST", "/v1/pods/p1/end", api.EndRequest.model_validate({"end_at": first, "by": "down"}))
    world.clock.advance(60)
    world.admin(
        "POST",
        "/v1/pods/p1/end",
        api.EndRequest.model_validate({"end_at": world.now, "by": "down", "note": "works"}),
    )
    rec = world.pod("p1")
    assert (rec.state, rec.end_at, rec.ended_by, rec.note) == ("ended", first, "down", "works")
    assert rec.destroy_at == first + world.settings.destroy_grace_s


def test_status_lists_pods_and_recent_notifications(world: World) -> None:
    world.register("p1")
    world.admin("POST", "/v1/notify", api.NotifyRequest(title="hello", message="from the laptop"))
    status = api.StatusResponse.model_validate(world.admin("GET", "/v1/status").body)
    assert [p.pod_id for p in status.pods] == ["p1"]
    assert status.reaper_period_s == world.settings.reaper_period_s
    assert [(n.title, n.kind) for n in status.notifications] == [("hello", "client")]
    assert "key" not in world.admin("GET", "/v1/status").body["pods"][0]  # the derived key stays inside


def test_reap_runs_a_pass_and_a_dry_run(world: World) -> None:
    answer = world.admin("POST", "/v1/reap", api.ReapRequest(dry_run=True))
    assert answer.status == 200
    assert api.ReapReport.model_validate(answer.body).dry_run
    assert world.admin("POST", "/v1/reap").status == 200  # no body = a real pass


def test_unknown_routes_and_methods(world: World) -> None:
    assert world.call("GET", "/v1/nope").body == {"error": "no such route"}
    assert world.call("GET", "/v1/nope").status == 404
    answer = world.call("DELETE", "/v1/status")
    assert (answer.status, answer.body) == (405, {"error": "method not allowed"})
    assert world.call("GET", "/v1/heartbeat").status == 405


def test_a_body_over_the_cap_is_413_before_anything_else(world: World) -> None:
    answer = world.call("POST", "/v1/pods", b"x" * (api.MAX_BODY_BYTES + 1))
    assert (answer.status, answer.body) == (413, {"error": f"body larger than {api.MAX_BODY_BYTES} bytes"})


# -- pod routes ---------------------------------------------------------------------------------


def test_a_good_heartbeat_moves_last_seen_on_the_server_clock(world: World) -> None:
    world.register("p1")
    world.clock.advance(10)
    answer = world.ping("p1", gpus=[{"index": 0, "utilization_pct": 42.0}])
    assert answer.status == 200
    deadline = world.now - 10 + world.settings.max_hours * 3600  # registered without one: start + max_hours
    assert answer.body == {
        "ok": True,
        "server_time": world.now,
        "lease_until": None,
        "deadline_at": deadline,
        "intent": None,
        "intent_at": None,
        "claim": None,  # this world's watchdog has no key of its own (tests/functions/test_claims.py)
    }
    rec = world.pod("p1")
    assert (rec.last_seen, rec.last_seq) == (world.now, 1)
    assert rec.last_heartbeat is not None and rec.last_heartbeat.gpus[0].utilization_pct == 42.0


def test_a_replayed_heartbeat_is_rejected_and_does_not_move_last_seen(world: World) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 5)
    headers = world.signed("p1", body, 5)
    assert world.call("POST", "/v1/heartbeat", body, headers).status == 200
    seen = world.pod("p1").last_seen
    world.clock.advance(60)
    replay = world.call("POST", "/v1/heartbeat", body, headers)
    assert replay.status == 409
    assert replay.body["error"] == "replayed or out-of-order seq: send a higher one"
    older = world.heartbeat_body("p1", 4)
    assert world.call("POST", "/v1/heartbeat", older, world.signed("p1", older, 4)).status == 409
    assert world.pod("p1").last_seen == seen


def test_a_stale_heartbeat_is_rejected_and_does_not_move_last_seen(world: World) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    stale = world.call("POST", "/v1/heartbeat", body, world.signed("p1", body, 1, timestamp=int(world.now) - 301))
    assert stale.status == 401
    assert "window" in stale.body["error"]
    future = world.call("POST", "/v1/heartbeat", body, world.signed("p1", body, 1, timestamp=int(world.now) + 301))
    assert future.status == 401
    assert world.pod("p1").last_seen is None


def test_a_forged_or_unknown_pod_gets_the_same_answer(world: World) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    forged = {
        **world.signed("p1", body, 1),
        api.H_SIGNATURE: sign(derive_key("guess"), int(world.now), 1, body),
    }
    bad = world.call("POST", "/v1/heartbeat", body, forged)
    world.tokens["ghost"] = "any"
    ghost_body = world.heartbeat_body("ghost", 1)
    unknown = world.call("POST", "/v1/heartbeat", ghost_body, world.signed("ghost", ghost_body, 1))
    assert (bad.status, bad.body) == (unknown.status, unknown.body) == (401, {"error": "unknown pod or bad signature"})
    assert world.pod("p1").last_seen is None
    assert world.store.get_pod("ghost") is None


def test_a_tampered_body_fails_the_signature(world: World) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    headers = world.signed("p1", body, 1)
    tampered = body.replace(b'"idle_minutes":0.0', b'"idle_minutes":1.0')
    assert tampered != body
    assert world.call("POST", "/v1/heartbeat", tampered, headers).status == 401


def test_an_adopted_pod_without_a_key_cannot_be_pinged(world: World) -> None:
    world.provider.add("orphan", created_at=world.now)
    world.reap()
    assert world.pod("orphan").key == ""
    body = b'{"pod_id":"orphan","seq":1,"sent_at":1}'
    headers = {
        api.H_POD: "orphan",
        api.H_TIMESTAMP: str(int(world.now)),
        api.H_SEQ: "1",
        api.H_SIGNATURE: sign("", int(world.now), 1, body),
    }
    assert world.call("POST", "/v1/heartbeat", body, headers).status == 401


@pytest.mark.parametrize("drop", [api.H_POD, api.H_TIMESTAMP, api.H_SEQ, api.H_SIGNATURE])
def test_missing_signature_headers_are_400(world: World, drop: str) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1)
    headers = {k: v for k, v in world.signed("p1", body, 1).items() if k != drop}
    answer = world.call("POST", "/v1/heartbeat", body, headers)
    assert (answer.status, answer.body) == (400, {"error": f"missing or malformed {drop} header"})


def test_the_body_must_name_the_signing_pod_and_seq(world: World) -> None:
    world.register("p1")
    world.register("p2")
    body = world.heartbeat_body("p2", 1)
    answer = world.call("POST", "/v1/heartbeat", body, world.signed("p1", body, 1))
    assert (answer.status, answer.body["error"]) == (400, "body pod_id does not match the X-Gpuc-Pod header")
    body = world.heartbeat_body("p1", 2)
    answer = world.call("POST", "/v1/heartbeat", body, world.signed("p1", body, 3))
    assert (answer.status, answer.body["error"]) == (400, "body seq does not match the X-Gpuc-Seq header")
    assert world.pod("p1").last_seen is None and world.pod("p2").last_seen is None


def test_a_signed_but_invalid_body_is_400_and_stores_nothing(world: World) -> None:
    world.register("p1")
    gpus = b"[" + b",".join([b'{"index":0}'] * 17) + b"]"
    body = b'{"pod_id":"p1","seq":1,"sent_at":1800000000,"gpus":' + gpus + b"}"
    answer = world.call("POST", "/v1/heartbeat", body, world.signed("p1", body, 1))
    assert (answer.status, answer.body) == (400, {"error": "json validation error: gpus has too many items"})
    assert world.pod("p1").last_seen is None


def test_an_event_records_the_end_before_it_notifies(world: World) -> None:
    world.register("p1")
    order: list[str] = []
    original = world.deps.notifier.send

    def spy(title: str, message: str, **kw: object) -> None:
        order.append(f"notify:{world.pod('p1').state}")
        original(title, message, **kw)  # type: ignore[arg-type]

    world.deps.notifier.send = spy  # type: ignore[method-assign]
    answer = world.event("p1", "idle_destroy", "idle for 20 min", end_at=world.now, note="nothing ran")
    assert answer.status == 200
    assert order == ["notify:ended"]
    rec = world.pod("p1")
    assert (rec.ended_by, rec.note) == ("idle", "nothing ran")


def test_events_may_arrive_out_of_order_but_never_twice(world: World) -> None:
    world.register("p1")
    bodies = {seq: _event_body("p1", f"event {seq}") for seq in (10, 11)}
    second = world.call("POST", "/v1/events", bodies[11], world.signed("p1", bodies[11], 11))
    first = world.call("POST", "/v1/events", bodies[10], world.signed("p1", bodies[10], 10))
    assert (second.status, first.status) == (200, 200)
    replay = world.call("POST", "/v1/events", bodies[10], world.signed("p1", bodies[10], 10))
    assert (replay.status, replay.body) == (409, {"error": "replayed event: this seq was already received"})
    assert world.kinds("p1") == ["info", "info"]


def test_an_event_message_is_redacted(world: World) -> None:
    world.register("p1")
    world.event("p1", "job_exit", "crashed with HF_TOKEN=hf_abcdefghijklmnop", exit_code=1)
    notes = world.store.recent_notifications()
    assert "hf_abcdefghijklmnop" not in notes[-1].message
    assert notes[-1].level == "warning"
    assert "hf_abcdefghijklmnop" not in world.outbox()[-1].message


def test_a_handler_bug_is_a_500_without_details(world: World) -> None:
    def broken(pod_id: str) -> None:
        raise RuntimeError(f"boom {ADMIN}")

    world.store.get_auth = broken  # type: ignore[method-assign]
    world.tokens["p1"] = "t"
    body = world.heartbeat_body("p1", 1)
    answer = dispatch(Request("POST", "/v1/heartbeat", world.signed("p1", body, 1), body), world.deps, world.now)
    assert (answer.status, answer.body) == (500, {"error": "internal error"})


def _register_request(world: World, pod_id: str, token: str) -> api.RegisterRequest:
    return api.RegisterRequest.model_validate(
        {
            "pod_id": pod_id,
            "provider": "fake",
            "name": f"gpuc-{pod_id}",
            "experiment": "exp",
            "key": derive_key(token),
        }
    )


def _event_body(pod_id: str, message: str) -> bytes:
    return (
        api.PodEvent.model_validate({"pod_id": pod_id, "kind": "info", "message": message}).model_dump_json().encode()
    )


# -- numbers and times at the edge (a signed end_at = 1e300 once broke every `gpuc ls`) -------------


def test_a_refusal_for_the_time_window_says_the_servers_time(world: World) -> None:
    world.register("p1")
    for path, body in [
        ("/v1/heartbeat", world.heartbeat_body("p1", 1)),
        ("/v1/events", _event_body("p1", "late")),
    ]:
        for skew in (-301, 301):
            answer = world.call("POST", path, body, world.signed("p1", body, 1, timestamp=int(world.now) + skew))
            assert answer.status == 401
            assert "timestamp outside" in answer.body["error"]
            assert answer.body["server_time"] == world.now  # the agent corrects its clock from it


@pytest.mark.parametrize(
    "fields",
    [
        {"end_at": 1e300},
        {"end_at": -1.0},
        {"end_at": 4_200_000_000.0},  # after 2100
        {"duration_s": 1e300},
        {"exit_code": 2**63},
    ],
    ids=["end-1e300", "end-negative", "end-2103", "duration", "exit-code"],
)
def test_a_signed_event_with_an_absurd_number_is_400_stores_nothing(world: World, fields: dict[str, object]) -> None:
    world.register("p1")
    body = json.dumps({"pod_id": "p1", "kind": "job_exit", "message": "m", **fields}).encode()
    answer = world.call("POST", "/v1/events", body, world.signed("p1", body, 1))
    assert answer.status == 400, answer.body
    assert answer.body["error"].startswith("json validation error: ")
    rec = world.pod("p1")
    assert (rec.state, rec.end_at) == ("ok", None)
    assert world.kinds("p1") == []
    assert world.call("POST", "/v1/events", body, world.signed("p1", body, 1)).status == 400  # seq not claimed


def test_an_end_far_from_the_servers_time_is_400(world: World) -> None:
    world.register("p1")
    for end_at in (world.now + 2 * 3600, world.now - 40 * 86400):
        answer = world.admin("POST", "/v1/pods/p1/end", api.EndRequest.model_validate({"end_at": end_at}))
        assert answer.status == 400
        assert "too far from the server's time" in answer.body["error"]
        body = json.dumps({"pod_id": "p1", "kind": "idle_destroy", "message": "m", "end_at": end_at}).encode()
        seq = world.next_seq("p1")
        assert world.call("POST", "/v1/events", body, world.signed("p1", body, seq)).status == 400
    assert world.pod("p1").end_at is None
    recent = world.now - 3600  # a pod that could not reach us for an hour still closes its row
    assert world.admin("POST", "/v1/pods/p1/end", api.EndRequest.model_validate({"end_at": recent})).status == 200


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"price_per_hour": 1e300}, "price_per_hour"),
        ({"started_at": 1e300}, "started_at"),
        ({"policy": {"silence_limit_s": 1e300}}, "policy.silence_limit_s"),
    ],
)
def test_register_refuses_absurd_numbers(world: World, fields: dict[str, object], where: str) -> None:
    answer = world.call("POST", "/v1/pods", register_body(**fields), admin_headers())
    assert answer.status == 400
    assert answer.body["error"].startswith(f"json validation error: {where} ")
    assert world.store.list_pods() == []


def test_a_start_next_week_is_refused(world: World) -> None:
    answer = world.call("POST", "/v1/pods", register_body(started_at=world.now + 7 * 86400), admin_headers())
    assert answer.status == 400
    assert world.store.list_pods() == []


@pytest.mark.parametrize(
    "fields",
    [
        {"sent_at": 1e300},
        {"python_procs": 10**30},
        {"idle_minutes": 1e300},
        {"gpus": [{"index": 10**30}]},
        {"gpus": [{"index": 0, "utilization_pct": 1e300}]},
        {"gpus": [{"index": 0, "processes": [2**70]}]},
    ],
    ids=["sent_at", "procs", "idle", "gpu-index", "gpu-util", "gpu-pid"],
)
def test_a_signed_heartbeat_with_an_absurd_number_is_400(world: World, fields: dict[str, object]) -> None:
    world.register("p1")
    body = json.dumps({"pod_id": "p1", "seq": 1, "sent_at": world.now, **fields}).encode()
    answer = world.call("POST", "/v1/heartbeat", body, world.signed("p1", body, 1))
    assert answer.status == 400, answer.body
    assert world.pod("p1").last_seen is None


@pytest.mark.parametrize("path", ["/v1/heartbeat", "/v1/events"])
@pytest.mark.parametrize("seq", [str(2**63), "9" * 19, "٣"])
def test_a_seq_header_past_2_63_or_not_ascii_is_400(world: World, path: str, seq: str) -> None:
    world.register("p1")
    body = world.heartbeat_body("p1", 1) if path == "/v1/heartbeat" else _event_body("p1", "m")
    headers = {**world.signed("p1", body, 1), api.H_SEQ: seq}
    answer = world.call("POST", path, body, headers)
    assert (answer.status, answer.body) == (400, {"error": f"missing or malformed {api.H_SEQ} header"})
    assert world.pod("p1").last_seen is None


def test_deeply_nested_json_is_400(world: World) -> None:
    world.register("p1")
    for inner in (b"1", b"NaN"):
        body = b'{"title": ' + b"[" * 5000 + inner + b"]" * 5000 + b', "message": "m"}'
        answer = world.call("POST", "/v1/notify", body, admin_headers())
        assert (answer.status, answer.body) == (400, {"error": "body is not valid JSON"})
