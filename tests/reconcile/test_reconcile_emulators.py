"""The emulators' billing endpoints: as strict as the rest (documented parameters only, the documented error
bodies), and billing what the pods did: running time x price, stopped time x the disk rate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fakes.reconcile import HOUR, T0

from gpuc.core.clock import FakeClock, iso
from gpuc.testkit.emulators.billing import bucket_floor, bucket_next
from gpuc.testkit.emulators.runpod import DEFAULT_GPUS, RunPodEmulator
from gpuc.testkit.emulators.vast import VastEmulator

RUNPOD_KEY = "rpa_" + "PLANTEDbilling0123456789abcdef"  # built: no token-shaped literal in the repo
VAST_KEY = "f00dPLANTEDbilling0123456789abcd"
DAY = {"gte": int(T0 - 3 * 86400), "lte": int(T0 + 27 * 86400)}


@pytest.fixture
def runpod_emu(clock: FakeClock) -> RunPodEmulator:
    return RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)


@pytest.fixture
def vast_emu(clock: FakeClock) -> VastEmulator:
    return VastEmulator(api_key=VAST_KEY, clock=clock)


@pytest.fixture
def runpod_http(runpod_emu: RunPodEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(transport=runpod_emu.transport(), base_url="https://api.runpod.test") as client:
        yield client


@pytest.fixture
def vast_http(vast_emu: VastEmulator) -> Iterator[httpx.Client]:
    with httpx.Client(transport=vast_emu.transport(), base_url="https://console.vast.test") as client:
        yield client


def runpod_bill(client: httpx.Client, key: str = RUNPOD_KEY, **params: Any) -> httpx.Response:
    query = {"startTime": iso(T0 - 2 * 86400), "endTime": iso(T0 + 2 * 86400), "bucketSize": "hour", **params}
    return client.get("/v2/billing/pods", params=query, headers={"Authorization": f"Bearer {key}"})


def vast_charges(client: httpx.Client, key: str | None = VAST_KEY, **params: Any) -> httpx.Response:
    query = {"select_filters": json.dumps({"day": DAY}), **params}
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return client.get("/api/v0/charges/", params=query, headers=headers)


def runpod_pod(emu: RunPodEmulator, state: str = "running") -> str:
    pod_id = emu.add_foreign_pod("gpuc-bill0001", state=state)
    return pod_id


# ---- RunPod --------------------------------------------------------------------------------------------


def test_runpod_bills_running_hours_at_the_pod_price_and_stopped_hours_at_the_volume_rate(
    runpod_emu: RunPodEmulator, runpod_http: httpx.Client, clock: FakeClock
) -> None:
    pod_id = runpod_pod(runpod_emu)
    clock.advance(2 * HOUR)
    runpod_emu.set_status(pod_id, "exited")
    clock.advance(3 * HOUR)
    runpod_emu.set_status(pod_id, "terminated")
    clock.advance(5 * HOUR)  # gone: no more charges
    body = runpod_bill(runpod_http).json()
    records = [r for r in body["records"] if r["podId"] == pod_id]
    price = DEFAULT_GPUS[0].secure  # add_foreign_pod rents the first GPU type at its secure price
    assert [r["startTime"] for r in records] == [iso(T0 + h * HOUR) for h in range(5)]
    assert sum(r["gpuAmount"] for r in records) == pytest.approx(2 * price, abs=1e-3)
    assert [r["gpuAmount"] > 0 for r in records] == [True, True, False, False, False]
    stopped_disk = sum(r["diskAmount"] for r in records[2:])
    assert stopped_disk == pytest.approx(3 * 30 * 0.20 / 720, abs=1e-3)  # 30 GB volume at $0.20/GB/month
    assert body["metadata"]["recordCount"] == len(body["records"])
    assert body["metadata"]["totals"]["totalAmount"] == pytest.approx(sum(r["totalAmount"] for r in records))


def test_runpod_bills_on_past_terminate_after_as_the_real_api_does(
    runpod_emu: RunPodEmulator, runpod_http: httpx.Client, clock: FakeClock
) -> None:
    """runpodctl #330: the API takes terminateAfter and never acts on it. A fake that honoured it would
    hide the very bill gpuc's own deadline exists to stop."""
    pod_id = runpod_pod(runpod_emu)
    runpod_emu.pods[pod_id].terminate_after = T0 + 1.5 * HOUR
    clock.advance(6 * HOUR)
    records = runpod_bill(runpod_http).json()["records"]
    assert pod_id in runpod_emu.pods
    assert sum(r["gpuAmount"] for r in records if r["podId"] == pod_id) == pytest.approx(
        6 * DEFAULT_GPUS[0].secure, abs=1e-3
    )


