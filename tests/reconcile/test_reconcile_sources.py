"""The billing sources: what they ask each provider, how they read the answer, and every answer they refuse
to read as "no charges"."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fakes.reconcile import HOUR, MONTH, T0, World

from gpuc.client.money.reconcile import SOURCE_FACTORIES, billing_sources
from gpuc.core.clock import iso, parse_iso
from gpuc.core.errors import ConfigError, ProviderAuthError, ProviderError, ProviderSchemaError
from gpuc.core.ledger.months import month_window
from gpuc.core.providers import runpod_billing, vast_billing
from gpuc.core.providers.runpod_billing import RunPodBilling
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_billing import VastBilling
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

# runpod/docs api-reference-v2/openapi.json, listPodBilling 200 example (verbatim).
RUNPOD_DOC_EXAMPLE: dict[str, Any] = {
    "records": [
        {
            "startTime": "2026-06-01T00:00:00Z",
            "endTime": "2026-06-02T00:00:00Z",
            "podId": "7h9k2m4n6p",
            "totalAmount": 12.34,
            "gpuAmount": 11.1,
            "cpuAmount": 0,
            "diskAmount": 1.24,
        }
    ],
    "metadata": {
        "query": {
            "startTime": "2026-06-01T00:00:00Z",
            "endTime": "2026-06-02T00:00:00Z",
            "bucketSize": "day",
            "podId": "7h9k2m4n6p",
        },
        "recordCount": 1,
        "totals": {"totalAmount": 12.34, "gpuAmount": 11.1, "cpuAmount": 0, "diskAmount": 1.24},
        "uniquePodCount": 1,
    },
}
# vast-ai/docs show_charges.yaml: its per-property examples put together into one body (the yaml has no
# whole-response example); count/total/next_token and a disk item are set so the page is self-consistent.
VAST_DOC_EXAMPLE: dict[str, Any] = {
    "success": True,
    "count": 1,
    "total": 1,
    "next_token": None,
    "results": [
        {
            "start": 1730419200,
            "end": 1730678400,
            "type": "instance",
            "source": "instance-12345678",
            "description": "Instance 12345678 Charges - 4 days",
            "amount": 38.421,
            "metadata": {"template_id": 101, "label": "my-training-job"},
            "items": [
                {
                    "start": 1730419200,
                    "end": 1730678400,
                    "type": "gpu",
                    "source": None,
                    "description": "96.000 hours at $0.389/hour",
                    "amount": 37.344,
                    "metadata": {},
                    "items": [],
                },
                {
                    "start": 1730419200,
                    "end": 1730678400,
                    "type": "disk",
                    "source": None,
                    "description": "40 GB",
                    "amount": 1.077,
                    "metadata": {},
                    "items": [],
                },
            ],
        }
    ],
}


def runpod_records(body: dict[str, Any]) -> list[Any]:
    return [r for wire in runpod_billing.parse_page(body) for r in runpod_billing.records_of(wire)]


def vast_records(body: dict[str, Any], now: float = 2e9) -> list[Any]:
    page = vast_billing.parse_page(body)
    return [r for c in page.results for r in vast_billing.records_of(c, now)]


# ---- reading RunPod ------------------------------------------------------------------------------------


def test_the_runpod_doc_example_reads_as_compute_and_disk() -> None:
    records = runpod_records(RUNPOD_DOC_EXAMPLE)
    assert [(r.pod_id, r.kind, r.amount_usd) for r in records] == [
        ("7h9k2m4n6p", "gpu", 11.1),
        ("7h9k2m4n6p", "disk", 1.24),
    ]
    assert records[0].start == parse_iso("2026-06-01T00:00:00Z") and records[0].end - records[0].start == 86400


def drifted(change: Any) -> dict[str, Any]:
    body = copy.deepcopy(RUNPOD_DOC_EXAMPLE)
    change(body)
    return body


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda b: b.pop("records"), "no records"),
        (lambda b: b.update(records={"7h9k2m4n6p": []}), "records"),
        (lambda b: b["records"][0].pop("diskAmount"), "diskAmount"),
        (lambda b: b["records"][0].update(podId=None), "podId"),
        (lambda b: b["metadata"].update(recordCount=2), "partial answer"),
        (lambda b: b.update(records=None), "null"),
        (lambda b: b["records"][0].update(totalAmount=15.0), "not gpu + cpu + disk"),
        (lambda b: b["records"][0].update(gpuAmount=-1.0, totalAmount=0.24), "negative"),
        (lambda b: b["records"][0].update(startTime="yesterday"), "RFC 3339"),
        (lambda b: b["records"][0].update(endTime="2026-05-01T00:00:00Z"), "ends before"),
    ],
)
def test_a_runpod_answer_gpuc_cannot_trust_raises(change: Any, words: str) -> None:
    with pytest.raises(ProviderSchemaError) as err:
        runpod_records(drifted(change))
    assert words in err.value.message and err.value.hint


def test_a_null_record_list_is_empty_only_when_the_count_says_zero() -> None:
    assert runpod_records({"records": None, "metadata": {"recordCount": 0}}) == []
    assert runpod_records({"records": [], "metadata": {"recordCount": 0}}) == []
    with pytest.raises(ProviderSchemaError):
        runpod_records({"records": None, "metadata": {}})


def test_runpod_is_asked_for_hourly_buckets_of_the_month(runpod_world: World) -> None:
    runpod_world.run_pod(1.0)
    runpod_world.clock.advance(40 * 24 * HOUR)  # the month is over
    runpod_world.source().billing(MONTH)
    (request,) = runpod_world.emulator.ops("billing")
    assert request.method == "GET" and request.path == "/v2/billing/pods"
    assert request.query == {
        "startTime": ["2025-09-01T00:00:00Z"],
        "endTime": ["2025-10-01T00:00:00Z"],
        "bucketSize": ["hour"],
    }
    assert request.headers["authorization"] == "<redacted>"


def test_a_month_in_progress_is_asked_up_to_the_next_hour_and_a_future_month_not_at_all(
    runpod_world: World,
) -> None:
    runpod_world.clock.advance(1800)  # 10:30 on the 3rd
    runpod_world.source().billing(MONTH)
    assert runpod_world.emulator.ops("billing")[0].query["endTime"] == ["2025-09-03T11:00:00Z"]
    assert runpod_world.source().billing("2025-10") == []
    assert len(runpod_world.emulator.ops("billing")) == 1


def test_runpod_billing_rides_the_http_choke_point_retries(runpod_world: World) -> None:
    pod = runpod_world.run_pod(1.0)
    runpod_world.emulator.faults.add("billing", "429", times=2)
    records = runpod_world.source().billing(MONTH)
    assert {r.pod_id for r in records} == {pod}
    assert [r.fault for r in runpod_world.emulator.ops("billing")] == ["429", "429", None]


# ---- reading Vast --------------------------------------------------------------------------------------


def test_the_vast_doc_example_reads_as_gpu_and_disk_of_one_instance() -> None:
    records = vast_records(VAST_DOC_EXAMPLE)
    assert [(r.pod_id, r.kind, r.amount_usd) for r in records] == [
        ("12345678", "gpu", 37.344),
        ("12345678", "disk", 1.077),
    ]


def test_disk_billed_past_the_last_gpu_charge_is_split_off_pro_rata() -> None:
    body = copy.deepcopy(VAST_DOC_EXAMPLE)
    gpu, disk = body["results"][0]["items"]
    gpu["end"] = gpu["start"] + 24 * 3600  # ran one day of the contract's three
    records = vast_records(body)
    disks = [r for r in records if r.kind == "disk"]
    assert [(r.start, r.end) for r in disks] == [(disk["start"], gpu["end"]), (gpu["end"], disk["end"])]
    assert disks[1].amount_usd == pytest.approx(1.077 * 2 / 3)
    assert sum(r.amount_usd for r in disks) == pytest.approx(1.077)


def test_a_live_contract_is_never_read_past_now() -> None:
    body = copy.deepcopy(VAST_DOC_EXAMPLE)
    now = body["results"][0]["start"] + 3600
    assert all(r.end <= now for r in vast_records(body, now=now))


def drifted_vast(change: Any) -> dict[str, Any]:
    body = copy.deepcopy(VAST_DOC_EXAMPLE)
    change(body)
    return body


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda b: b.pop("results"), "no results"),
        (lambda b: b.update(results=None), "no results"),
        (lambda b: b.update(count=3), "partial page"),
        (lambda b: b.pop("total"), "total"),
        (lambda b: b["results"][0].update(source="12345678"), "contract of type"),
        (lambda b: b["results"][0].update(type="machine"), "contract of type"),
        (lambda b: b["results"][0]["items"][1].update(type="storage"), "kind 'storage'"),
        (lambda b: b["results"][0].update(amount=50.0), "not the sum"),
        (lambda b: b["results"][0].update(items=[]), "no breakdown"),
        (lambda b: b["results"][0]["items"][0].update(amount=-1.0), "negative"),
        (lambda b: b["results"][0]["items"][0].update(amount="37.344 USD"), "amount"),
    ],
)
def test_a_vast_answer_gpuc_cannot_trust_raises(change: Any, words: str) -> None:
    with pytest.raises(ProviderSchemaError) as err:
        vast_records(drifted_vast(change))
    assert words in err.value.message and err.value.hint


def test_vast_is_asked_for_the_month_s_instance_charges(vast_world: World) -> None:
    vast_world.run_pod(1.0)
    vast_world.source().billing(MONTH)
    (request,) = vast_world.emulator.ops("billing")
    assert request.path == "/api/v0/charges/"
    first, end = month_window(MONTH)
    assert json.loads(request.query["select_filters"][0]) == {
        "day": {"gte": int(first), "lte": int(end) - 1},
        "type": {"in": ["instance"]},
    }
    assert request.query["format"] == ["table"] and request.query["limit"] == ["100"]


def test_every_page_of_vast_charges_is_read(vast_world: World) -> None:
    pods = {vast_world.run_pod(0.5) for _ in range(5)}
    records = vast_world.source(page_size=2).billing(MONTH)
    assert {r.pod_id for r in records} == pods
    assert len(vast_world.emulator.ops("billing")) == 3


def test_a_vast_pagination_that_loops_raises(vast_world: World) -> None:
    for _ in range(3):
        vast_world.run_pod(0.5)
    vast_world.emulator.faults.add("billing", "broken_pagination", times=None)
    with pytest.raises(ProviderSchemaError) as err:
        vast_world.source(page_size=2).billing(MONTH)
    assert "pagination" in err.value.message or "loops" in err.value.message


def test_a_vast_success_false_is_a_refusal_not_an_empty_bill(vast_world: World) -> None:
    vast_world.run_pod(0.5)
    vast_world.emulator.faults.add("billing", "success_false")
    with pytest.raises(ProviderError) as err:
        vast_world.source().billing(MONTH)
    assert "charges refused" in err.value.message


def test_a_vast_key_that_matches_no_user_is_an_auth_error(vast_world: World) -> None:
    source = VastBilling(lambda: VastProvider("f00dwrongkey", url=vast_world.env["GPUC_VAST_URL"]))
    with pytest.raises(ProviderAuthError) as err:
        source.billing(MONTH)
    assert "Invalid user key" in err.value.message and err.value.hint and "VAST_API_KEY" in err.value.hint
    assert err.value.status == 404


# ---- the registry --------------------------------------------------------------------------------------


def test_runpod_and_vast_are_registered_and_built_from_settings() -> None:
    assert {"runpod", "vast"} <= set(SOURCE_FACTORIES)
    settings = Settings(runpod_api_key=SecretStr("rpa_" + "k" * 30), vast_api_key=SecretStr("v" * 40))
    sources = billing_sources(settings)
    assert isinstance(sources["runpod"], RunPodBilling) and isinstance(sources["vast"], VastBilling)


def test_a_source_without_a_key_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError) as err:
        billing_sources(Settings(), only=["vast"])["vast"].billing(MONTH)
    assert err.value.hint and "VAST_API_KEY" in err.value.hint


def test_month_windows_are_utc_calendar_months() -> None:
    assert month_window("2025-12") == (parse_iso("2025-12-01T00:00:00Z"), parse_iso("2026-01-01T00:00:00Z"))
    assert iso(month_window(MONTH)[0]) == "2025-09-01T00:00:00Z"
    assert month_window(MONTH)[0] < T0 < month_window(MONTH)[1] - HOUR
