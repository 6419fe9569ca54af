"""VastProvider against the Vast emulator (in-process transport, and over real HTTP)."""

from __future__ import annotations

import json

import httpx
import pytest
from fakes.providers import VAST_KEY, VAST_URL, spec

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, NotFound, ProviderError, ProviderSchemaError, ProviderUnavailable
from gpuc.core.pod import OWNER_ENV
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.outcome import StoppedInstead
from gpuc.core.providers.podkey import VastSelfDestroyer
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.emulators.vast import VastEmulator, VastOfferState

OFFER = "11684738"  # the emulator's RTX 4090 that passes every default filter


def create_body(emu: VastEmulator) -> dict[str, object]:
    [request] = emu.ops("create")
    assert request.method == "PUT" and request.path == f"/api/v0/asks/{OFFER}/"
    return json.loads(request.body)  # type: ignore[no-any-return]


def test_it_rents_an_offer_on_demand_with_label_disk_ssh_and_owner_marker(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER, price_per_hour=0.35, env={"HF_HOME": "/workspace/hf"}))
    body = create_body(vast_emu)
    assert (body["label"], body["disk"], body["runtype"]) == ("gpuc-run0001", 30.0, "ssh_direct")
    assert "client_id" not in body  # the CLI's, not in create_instance.yaml
    assert "price" not in body  # no price: on-demand
    assert body["cancel_unavail"] is True  # sent explicitly: never a stopped instance billing its disk
    assert body["env"] == {"HF_HOME": "/workspace/hf", OWNER_ENV: "1", "GPUC_EXPERIMENT": "tiny-llama"}
    assert (pod.id, pod.status, pod.managed, pod.price_per_hour) == ("31000000", "provisioning", True, 0.35)


def test_an_interruptible_instance_sends_its_bid_per_machine(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER, interruptible=True, bid_per_gpu=0.22))
    assert create_body(vast_emu)["price"] == 0.22
    assert pod.interruptible and pod.price_per_hour == 0.22
    vast_emu.set_status(pod.id, "outbid")
    assert vast.get(pod.id).status == "paused"  # type: ignore[union-attr]


def test_a_bid_that_cannot_be_scheduled_creates_nothing(vast: VastProvider, vast_emu: VastEmulator) -> None:
    # Another renter pays 0.30 on this host: a 0.22 bid waits. Without cancel_unavail Vast would create the
    # instance STOPPED, billing its disk while it waits.
    vast_emu.offers[int(OFFER)].winning_bid = 0.30
    with pytest.raises(ProviderError, match="cannot be scheduled") as caught:
        vast.create(spec("vast", offer_id=OFFER, interruptible=True, bid_per_gpu=0.22))
    assert "nothing was created" in (caught.value.hint or "")
    assert create_body(vast_emu)["cancel_unavail"] is True
    assert vast_emu.alive() == [] and vast_emu.billing_book.pod_ids() == []


def test_a_spent_search_quota_is_not_retried(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.faults.add(op="offers", kind="search_quota", times=None)
    with pytest.raises(ProviderUnavailable, match="quota") as caught:
        vast.offers("RTX 4090")
    assert "resets" in (caught.value.hint or "")
    assert len(vast_emu.ops("offers")) == 1  # a plain 429 is retried; a spent quota only burns more of it
    vast_emu.faults.clear()
    vast_emu.faults.add(op="offers", kind="429", times=1)
    assert [o.id for o in vast.offers("RTX 4090")] == [OFFER]


def test_without_an_offer_id_it_takes_the_cheapest_offer_that_passes_the_filters(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    pod = vast.create(spec("vast"))
    assert create_body(vast_emu) and pod.gpu == "RTX 4090"
    assert pod.price_per_hour == pytest.approx(0.34 + 0.15 * 30 / 720)


def test_no_offer_passing_the_filters_is_not_found(vast: VastProvider, vast_emu: VastEmulator) -> None:
    with pytest.raises(NotFound, match="no Vast offer"):
        vast.create(spec("vast", gpu_type="B200"))
    assert vast_emu.ops("create") == []


def test_an_instance_goes_from_loading_to_running_with_its_ssh_port(
    vast: VastProvider, vast_emu: VastEmulator, clock: FakeClock
) -> None:
    created = vast.create(spec("vast", offer_id=OFFER))
    assert vast.get(created.id).status == "provisioning"  # type: ignore[union-attr]
    pod = vast.get(created.id)
    assert pod is not None and pod.status == "running" and pod.ssh_host == "198.51.100.7" and pod.ssh_port
    assert pod.created_at == clock.now()


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("running", "running"),
        ("loading", "provisioning"),
        ("stopped", "stopped"),
        ("frozen", "paused"),
        ("exited", "exited"),
        ("unknown", "unknown"),  # no heartbeat from the host: alert, never exited
        ("offline", "unknown"),
    ],
)
def test_status_mapping_keeps_unknown_and_offline_apart_from_exited(
    vast: VastProvider, vast_emu: VastEmulator, state: str, status: str
) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.set_status(pod.id, state)
    vast_emu.instances[int(pod.id)].polls_left = 99
    [listed] = vast.list_pods()
    assert listed.status == status


