"""The reaper on AWS has no .env: `gpuc watchdog deploy` passes the budget settings as stack parameters into
the reaper function's environment, where the functions' own load_settings reads them (moto, server mode)."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner
from test_deploy import user  # noqa: F401

from gpuc.client.watchdog.commands import watchdog
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings
from gpuc.functions.deployplan import Plan, budget_parameters

pytestmark = pytest.mark.filterwarnings("ignore:Tried to parse AWS:UserWarning")


def reaper_env(stack: str) -> dict[str, str]:
    config = boto3.client("lambda").get_function_configuration(FunctionName=f"{stack}-reaper")
    return dict(config["Environment"]["Variables"])


def test_the_budget_reaches_the_reaper_functions_settings(user: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811 (the fixture)
    monkeypatch.setenv("GPUC_MONTHLY_BUDGET", "50")
    monkeypatch.setenv("GPUC_BUDGET_PULL_IN_S", "900")
    result = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gb"])
    assert result.exit_code == 0, result.output
    env = reaper_env("gb")
    assert (env["GPUC_MONTHLY_BUDGET"], env["GPUC_BUDGET_PULL_IN_S"], env["GPUC_BUDGET_ALERT_FRACTION"]) == (
        "50",
        "900",
        "0.8",
    )
    settings = load_settings({**env, "GPUC_ENV_FILE": str(user / "none.env")})
    assert (settings.monthly_budget, settings.budget_pull_in_s, settings.budget_alert_fraction) == (50.0, 900.0, 0.8)


def test_no_budget_is_an_empty_parameter_that_reads_as_none(user: Path) -> None:  # noqa: F811 (the fixture)
    result = CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", "--stack-name", "gn"])
    assert result.exit_code == 0, result.output
    env = reaper_env("gn")
    assert env["GPUC_MONTHLY_BUDGET"] == ""
    assert load_settings({**env, "GPUC_ENV_FILE": str(user / "none.env")}).monthly_budget is None


def test_the_plan_says_the_budget_and_writes_plain_decimals() -> None:
    plan = Plan(
        "us-east-1",
        "s",
        "/p",
        "runpod",
        "python3.11",
        "x86_64",
        budget=budget_parameters(Settings(monthly_budget=1e20)),
    )
    assert plan.budget["MonthlyBudget"] == "100000000000000000000"  # the template's pattern takes no exponent
    assert any("monthly budget: $100,000,000,000,000,000,000.00" in line for line in plan.describe())
    unset = Plan("us-east-1", "s", "/p", "runpod", "python3.11", "x86_64", budget=budget_parameters(Settings()))
    assert any("monthly budget: none" in line for line in unset.describe())
