from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fakes.money import FakeProvider, unreachable
from fakes.providers import RUNPOD_KEY, runpod_on

from gpuc.client.context import Ctx
from gpuc.client.money.balance import balance_warnings, check_balances, provider_factories
from gpuc.client.money.commands import balance
from gpuc.client.money.render import render_balance
from gpuc.client.setup.doctor import check_balance
from gpuc.core.clock import FakeClock
from gpuc.core.models import Balance
from gpuc.core.providers.registry import has_key, keyed_providers
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.emulators.common import EmuResponse
from gpuc.testkit.emulators.runpod import RunPodEmulator

SETTINGS = Settings(balance_cap_usd=20.0, balance_low_usd=5.0)


def fake(name: str, balance: float, spend: float) -> FakeProvider:
    return FakeProvider(name, balance=Balance(provider=name, balance_usd=balance, spend_per_hour=spend))


def test_it_warns_above_the_cap_and_below_the_low_mark() -> None:
    above = balance_warnings(Balance(provider="vast", balance_usd=35.0, spend_per_hour=0), 20.0, 5.0)
    below = balance_warnings(Balance(provider="vast", balance_usd=3.0, spend_per_hour=0), 20.0, 5.0)
    inside = balance_warnings(Balance(provider="vast", balance_usd=12.0, spend_per_hour=0), 20.0, 5.0)
    assert len(above) == 1 and "above the $20.00 cap" in above[0]
    assert len(below) == 1 and "below the $5.00 low mark" in below[0]
    assert inside == []


def test_each_provider_gets_a_line_with_hours_left() -> None:
    runpod = fake("runpod", 12.0, 0.74)
    report = check_balances(
        SETTINGS, {"local": lambda: fake("local", 25.0, 0.0), "runpod": lambda: runpod, "vast": None}
    )
    lines = {line.provider: line for line in report.providers}
    assert lines["runpod"].hours_left == pytest.approx(12.0 / 0.74) and lines["runpod"].warnings == []
    assert lines["local"].hours_left is None and lines["local"].warnings  # 25 > 20: warned like any account
    assert not lines["vast"].configured and lines["vast"].error is None
    assert lines["vast"].hint == "set VAST_API_KEY in .env to see it"
    assert runpod.closed
    assert report.warnings == [f"local: {w}" for w in lines["local"].warnings]


def test_a_provider_that_cannot_answer_is_reported_not_fatal() -> None:
    report = check_balances(SETTINGS, {"vast": lambda: FakeProvider("vast", fail=unreachable("vast"))})
    (line,) = report.providers
    assert line.configured and line.balance_usd is None
    assert line.error and "timed out" in line.error and line.hint == "try again later"


def test_a_provider_is_configured_by_its_key() -> None:
    keyed = Settings(runpod_api_key=SecretStr("rpa_" + "x" * 30), vast_api_key=SecretStr(""))
    assert has_key("local", keyed) and has_key("runpod", keyed) and not has_key("vast", keyed)
    assert keyed_providers(keyed) == ["runpod"]
    factories = provider_factories(Ctx(keyed))
    assert factories["vast"] is None and factories["runpod"] is not None and factories["local"] is not None


VAST_KEYED = SETTINGS.with_overrides(vast_api_key=SecretStr("vast-key-0123456789"))


def test_the_cli_prints_json_with_the_documented_fields() -> None:
    providers = {"local": fake("local", 10.0, 0.44), "vast": fake("vast", 2.0, 0.0)}
    result = CliRunner().invoke(balance, ["--json"], obj=Ctx(VAST_KEYED, providers=providers))
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert set(body) == {"cap_usd", "low_usd", "advice", "providers"}
    assert [p["provider"] for p in body["providers"]] == ["local", "vast"]  # runpod: not in use, no line
    fields = {
        "provider",
        "configured",
        "balance_usd",
        "spend_per_hour",
        "hours_left",
        "spend_limit",
        "spend_rate_source",
        "notify",
        "warnings",
        "error",
        "hint",
        "later",
    }
    assert all(set(p) == fields for p in body["providers"])
    assert "below" in body["providers"][1]["warnings"][0]
    help_text = CliRunner().invoke(balance, ["--help"]).output
    assert all(f in help_text for f in fields)


def test_the_cli_prints_a_table_with_warnings() -> None:
    providers = {"local": fake("local", 10.0, 0.0), "vast": fake("vast", 30.0, 0.5)}
    result = CliRunner().invoke(balance, [], obj=Ctx(VAST_KEYED, providers=providers))
    assert result.exit_code == 0, result.output
    assert "runpod" not in result.output
    assert "vast         30.00    0.500       60.0" in result.output
    assert "warning: vast: balance $30.00 is above the $20.00 cap" in result.output


def test_the_configured_provider_without_a_key_is_listed_and_an_unused_one_is_not() -> None:
    runpod_user = SETTINGS.with_overrides(provider="runpod")
    result = CliRunner().invoke(balance, ["--json"], obj=Ctx(runpod_user, providers={}))
    assert result.exit_code == 0, result.output
    lines = json.loads(result.output)["providers"]
    assert [(p["provider"], p["configured"]) for p in lines] == [("runpod", False)]


# -- RunPod's GraphQL rate limit: "later", never "refused" ---------------------------------------------------


def emulated_runpod(emu: RunPodEmulator, clock: FakeClock) -> RunPodProvider:
    return runpod_on(emu, clock)


@pytest.mark.parametrize(
    "answer",
    ["429", "200-words"],
    ids=["http-429", "graphql-error-in-words"],
)
def test_a_rate_limited_balance_read_is_not_read_now_never_an_error_or_a_bad_key(clock: FakeClock, answer: str) -> None:
    """GraphQL, where RunPod's balance lives, has been rate limited in stages since 2026-09-17."""
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)
    if answer == "429":
        emu.faults.add(op="balance", kind="429", times=None)
    else:  # how RunPod words it is unpublished: an HTTP 200 with the words is read the same way
        emu.fault_answer = lambda op, kind: EmuResponse.json(200, {"errors": [{"message": "Too many requests"}]})  # type: ignore[method-assign]
        emu.faults.add(op="balance", kind="success_false", times=None)
    report = check_balances(SETTINGS, {"runpod": lambda: emulated_runpod(emu, clock)})
    (line,) = report.providers
    assert line.later and line.balance_usd is None and line.error is not None
    assert line.error.startswith("not read now") and "key" not in line.error.lower().replace("your key is fine", "")
    assert "try again" in (line.hint or "") and "nothing was refused" in (line.hint or "")
    shown = render_balance(report)
    assert "runpod   not read now" in shown and "error:" not in shown
    [check] = check_balance(report)
    assert check.status == "warn" and check.name == "balance runpod"  # a ✗ would say the account is broken
    assert len(emu.ops("balance")) >= 1 and not emu.ops("create")


def test_a_refused_key_is_still_an_error(clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)
    emu.faults.add(op="balance", kind="401", times=None)
    (line,) = check_balances(SETTINGS, {"runpod": lambda: emulated_runpod(emu, clock)}).providers
    assert not line.later and line.error and "RUNPOD_API_KEY" in (line.hint or "")