def test_runpod_planted_and_factored_charges(
    runpod_emu: RunPodEmulator, runpod_http: httpx.Client, clock: FakeClock
) -> None:
    pod_id = runpod_pod(runpod_emu)
    clock.advance(HOUR)
    runpod_emu.set_charge_factor(pod_id, 2.0)
    runpod_emu.plant_charge("ghostpod000001", "disk", 0.25, T0 + 600)
    body = runpod_bill(runpod_http).json()
    by_pod = {r["podId"]: r for r in body["records"]}
    assert by_pod[pod_id]["gpuAmount"] == pytest.approx(2 * DEFAULT_GPUS[0].secure, abs=1e-3)
    assert by_pod["ghostpod000001"]["diskAmount"] == 0.25
    assert runpod_bill(runpod_http, podId="ghostpod000001").json()["metadata"]["recordCount"] == 1
    with pytest.raises(ValueError):
        runpod_emu.plant_charge(pod_id, "bandwidth", 1.0, T0)


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"bucketSize": "minute"}, "bucketSize"),
        ({"lastN": "3"}, "mutually exclusive"),
        ({"startTime": "2025-09-03"}, "startTime"),
        ({"startTime": "2025-09-03T10:00:00"}, "no offset"),
        ({"endTime": iso(T0 - 5 * 86400)}, "after startTime"),
    ],
)
def test_runpod_billing_refuses_what_the_v2_spec_does_not_allow(
    runpod_http: httpx.Client, params: dict[str, str], words: str
) -> None:
    answer = runpod_bill(runpod_http, **params)
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["detail"] == "Request validation failed." and words in body["errors"][0]


def test_runpod_billing_ignores_a_query_parameter_it_does_not_know(runpod_http: httpx.Client) -> None:
    """REST v1's `grouping` is not v2's: ignored, as RunPod ignores every unknown query parameter."""
    answer = runpod_bill(runpod_http, grouping="podId")
    assert answer.status_code == 200 and set(answer.json()) == {"records", "metadata"}


def test_runpod_last_n_buckets_end_with_the_current_one(runpod_http: httpx.Client, runpod_emu: RunPodEmulator) -> None:
    query = {"lastN": "3", "bucketSize": "day"}
    answer = runpod_http.get("/v2/billing/pods", params=query, headers={"Authorization": f"Bearer {RUNPOD_KEY}"})
    echo = answer.json()["metadata"]["query"]
    assert (echo["startTime"], echo["endTime"]) == (iso(T0 - 10 * HOUR - 2 * 86400), iso(T0 + 14 * HOUR))


def test_runpod_billing_needs_the_account_key(runpod_emu: RunPodEmulator, runpod_http: httpx.Client) -> None:
    pod_id = runpod_pod(runpod_emu)
    assert runpod_http.get("/v2/billing/pods").status_code == 401
    assert runpod_bill(runpod_http, key="rpa_wrong").status_code == 401
    pod_key = runpod_emu.pod_environ(pod_id)["RUNPOD_API_KEY"]
    assert runpod_bill(runpod_http, key=pod_key).status_code == 403


def test_buckets_are_utc_calendar_units() -> None:
    assert iso(bucket_floor(T0 + 1234, "hour")) == "2025-09-03T10:00:00Z"
    assert iso(bucket_floor(T0, "week")) == "2025-09-01T00:00:00Z"  # a Monday
    assert iso(bucket_next(bucket_floor(T0, "month"), "month")) == "2025-10-01T00:00:00Z"
    assert iso(bucket_next(bucket_floor(T0, "year"), "year")) == "2026-01-01T00:00:00Z"


# ---- Vast ----------------------------------------------------------------------------------------------


