"""The reference bodies (shared/reference/fixtures, copied beside this file) parse into our models without
losing what gpuc uses: status, cost, GPU, name/label, created/uptime, runtime ports.

Not used by gpuc, so not parsed here: REST v1 (retired 2026-11-15), the REST v2 GPU catalog (offers come
from GraphQL gpuTypes), the deprecated Vast v0 list, podResume / podBidResume.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fakes.providers import RUNPOD_GRAPHQL_URL, RUNPOD_KEY, RUNPOD_REST_URL, VAST_KEY, VAST_URL, fixture, spec

from gpuc.core.clock import FakeClock, parse_iso
from gpuc.core.errors import ProviderAuthError, ProviderError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.podkey import RunPodSelfDestroyer
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_catalog import parse_catalog
from gpuc.core.providers.runpod_pods import parse_v2_pod
from gpuc.core.providers.vast import VastProvider
from gpuc.core.providers.vast_instances import parse_instance
from gpuc.core.providers.vast_offers import parse_offers

Handler = Callable[[httpx.Request], httpx.Response]


def runpod_with(handler: Handler) -> RunPodProvider:
    return RunPodProvider(
        RUNPOD_KEY,
        graphql_url=RUNPOD_GRAPHQL_URL,
        rest_url=RUNPOD_REST_URL,
        transport=httpx.MockTransport(handler),
        clock=FakeClock(),
        backoff=zero_backoff,
    )


def vast_with(handler: Handler) -> VastProvider:
    return VastProvider(
        VAST_KEY,
        url=VAST_URL,
        transport=httpx.MockTransport(handler),
        clock=FakeClock(),
        backoff=zero_backoff,
    )


def answer(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


# ---- RunPod ---------------------------------------------------------------------------------------


def test_a_v2_pod_gives_status_cost_gpu_created_uptime_env_and_the_ssh_port() -> None:
    pod = parse_v2_pod(fixture("runpod_rest_v2_list_pods_docexample.json")["pods"][0])
    assert (pod.id, pod.name, pod.status, pod.price_per_hour) == (
        "7h9k2m4n6p",
        "pytorch-training",
        "running",
        0.44,
    )
    assert (pod.gpu, pod.gpu_count) == ("RTX 4090", 1)  # the catalog id "NVIDIA GeForce RTX 4090", shortened
    assert pod.created_at == parse_iso("2026-06-01T12:00:00Z")
    assert pod.uptime_s == 3600
    assert (pod.ssh_host, pod.ssh_port) == ("195.26.233.3", 34446)
    assert pod.disk_gb == 20 and not pod.managed and not pod.interruptible
    assert pod.gpu_util_pct is None  # the example's runtime has no gpus


def test_an_exited_v2_pod_costs_its_volume_not_zero() -> None:
    raw = fixture("runpod_rest_v2_list_pods_docexample.json")["pods"][0]
    pod = parse_v2_pod({**raw, "status": "EXITED", "cost": 0.0, "runtime": None})
    assert pod.status == "stopped" and pod.price_per_hour == round(20 * 0.20 / 720, 6)
    assert pod.disk_usd_gb_month == 0.20


def test_the_v2_catalog_gives_secure_and_community_prices_per_gpu_and_the_availability() -> None:
    body = fixture("runpod_rest_v2_catalog_gpus_docexample.json")
    [secure] = parse_catalog(body)
    assert (secure.id, secure.gpu, secure.price_per_hour, secure.community_price, secure.stock) == (
        "NVIDIA GeForce RTX 4090",
        "RTX 4090",
        0.44,
        0.31,
        "High",
    )
    assert secure.min_bid is None and secure.interruptible_price is None
    [community] = parse_catalog(body, "COMMUNITY")
    assert community.price_per_hour == 0.31
    [cheapest] = parse_catalog(body, "ALL")
    assert cheapest.price_per_hour == 0.31


def test_a_catalog_gpu_a_cloud_does_not_offer_is_no_offer_there() -> None:
    row = fixture("runpod_rest_v2_catalog_gpus_docexample.json")["gpus"][0]
    body = {"gpus": [{**row, "community": False}, {**row, "id": "unknown"}]}
    assert parse_catalog(body, "COMMUNITY") == []
    assert [o.id for o in parse_catalog(body, "SECURE")] == ["NVIDIA GeForce RTX 4090"]


def test_a_catalog_that_is_not_a_list_raises() -> None:
    with pytest.raises(ProviderError):
        parse_catalog({"data": fixture("runpod_rest_v2_catalog_gpus_docexample.json")})


def test_a_delete_answered_with_a_404_problem_is_already_gone() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path != "/graphql"
        return answer({"title": "Not Found", "status": 404, "detail": "resource not found"}, 404)

    assert runpod_with(handler).destroy("50qynxzilsxoey") == "already_gone"


@pytest.mark.parametrize("status", [200, 400])
def test_the_observed_not_found_body_is_what_the_pod_side_terminate_hears_as_not_found(status: int) -> None:
    from gpuc.core.providers.podhttp import PodKeyHttp, Sent

    body = fixture("runpod_graphql_podTerminate_notfound_observed.json")
    sent = Sent(status, {"content-type": "application/json"}, json.dumps(body).encode())
    http = PodKeyHttp("runpod", RUNPOD_KEY, "RUNPOD_API_KEY", clock=FakeClock(), send=lambda *_: sent)
    assert RunPodSelfDestroyer("50qynxzilsxoey", http, graphql_url=RUNPOD_GRAPHQL_URL).terminate() is False


def test_a_404_that_is_not_runpods_problem_body_is_never_read_as_gone() -> None:
    # e.g. a wrong REST base URL answering its own 404 page
    provider = runpod_with(lambda request: httpx.Response(404, json={"message": "no route"}))
    with pytest.raises(ProviderError, match="not a RunPod problem body"):
        provider.get("50qynxzilsxoey")


# ---- Vast -----------------------------------------------------------------------------------------


def test_a_v1_list_instance_gives_status_cost_gpu_label_start_and_the_direct_ssh_port() -> None:
    pod = parse_instance(fixture("vast_v1_instances_list_schema_examples_docexample.json")["instances"][0])
    assert (pod.id, pod.name, pod.status, pod.price_per_hour) == (
        "312",
        "ML Training Job 2025",
        "running",
        0.8021,
    )
    assert (pod.gpu, pod.gpu_count, pod.created_at) == ("RTX 4090", 1, 1668804745.1223178)
    assert (pod.ssh_host, pod.ssh_port) == ("192.0.2.45", 20000)
    assert pod.gpu_util_pct == 0.0
    assert not pod.managed and not pod.interruptible


def test_the_v1_list_is_followed_to_its_last_page() -> None:
    first = fixture("vast_v1_instances_list_schema_examples_docexample.json")
    tokens: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("after_token")
        tokens.append(token)
        if token is None:
            return answer(first)
        return answer({**first, "next_token": None, "instances": [{**first["instances"][0], "id": 313}]})

    pods = vast_with(handler).list_pods()
    assert [p.id for p in pods] == ["312", "313"]
    assert tokens == [None, first["next_token"]]


def test_a_show_instance_without_direct_ports_falls_back_to_the_ssh_proxy() -> None:
    body = fixture("vast_show_instance_schema_examples_docexample.json")
    pod = vast_with(lambda request: answer(body)).get("883")
    assert pod is not None
    assert (pod.name, pod.status, pod.price_per_hour) == ("", "running", 1.0020740740740741)
    assert (pod.ssh_host, pod.ssh_port, pod.uptime_s) == ("ssh2281.vast.ai", 10882, None)


def test_the_hello_world_loading_instance_is_provisioning() -> None:
    pod = vast_with(lambda request: answer(fixture("vast_show_instance_loading_docexample.json"))).get("42")
    assert pod is not None and (pod.id, pod.status) == ("42", "provisioning")


def test_instances_null_means_positively_gone() -> None:
    assert vast_with(lambda request: answer(fixture("vast_show_instance_deleted_testmock.json"))).get("42") is None


def test_create_reads_new_contract_as_the_instance_id_and_drops_the_instance_key() -> None:
    created = fixture("vast_create_instance_docexample.json")
    pod = vast_with(lambda request: answer(created)).create(spec("vast", offer_id="1234567", price_per_hour=0.4))
    assert (pod.id, pod.status, pod.price_per_hour, pod.managed) == ("12345678", "provisioning", 0.4, True)
    assert created["instance_api_key"] not in json.dumps(dataclasses.asdict(pod))


def test_users_current_gives_the_credit() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/users/current/"):  # show_user.yaml's path
            return answer(fixture("vast_users_current_docexample.json"))
        return answer({"success": True, "instances": [], "next_token": None})

    balance = vast_with(handler).balance()
    assert (balance.balance_usd, balance.spend_per_hour) == (25.0, 0.0)


ERRORS = fixture("vast_error_and_status_bodies_docexample.json")


def test_the_documented_destroy_bodies() -> None:
    gone = vast_with(
        lambda r: (
            answer(ERRORS["destroy_instance_DELETE_404"], 404) if r.method == "DELETE" else answer({"instances": None})
        )
    )
    assert gone.destroy("42") == "already_gone"
    done = vast_with(
        lambda r: answer(ERRORS["destroy_instance_DELETE_200"]) if r.method == "DELETE" else answer({"instances": None})
    )
    assert done.destroy("42") == "destroyed"
    bad = vast_with(lambda r: answer(ERRORS["destroy_instance_DELETE_400"], 400))
    with pytest.raises(ProviderError, match="invalid instance_id"):
        bad.destroy("42")


def test_the_documented_auth_error_is_an_auth_error_with_the_providers_words() -> None:
    provider = vast_with(lambda r: answer(ERRORS["show_instance_GET_401"], 401))
    with pytest.raises(ProviderAuthError, match="Invalid user key") as caught:
        provider.get("42")
    assert caught.value.hint and "VAST_API_KEY" in caught.value.hint


@pytest.mark.parametrize(
    ("key", "status"), [("create_instance_PUT_asks_404", 404), ("create_instance_PUT_asks_410", 410)]
)
def test_a_gone_offer_says_to_search_again(key: str, status: int) -> None:
    provider = vast_with(lambda r: answer(ERRORS[key], status))
    with pytest.raises(ProviderError, match="no_such_ask") as caught:
        provider.create(spec("vast", offer_id="1234567"))
    assert caught.value.hint and "gpuc offers" in caught.value.hint


def test_the_real_offer_keeps_price_bid_reliability_network_cuda_and_host_quality() -> None:
    [offer] = parse_offers({"offers": fixture("vast_bundles_offers_real_2024.json")})
    assert (offer.id, offer.gpu, offer.gpu_count) == ("11684738", "RTX 4090", 1)
    assert (offer.price_per_hour, offer.min_bid) == (0.2466759259259259, 0.2)
    assert (offer.reliability, offer.inet_down_mbps, offer.cuda_max, offer.gpu_mem_bw_gbps) == (
        0.9700835,
        105.9,
        12.2,
        3108.4,
    )
    assert (offer.verified, offer.inet_down_cost, offer.storage_cost) == (True, 0.0, 0.0013333333333333335)
    assert offer.location == "Guangxi, CN"


def test_the_docs_offer_example_is_one_object_not_a_list() -> None:
    [offer] = parse_offers(fixture("vast_bundles_response_docexample.json"))
    assert (offer.id, offer.gpu, offer.gpu_count, offer.price_per_hour) == (
        "12345678",
        "Imaginary RTX 9999",
        4,
        0.234567,
    )