def test_the_list_follows_every_page(vast: VastProvider, vast_emu: VastEmulator) -> None:
    for n in range(60):
        vast_emu.add_offer(VastOfferState(20_000_000 + n, "RTX 3090", 0.2, 0.1))
        vast_emu.add_foreign_pod(f"other-{n}")
    assert len(vast.list_pods()) == 60
    assert len(vast_emu.ops("list")) == 3  # 25 + 25 + 10


def test_the_list_is_asked_for_full_rows_and_shows_which_instances_are_ours(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    ours = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.add_foreign_pod("my-notebook")
    listed = {p.id: p.managed for p in vast.list_pods()}
    assert listed[ours.id] is True and sum(listed.values()) == 1
    assert all("select_cols" not in r.query for r in vast_emu.ops("list"))  # as the official SDK asks


@pytest.mark.parametrize("end", [None, ""])
def test_the_list_ends_on_any_empty_next_token(end: str | None) -> None:
    pages = {
        None: {"success": True, "instances": [{"id": 1, "label": "a", "extra_env": []}], "next_token": "tok1"},
        "tok1": {"success": True, "instances": [{"id": 2, "label": "b", "extra_env": []}], "next_token": end},
    }
    asked: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("after_token")
        asked.append(token)
        return httpx.Response(200, json=pages[token])

    provider = VastProvider(
        VAST_KEY, url=VAST_URL, transport=httpx.MockTransport(handler), clock=FakeClock(), backoff=zero_backoff
    )
    assert [p.id for p in provider.list_pods()] == ["1", "2"]
    assert asked == [None, "tok1"]


def test_a_row_without_extra_env_raises_rather_than_reading_our_instance_as_foreign(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    vast.create(spec("vast", offer_id=OFFER))

    def handler(request: httpx.Request) -> httpx.Response:
        # What a column set without extra_env answers
        request.url = request.url.copy_merge_params({"select_cols": '["id", "label", "actual_status"]'})
        answer = vast_emu.transport().handle_request(request)
        answer.read()
        return answer

    provider = VastProvider(
        VAST_KEY, url=VAST_URL, transport=httpx.MockTransport(handler), clock=FakeClock(), backoff=zero_backoff
    )
    with pytest.raises(ProviderSchemaError, match="extra_env"):
        provider.list_pods()


def test_a_broken_pagination_raises_instead_of_returning_a_partial_list(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    vast_emu.add_foreign_pod("other")
    vast_emu.faults.add(op="list", kind="broken_pagination", times=None)
    with pytest.raises(ProviderSchemaError, match="pagination"):
        vast.list_pods()


def test_a_drifted_list_raises_never_an_empty_account(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.faults.add(op="list", kind="schema_drift")
    with pytest.raises(ProviderSchemaError):
        vast.list_pods()


def test_a_list_refused_with_http_200_raises(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.faults.add(op="list", kind="success_false")
    with pytest.raises(ProviderError, match="Something went wrong"):
        vast.list_pods()


def test_labels_alone_do_not_make_an_instance_ours(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.add_foreign_pod("gpuc-looksalike1")
    vast_emu.add_foreign_pod(None, env={OWNER_ENV: "1"})
    ours = vast.create(spec("vast", offer_id=OFFER))
    assert {p.id: p.managed for p in vast.list_pods()}[ours.id]
    assert sum(p.managed for p in vast.list_pods()) == 1


def test_a_create_that_times_out_after_commit_leaves_exactly_one_instance(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    vast_emu.faults.add(op="create", kind="timeout_after_commit")
    pod = vast.create(spec("vast", offer_id=OFFER))
    assert [i.id for i in vast_emu.alive()] == [int(pod.id)]
    assert len(vast_emu.ops("create")) == 1


def test_a_create_answered_500_after_commit_leaves_exactly_one_instance(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    vast_emu.faults.add(op="create", kind="500_after_commit")
    pod = vast.create(spec("vast", offer_id=OFFER))
    assert [i.id for i in vast_emu.alive()] == [int(pod.id)]


def test_a_create_refused_with_http_200_is_a_failure_not_a_pod(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.faults.add(op="create", kind="success_false")
    with pytest.raises(ProviderError, match="refused"):
        vast.create(spec("vast", offer_id=OFFER))
    assert vast_emu.alive() == [] and len(vast_emu.ops("create")) == 1


def test_destroy_deletes_and_confirms(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    assert vast.destroy(pod.id) == "destroyed"
    assert vast_emu.alive() == []
    assert vast_emu.ops("get")  # read back to confirm


def test_destroy_waits_for_a_slow_teardown(vast_emu: VastEmulator, clock: FakeClock) -> None:
    vast_emu.destroy_lag_polls = 2
    provider = VastProvider(VAST_KEY, url=VAST_URL, transport=vast_emu.transport(), clock=clock, backoff=zero_backoff)
    pod = provider.create(spec("vast", offer_id=OFFER))
    assert provider.destroy(pod.id) == "destroyed"
    assert len(vast_emu.ops("get")) == 3


def test_a_destroy_that_never_takes_raises(vast_emu: VastEmulator, clock: FakeClock) -> None:
    vast_emu.destroy_lag_polls = 50
    provider = VastProvider(VAST_KEY, url=VAST_URL, transport=vast_emu.transport(), clock=clock, backoff=zero_backoff)
    pod = provider.create(spec("vast", offer_id=OFFER))
    with pytest.raises(ProviderError, match="still listed"):
        provider.destroy(pod.id)


def test_destroy_of_a_gone_instance_is_success(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.vanish(pod.id)
    assert vast.destroy(pod.id) == "already_gone"
    assert vast.destroy(pod.id) == "already_gone"


def test_success_false_on_http_200_is_a_failed_destroy(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.faults.add(op="destroy", kind="success_false")
    with pytest.raises(ProviderError, match="refused"):
        vast.destroy(pod.id)
    assert len(vast_emu.alive()) == 1


def test_a_destroy_storm_of_429s_is_retried_until_it_lands(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.faults.add(op="destroy", kind="429", times=3)
    assert vast.destroy(pod.id) == "destroyed"
    assert [r.fault for r in vast_emu.ops("destroy")] == ["429", "429", "429", None]


def test_an_endless_429_storm_is_a_clear_unavailable(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast_emu.faults.add(op="list", kind="429", times=None)
    with pytest.raises(ProviderUnavailable, match="rate limited: API requests too frequent"):
        vast.list_pods()


def test_balance_is_credit_and_the_spend_of_its_instances(vast: VastProvider, vast_emu: VastEmulator) -> None:
    running = vast.create(spec("vast", offer_id=OFFER))
    stopped = vast.create(spec("vast", "run0002", offer_id="11684741"))
    vast.get(running.id), vast.get(running.id)
    vast.stop(stopped.id)
    balance = vast.balance()
    storage_only = vast_emu.instances[int(stopped.id)].storage_total_cost()
    assert balance.balance_usd == 25.0
    assert balance.spend_per_hour == pytest.approx(vast_emu.instances[int(running.id)].dph_total() + storage_only)


def test_offers_send_the_five_default_filters_and_come_back_cheapest_first(
    vast: VastProvider, vast_emu: VastEmulator
) -> None:
    offers = vast.offers("RTX_4090")
    [request] = vast_emu.ops("offers")
    query = json.loads(request.body)
    assert query["verified"] == {"eq": True} and query["reliability"] == {"gt": 0.98}
    assert query["inet_down"] == {"gt": 200.0} and query["inet_down_cost"] == {"lt": 0.01}
    assert query["storage_cost"] == {"lt": 0.3} and query["num_gpus"] == {"eq": 1}
    assert query["cuda_max_good"] == {"gte": 12.4} and query["gpu_name"] == {"eq": "RTX 4090"}
    assert query["order"] == [["dph_total", "asc"]] and "type" not in query  # on-demand: the spec's default
    assert query["direct_port_count"] == {"gte": 1}  # ssh_direct needs an open port
    assert [o.id for o in offers] == [OFFER]
    vast.offers("RTX 4090", interruptible=True)
    assert json.loads(vast_emu.ops("offers")[-1].body)["type"] == "bid"


def test_each_default_filter_can_be_loosened(vast: VastProvider) -> None:
    loose = vast.offers(
        "RTX 4090",
        min_reliability=None,
        min_inet_down=None,
        min_cuda=None,
        num_gpus=None,
    )
    assert {o.id for o in loose} == {OFFER, "11684739", "11684740", "11684745", "11684746"}
    prices = [o.price_per_hour for o in loose]
    assert prices == sorted(prices)


def test_self_destroy_uses_the_instance_key(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    environ = vast_emu.pod_environ(pod.id)
    assert environ["CONTAINER_API_KEY"] != VAST_KEY
    destroyer = VastSelfDestroyer.from_environ(environ, send=vast_emu.pod_send(), clock=FakeClock())
    assert destroyer.destroy_self() == f"destroyed instance {pod.id}"
    assert vast_emu.alive() == []


def test_self_destroy_of_an_already_gone_instance(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    environ = vast_emu.pod_environ(pod.id)
    destroyer = VastSelfDestroyer.from_environ(environ, send=vast_emu.pod_send(), clock=FakeClock())
    vast_emu.faults.add(op="destroy", kind="timeout_after_commit")
    assert destroyer.destroy_self() == f"instance {pod.id} was already gone"


def test_an_instance_key_cannot_touch_another_instance(vast: VastProvider, vast_emu: VastEmulator) -> None:
    mine = vast.create(spec("vast", offer_id=OFFER))
    other = vast.create(spec("vast", "run0002", offer_id="11684741"))
    environ = {**vast_emu.pod_environ(mine.id), "CONTAINER_ID": other.id}
    with pytest.raises(ProviderError):
        VastSelfDestroyer.from_environ(environ, send=vast_emu.pod_send(), clock=FakeClock()).destroy_self()
    assert len(vast_emu.alive()) == 2


def test_a_missing_key_says_how_to_set_it() -> None:
    with pytest.raises(ConfigError) as caught:
        VastProvider.from_settings(Settings())
    assert "VAST_API_KEY" in (caught.value.hint or "")


def test_it_works_over_real_http(vast_server: EmulatorServer, clock: FakeClock) -> None:
    env = vast_server.client_env()
    settings = Settings(vast_api_key=env["VAST_API_KEY"], vast_url=env["GPUC_VAST_URL"])  # type: ignore[arg-type]
    provider = VastProvider.from_settings(settings, clock=clock, backoff=zero_backoff)
    try:
        pod = provider.create(spec("vast"))
        assert [p.id for p in provider.list_pods()] == [pod.id]
        assert provider.balance().balance_usd == 25.0
        assert provider.destroy(pod.id) == "destroyed"
        assert provider.list_pods() == []
    finally:
        provider.close()


def test_the_url_may_be_the_host_alone(vast_server: EmulatorServer, clock: FakeClock) -> None:
    provider = VastProvider(VAST_KEY, url=vast_server.url, clock=clock, backoff=zero_backoff)
    try:
        assert provider.list_pods() == []
    finally:
        provider.close()


def test_self_destroy_falls_back_to_stop_and_says_so(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    destroyer = VastSelfDestroyer.from_environ(
        vast_emu.pod_environ(pod.id), send=vast_emu.pod_send(), clock=FakeClock()
    )
    vast_emu.faults.add(op="destroy", kind="success_false")
    said = destroyer.destroy_self()
    assert said.startswith("destroy was refused") and "stopped instance" in said and "reaper" in said
    assert isinstance(said, StoppedInstead)  # the ending turns it into a notification
    assert vast.get(pod.id).status == "stopped"  # type: ignore[union-attr]


def test_a_not_found_that_is_a_refusal_is_not_believed(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast_emu.pod_key_not_found = True  # the instance key hears "Instance not found"; the instance lives on
    destroyer = VastSelfDestroyer.from_environ(
        vast_emu.pod_environ(pod.id), send=vast_emu.pod_send(), clock=FakeClock()
    )
    said = destroyer.destroy_self()
    assert isinstance(said, StoppedInstead) and "still there" in said and "reaper" in said
    assert [r.op for r in vast_emu.requests][-3:] == ["destroy", "get", "stop"]  # it read itself first
    assert vast.get(pod.id).status == "stopped"  # type: ignore[union-attr]
    assert vast.destroy(pod.id) == "destroyed"  # the account key (the reaper's) still can


def test_a_not_found_for_an_instance_that_is_gone_is_believed(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    environ = vast_emu.pod_environ(pod.id)
    vast_emu.vanish(pod.id)
    destroyer = VastSelfDestroyer.from_environ(environ, send=vast_emu.pod_send(), clock=FakeClock())
    said = destroyer.destroy_self()
    assert said == f"instance {pod.id} was already gone" and not isinstance(said, StoppedInstead)
    assert vast_emu.ops("stop") == []


def test_the_emulator_can_point_ssh_at_a_real_endpoint(clock: FakeClock) -> None:
    emu = VastEmulator(api_key=VAST_KEY, clock=clock, boot_polls=0, ssh_endpoint=("127.0.0.1", 2222))
    provider = VastProvider(VAST_KEY, url=VAST_URL, transport=emu.transport(), clock=clock, backoff=zero_backoff)
    pod = provider.create(spec("vast", offer_id=OFFER))
    found = provider.get(pod.id)
    assert found is not None and (found.ssh_host, found.ssh_port) == ("127.0.0.1", 2222)


@pytest.mark.parametrize(("util", "busy"), [(97.0, 97.0), (0.93, 93.0), (0.0, 0.0), (None, None), (1.0, 100.0)])
def test_a_gpu_reading_that_may_be_a_fraction_is_read_as_the_busier_one(
    vast: VastProvider, vast_emu: VastEmulator, util: float | None, busy: float | None
) -> None:
    # show_instance.yaml: "GPU utilization as a fraction"; the official CLI prints it as a percent.
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast.get(pod.id), vast.get(pod.id)
    vast_emu.instances[int(pod.id)].gpu_util = util  # type: ignore[assignment]
    assert vast.get(pod.id).gpu_util_pct == busy  # type: ignore[union-attr]


def test_the_user_is_read_on_its_documented_path(vast: VastProvider, vast_emu: VastEmulator) -> None:
    vast.balance()
    assert [r.path for r in vast_emu.ops("balance")] == ["/api/v0/users/current/"]  # no redirect to follow


def test_a_read_sends_only_the_documented_id(vast: VastProvider, vast_emu: VastEmulator) -> None:
    pod = vast.create(spec("vast", offer_id=OFFER))
    vast.get(pod.id)
    assert vast_emu.ops("get")[-1].query == {}  # no `owner=me`: show_instance.yaml takes the id alone


PUBLIC = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPLANTEDpublicHalfOfTheKey gpuc@laptop"


def test_the_create_hands_the_instance_the_key_up_logs_in_with(vast: VastProvider, vast_emu: VastEmulator) -> None:
    # A new account registers no key: without this the instance would take none, and `up` could not get in.
    pod = vast.create(spec("vast", offer_id=OFFER, ssh_public_key=PUBLIC))
    assert vast_emu.instances[int(pod.id)].ssh_keys == [PUBLIC]
    [attach] = vast_emu.ops("attach_key")
    assert attach.path == f"/api/v0/instances/{pod.id}/ssh/" and json.loads(attach.body) == {"ssh_key": PUBLIC}


def test_a_key_the_instance_does_not_take_is_said_and_the_pod_kept(
    vast: VastProvider, vast_emu: VastEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    vast_emu.faults.add(op="attach_key", kind="400")
    pod = vast.create(spec("vast", offer_id=OFFER, ssh_public_key=PUBLIC))
    assert [i.id for i in vast_emu.alive()] == [int(pod.id)]  # the account's registered keys may still let us in
    assert "could not attach gpuc's ssh key" in caplog.text and PUBLIC not in caplog.text


def test_the_accounts_registered_keys_are_read_and_none_is_a_404(vast: VastProvider, vast_emu: VastEmulator) -> None:
    assert vast.registered_ssh_keys() == []  # "404: No SSH keys found for the user"
    vast_emu.ssh_keys = [PUBLIC]
    assert vast.registered_ssh_keys() == [PUBLIC]
    pod = vast.create(spec("vast", offer_id=OFFER))
    assert vast_emu.instances[int(pod.id)].ssh_keys == [PUBLIC] and vast_emu.ops("attach_key") == []


def test_the_spec_is_checked_against_vasts_bounds_before_any_call(vast: VastProvider, vast_emu: VastEmulator) -> None:
    with pytest.raises(ConfigError, match="under Vast's minimum of 8 GB"):
        vast.check_spec(spec("vast", volume_gb=5, container_disk_gb=5))
    with pytest.raises(ConfigError, match="HF_TOKEN_PATH is over 256"):
        vast.check_spec(spec("vast", env={"HF_TOKEN_PATH": "x" * 300}))
    vast.check_spec(spec("vast", interruptible=True, bid_per_gpu=0.22))
    assert vast_emu.requests == []
