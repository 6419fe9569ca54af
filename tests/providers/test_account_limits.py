"""The provider accounts' own limits, as `balance` and `doctor` show them: RunPod's `myself { spendLimit
currentSpendPerHr notify* }` (providers.md R5, the exact runpodctl query) read from the emulator, which
answers those fields and refuses what the reference does not list; Vast has no spend limit and no spend-rate
field (V5), so its rate is computed from the instances, and said so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes.providers import spec
from test_emulators_strict import graphql, messages

from gpuc.client.money.balance import BalanceLine, BalanceReport, account_checks, caps_text, check_balances
from gpuc.client.money.render import render_balance as render
from gpuc.client.setup.doctor import DoctorDeps, run_checks, run_git
from gpuc.core.api import StatusResponse
from gpuc.core.errors import WatchdogError
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.providers.runpod_graphql import BALANCE_QUERY
from gpuc.core.providers.vast import VastProvider
from gpuc.core.settings import Settings
from gpuc.testkit.emulators.runpod import RunPodEmulator

# providers.md R5, CONFIRMED: runpodctl's GetUser query, verbatim.
R5_FIELDS = {
    "id",
    "email",
    "clientBalance",
    "currentSpendPerHr",
    "spendLimit",
    "notifyPodsStale",
    "notifyPodsGeneral",
    "notifyLowBalance",
}
OFFER = "11684738"


def test_the_balance_query_asks_only_the_references_fields() -> None:
    inner = re.search(r"myself \{ (.*?) \}", BALANCE_QUERY)
    assert inner is not None
    asked = set(inner.group(1).split())
    assert asked <= R5_FIELDS and {"spendLimit", "currentSpendPerHr", "notifyPodsStale", "notifyLowBalance"} <= asked


def test_the_emulator_answers_the_r5_fields_and_refuses_others(runpod_emu: RunPodEmulator) -> None:
    answer = graphql(runpod_emu, "query { myself { " + " ".join(sorted(R5_FIELDS)) + " } }")
    assert answer.status == 200 and set(answer.decoded()["data"]["myself"]) == R5_FIELDS
    refused = graphql(runpod_emu, "query { myself { spendRate } }")  # REST v2's account limits, not GraphQL's
    assert refused.status == 400 and messages(refused) == ['Cannot query field "spendRate" on type "User".']


def test_runpod_shows_its_spend_limit_rate_and_notifications(
    runpod: RunPodProvider, runpod_emu: RunPodEmulator
) -> None:
    runpod.create(spec("runpod"))
    balance = runpod.balance()
    assert (balance.spend_limit, balance.spend_per_hour, balance.spend_rate_source) == (80.0, 0.74, "provider")
    assert balance.notify == {"notifyPodsStale": True, "notifyPodsGeneral": True, "notifyLowBalance": True}
    runpod_emu.notify["notifyLowBalance"] = False
    assert runpod.balance().notify["notifyLowBalance"] is False


def test_vast_has_no_limit_and_a_computed_rate(vast: VastProvider) -> None:
    vast.create(spec("vast", offer_id=OFFER))
    balance = vast.balance()
    assert (balance.spend_limit, balance.spend_rate_source, balance.notify) == (None, "computed", {})
    assert balance.spend_per_hour > 0


@pytest.fixture
def both(runpod: RunPodProvider, vast: VastProvider, runpod_emu: RunPodEmulator) -> BalanceReport:
    runpod.create(spec("runpod"))
    vast.create(spec("vast", offer_id=OFFER))
    runpod_emu.notify["notifyPodsStale"] = False
    return check_balances(Settings(), {"runpod": lambda: runpod, "vast": lambda: vast})


def test_balance_shows_the_limits_warns_of_an_email_off_and_says_the_hardest_cap_once(both: BalanceReport) -> None:
    text = render(both)
    assert "runpod: spend limit 80 (checked when a pod starts; it cannot stop a running pod)" in text
    assert "vast: no spend limit and no spend-rate field at the provider" in text and "dph_total" in text
    assert "warning: runpod: runpod's own stale-pod emails are OFF (notifyPodsStale)" in text
    assert text.count("prepaid balance with auto-pay OFF") == 1
    assert "STOP every pod" in text and "stopped disks keep billing" in text


def test_doctor_shows_the_limits_and_the_caps_once(both: BalanceReport, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, monthly_budget=40.0)
    deps = DoctorDeps(settings, tmp_path, run_git, status=unreachable, balances=lambda: both)
    checks = {c.name: c for c in run_checks(deps, tmp_path, environ={})}
    runpod, vast = checks["account limits runpod"], checks["account limits vast"]
    assert runpod.status == "warn" and "notifyPodsStale" in runpod.detail and "turn them on" in (runpod.fix or "")
    assert vast.status == "ok" and "no spend limit" in vast.detail
    caps = checks["money caps"]
    assert caps.status == "ok" and "GPUC_MONTHLY_BUDGET $40.00" in caps.detail  # said, not nagged
    assert sum("prepaid balance with auto-pay OFF" in c.detail for c in checks.values()) == 1
    assert "not set" in caps_text(Settings())
    unset = {c["name"]: c for c in account_checks(both, Settings())}["money caps"]
    assert unset["status"] == "warn" and "GPUC_MONTHLY_BUDGET=" in (unset["fix"] or "")  # a line to add, not a ✓


def unreachable() -> StatusResponse:
    raise WatchdogError("connection refused")


def test_an_unread_account_shows_no_limits() -> None:
    report = BalanceReport(
        cap_usd=20, low_usd=5, providers=[BalanceLine(provider="runpod", configured=True, error="timed out")]
    )
    assert [c["name"] for c in account_checks(report, Settings())] == ["money caps"]