def test_vast_bills_gpu_while_running_and_disk_from_create_to_destroy(
    vast_emu: VastEmulator, vast_http: httpx.Client, clock: FakeClock
) -> None:
    inst = vast_emu.add_foreign_pod("gpuc-bill0002")
    clock.advance(2 * HOUR)
    vast_emu.set_status(inst, "stopped")
    clock.advance(4 * HOUR)
    vast_emu.vanish(inst)
    clock.advance(5 * HOUR)
    body = vast_charges(vast_http).json()
    (contract,) = body["results"]
    assert contract["source"] == f"instance-{inst}" and contract["type"] == "instance"
    items = {i["type"]: i for i in contract["items"]}
    assert (items["gpu"]["start"], items["gpu"]["end"]) == (T0, T0 + 2 * HOUR)
    assert items["gpu"]["amount"] == pytest.approx(2 * 0.18, abs=1e-3)  # the foreign offer's dph_base
    assert (items["disk"]["start"], items["disk"]["end"]) == (T0, T0 + 6 * HOUR)
    assert items["disk"]["amount"] == pytest.approx(6 * 16 * 0.15 / 720, abs=1e-3)  # 16 GB at $0.15/GB/month
    assert contract["amount"] == pytest.approx(items["gpu"]["amount"] + items["disk"]["amount"])
    assert (body["count"], body["total"], body["next_token"], body["success"]) == (1, 1, None, True)


def test_vast_planted_charge_is_a_contract_the_account_never_saw(
    vast_emu: VastEmulator, vast_http: httpx.Client
) -> None:
    vast_emu.plant_charge(424242, "bwd", 0.07, T0, T0 + HOUR)
    (contract,) = vast_charges(vast_http).json()["results"]
    assert contract["source"] == "instance-424242" and contract["items"][0]["type"] == "bwd"
    with pytest.raises(ValueError):
        vast_emu.plant_charge(424242, "storage", 1.0, T0)


@pytest.mark.parametrize(
    ("params", "status", "body"),
    [
        (
            {"select_filters": json.dumps({"day": {"gte": DAY["gte"]}})},
            400,
            {"success": False, "msg": "Must provide both 'day' gte and lte filters for instance charges"},
        ),
        (
            {"after_token": "not-a-token"},
            400,
            {"success": False, "error": "invalid_token", "msg": "Invalid pagination token"},
        ),
    ],
)
def test_vast_charges_answer_the_documented_errors(
    vast_http: httpx.Client, params: dict[str, str], status: int, body: dict[str, Any]
) -> None:
    answer = vast_charges(vast_http, **params)
    assert (answer.status_code, answer.json()) == (status, body)


@pytest.mark.parametrize(
    "params",
    [
        {"owner": "me"},
        {"select_filters": json.dumps({"day": DAY, "label": {"eq": "x"}})},
        {"select_filters": json.dumps({"day": DAY, "type": {"eq": "instance"}})},
        {"limit": "501"},
        {"latest_first": "yes"},
        {"format": "csv"},
    ],
)
def test_vast_charges_refuse_undocumented_parameters(vast_http: httpx.Client, params: dict[str, str]) -> None:
    answer = vast_charges(vast_http, **params)
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_args"


def test_vast_charges_auth_answers_as_documented(vast_emu: VastEmulator, vast_http: httpx.Client) -> None:
    inst = vast_emu.add_foreign_pod()
    assert vast_charges(vast_http, key=None).status_code == 403  # no Authorization: "requires login"
    assert vast_charges(vast_http, key="f00dwrongkey").json()["msg"] == "Invalid user key"
    assert vast_charges(vast_http, key="f00dwrongkey").status_code == 404
    instance_key = vast_emu.pod_environ(inst)["CONTAINER_API_KEY"]
    assert vast_charges(vast_http, key=instance_key).status_code == 403


def test_vast_charges_filtered_to_volumes_hold_no_instances(
    vast_emu: VastEmulator, vast_http: httpx.Client, clock: FakeClock
) -> None:
    vast_emu.add_foreign_pod()
    clock.advance(HOUR)
    only_volumes = json.dumps({"day": DAY, "type": {"in": ["volume"]}})
    assert vast_charges(vast_http, select_filters=only_volumes).json()["results"] == []
    assert len(vast_charges(vast_http).json()["results"]) == 1
