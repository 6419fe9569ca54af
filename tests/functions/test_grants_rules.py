"""The grant rules that need no bucket (functions/grants.py): which prefix a registration may name, what a
re-rented attempt is given, what `/v1/status` tells `up`, and that the longest prefix still fits the claim a
pod carries in a header."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.watchdog import World, make_world

from gpuc.core import api
from gpuc.core.clock import FakeClock
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import new_watchdog_key
from gpuc.functions.claims import Claim, claim_for, read_claim
from gpuc.functions.edge import HttpError
from gpuc.functions.grants import checked_results_at, results_at_of_run, said_scope
from gpuc.functions.store import StoredPod
from gpuc.instance_side.signer import valid_claim


@pytest.fixture
def granting(home: Path, clock: FakeClock) -> World:
    return make_world(home, clock, results_bucket="s3://results/runs", s3_access_key_id=SecretStr("AKIAGRANTS"),
                      s3_secret_access_key=SecretStr("grant-secret"))  # fmt: skip


def test_a_registration_names_its_own_run_inside_the_watchdogs_bucket(granting: World) -> None:
    settings = granting.settings
    assert checked_results_at(settings, "s3://results/runs/exp/run01", "exp", "run01") == "s3://results/runs/exp/run01"
    assert checked_results_at(settings, "s3://results/runs/team/exp/run01", "exp", "run01").endswith("team/exp/run01")
    for url, run in (("s3://results/runs/exp/run01", "run02"), ("s3://results/other/exp/run01", "run01"),
                     ("s3://elsewhere/runs/exp/run01", "run01"), ("s3://results/runs/xexp/run01", "run01"),
                     ("s3://results/runsx/exp/run01", "run01"), ("s3://results/runs/../exp/run01", "run01"),
                     ("s3://results/runs/ümlaut/exp/run01", "run01")):  # fmt: skip
        with pytest.raises(HttpError) as refused:
            checked_results_at(settings, url, "exp", run)
        assert refused.value.status == 400


def test_a_watchdog_without_the_key_refuses_an_s3_registration_and_says_how(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock, results_bucket="s3://results/runs")  # a bucket but no key
    request = api.RegisterRequest(pod_id="p1", provider=world.provider.name, name="gpuc-run01", experiment="exp",
                                  key="0" * 64, results_at="s3://results/runs/exp/run01")  # fmt: skip
    answer = world.admin("POST", "/v1/pods", request)
    assert answer.status == 400 and "holds no key" in answer.body["error"] and "gpuc watchdog" in answer.body["hint"]
    assert world.store.get_pod("p1") is None
    assert said_scope(world.settings) is None


def test_status_tells_up_where_pods_are_granted_never_the_key(granting: World) -> None:
    body = granting.admin("GET", "/v1/status").body
    assert body["results_grant"] == {"bucket": "s3://results/runs", "endpoint_url": None}
    assert "grant-secret" not in str(body) and "AKIAGRANTS" not in str(body)


def test_a_re_rented_attempt_is_granted_its_runs_prefix_or_nothing(granting: World) -> None:
    settings = granting.settings
    assert results_at_of_run(settings, "s3://results/runs/exp/run01", "exp", "run01") == "s3://results/runs/exp/run01"
    assert results_at_of_run(settings, "file:///tmp/bucket/exp/run01", "exp", "run01") is None
    assert results_at_of_run(settings, "s3://elsewhere/exp/run01", "exp", "run01") is None


def test_the_longest_prefix_still_fits_the_claim_the_pod_carries(home: Path, clock: FakeClock) -> None:
    world = make_world(home, clock, watchdog_key=SecretStr(new_watchdog_key()))
    longest = "s3://" + "b" * 63 + "/" + "p" * (api.RESULTS_AT_MAX - 5 - 64)
    assert len(longest) == api.RESULTS_AT_MAX

    when = 1.7123456789012345e9
    biggest = StoredPod(pod_id="i" * 128, provider="v" * 32, name="gpuc-" + "r" * 123, experiment="e" * 64,
                        registered_at=when, lease_until=when, kept_until=when, started_at=when,
                        price_per_hour=123.456789012345, results_at=longest)  # fmt: skip
    claim = claim_for(world.deps, biggest, when, when)
    assert claim is not None and valid_claim(claim), "the pod would drop it, and a lost store would not know it"
    read = read_claim(world.deps, claim)
    assert isinstance(read, Claim) and read.results_at == longest
