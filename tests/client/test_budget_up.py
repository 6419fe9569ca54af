"""`up` refuses, before any money is spent, a pod whose worst case (price x --max-hours) would cross the
month's budget (GPUC_MONTHLY_BUDGET) or the experiment's (GPUC_EXPERIMENT_BUDGET): the ledger's spend this
month plus the live burn of the pods the watchdog watches. The message names the figures and the ways out;
--over-budget rents anyway; --dry-run shows the budget line; a pod with no price is never counted as $0."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.ctx import StatusView
from fakes.up import Created, FakeProvider, HealthyWatchdog, make_deps, nothing_spent, runpod_4090
from test_plan import (  # rented: the fixture, for `budgeted`
    opts,
    rented,  # noqa: F401
)

from gpuc.client.context import Ctx
from gpuc.client.pods.up import up
from gpuc.core.api import PodRecord, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError, SafetyRefusal
from gpuc.core.ledger.store import Ledger
from gpuc.core.settings import Settings
from gpuc.core.settingsload import load_settings

HOUR = 3600.0
NOW = FakeClock().now()  # make_deps' clock, where it starts (2026-09-21T14:13:20Z)


class WatchingWatchdog(HealthyWatchdog):
    """The watchdog, reachable, watching these pods."""

    def __init__(self, clock: FakeClock, pods: list[PodRecord]) -> None:
        super().__init__(clock)
        self.pods = pods

    def status(self) -> StatusResponse:
        return super().status().model_copy(update={"pods": list(self.pods)})


@pytest.fixture
def budgeted(rented: Settings) -> Settings:  # noqa: F811
    """test_plan's rented setup, with a $50 month."""
    return rented.with_overrides(monthly_budget=50.0)


def world(settings: Settings, provider: FakeProvider, lines: list[str], *pods: PodRecord) -> Ctx:
    deps = make_deps(settings, provider, lines)
    deps.watchdog = WatchingWatchdog(deps.clock, list(pods))  # type: ignore[arg-type, assignment]
    return deps


def spent(deps: Ctx, usd: float, experiment: str = "exp1", hours: float = 10.0, pod_id: str = "old1") -> None:
    """A closed ledger row this month that cost `usd`."""
    now = deps.clock.now()
    book = Ledger(deps.settings.ledger)
    book.start(
        pod_id,
        provider="runpod",
        experiment=experiment,
        gpu="RTX 4090",
        price_per_hour=usd / hours,
        start_ts=now - 2 * 24 * HOUR,
    )
    book.end(pod_id, end_ts=now - 2 * 24 * HOUR + hours * HOUR)


def live(pod_id: str, now: float, hours: float, price: float | None, experiment: str = "exp1") -> PodRecord:
    return PodRecord(
        pod_id=pod_id,
        provider="runpod",
        name=f"gpuc-{pod_id}",
        experiment=experiment,
        price_per_hour=price,
        started_at=now - hours * HOUR,
        registered_at=now - hours * HOUR,
    )


def test_up_refuses_a_pod_whose_worst_case_crosses_the_budget_naming_the_figures(budgeted: Settings) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = world(budgeted, provider, lines)
    spent(deps, 42.0)  # 42 + 8.88 > 50
    with pytest.raises(SafetyRefusal) as caught:
        up(opts(), deps)
    message, hint = caught.value.message, caught.value.hint or ""
    assert "the monthly budget would be crossed" in message
    assert "$42.00 spent of $50.00" in message and "this pod's worst case is $8.88" in message
    assert "$50.88 > $50.00" in message
    assert "--max-hours 10h48m fits" in hint and "--over-budget" in hint and "GPUC_MONTHLY_BUDGET" in hint
    assert str(budgeted.env_file) in hint
    assert nothing_spent(deps, provider)


def test_over_budget_rents_anyway_and_fewer_hours_fit(budgeted: Settings) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = world(budgeted, provider, lines)
    spent(deps, 42.0)
    with pytest.raises(Created):
        up(opts(over_budget=True), deps)
    assert any("renting anyway (--over-budget)" in line for line in lines)
    assert not any("already spent" in line for line in lines)
    with pytest.raises(Created):
        up(opts(max_hours=10.8), deps)  # what the hint said fits
    assert len(provider.created) == 2


def test_over_budget_on_a_spent_month_says_the_watchdog_will_pull_it_in(budgeted: Settings) -> None:
    lines: list[str] = []
    deps = world(budgeted, runpod_4090(), lines)
    spent(deps, 50.0)
    with pytest.raises(Created):
        up(opts(over_budget=True), deps)
    assert any("already spent: the watchdog pulls this pod's deadline in to 30 min" in line for line in lines)


def test_the_live_burn_of_running_pods_counts(budgeted: Settings) -> None:
    provider = runpod_4090()
    lines: list[str] = []
    deps = world(budgeted, provider, lines, live("run1", NOW, 10.0, 2.0))  # $20 so far
    spent(deps, 25.0)  # 25 + 20 + 8.88 > 50; without the running pod it would fit
    with pytest.raises(SafetyRefusal) as caught:
        up(opts(), deps)
    assert "$20.00 running now (1 pod(s), $2.00/h)" in caught.value.message
    assert nothing_spent(deps, provider)
    calm = world(budgeted, runpod_4090(), [])
    with pytest.raises(Created):
        up(opts(), calm)


def test_the_experiment_cap_counts_that_experiment_only(budgeted: Settings) -> None:
    settings = budgeted.with_overrides(monthly_budget=None, experiment_budget=10.0)
    provider = runpod_4090()
    deps = world(settings, provider, [])
    spent(deps, 30.0, experiment="other", pod_id="o1")  # another experiment's money
    with pytest.raises(Created):
        up(opts(), deps)
    spent(deps, 2.0, experiment="exp1", pod_id="e1")  # 2 + 8.88 > 10
    with pytest.raises(SafetyRefusal) as caught:
        up(opts(), deps)
    assert "experiment exp1's budget would be crossed" in caught.value.message
    assert "GPUC_EXPERIMENT_BUDGET" in (caught.value.hint or "")


def test_a_pod_with_no_price_is_unknown_not_zero(budgeted: Settings) -> None:
    lines: list[str] = []
    deps = world(budgeted, runpod_4090(), lines, live("free1", NOW, 5.0, None))
    with pytest.raises(Created):
        up(opts(), deps)
    line = next(line for line in lines if line.startswith("budget: the monthly budget"))
    assert "1 pod(s) UNKNOWN, not counted: free1 (no price)" in line


def test_a_new_pod_with_no_price_cannot_be_weighed_and_is_refused(budgeted: Settings) -> None:
    provider = FakeProvider("runpod")  # lists no offer: the price is unknown
    deps = world(budgeted, provider, [])
    with pytest.raises(SafetyRefusal) as caught:
        up(opts(), deps)
    assert "price is unknown" in caught.value.message and "--price" in (caught.value.hint or "")
    assert nothing_spent(deps, provider)
    with pytest.raises(Created):
        up(opts(price_per_hour=0.5), deps)


def test_without_a_budget_up_says_nothing_about_one(budgeted: Settings) -> None:
    lines: list[str] = []
    deps = world(budgeted.with_overrides(monthly_budget=None), runpod_4090(), lines)
    spent(deps, 1000.0)
    with pytest.raises(Created):
        up(opts(), deps)
    assert not any("budget" in line for line in lines if not line.startswith("results: "))  # it names tmp_path


def test_dry_run_shows_the_budget_line_and_refuses_nothing(budgeted: Settings) -> None:
    lines: list[str] = []
    provider = runpod_4090()
    deps = world(budgeted, provider, lines)
    spent(deps, 42.0)
    assert up(opts(dry_run=True), deps) is None
    line = next(line for line in lines if "budget: the monthly budget" in line)
    assert "OVER" in line and "$42.00 spent of $50.00" in line and "(up would refuse)" in line
    assert nothing_spent(deps, provider)


def test_dry_run_without_a_budget_never_asks_the_watchdog(budgeted: Settings) -> None:
    deps = world(budgeted.with_overrides(monthly_budget=None), runpod_4090(), [])
    deps.watchdog = Unreachable()  # type: ignore[assignment]
    assert up(opts(dry_run=True), deps) is None


class Unreachable(StatusView):
    def status(self) -> StatusResponse:
        raise AssertionError("a dry run without a budget asked the watchdog")


def test_a_past_month_does_not_count_and_a_straddling_pod_counts_its_part(budgeted: Settings) -> None:
    provider = runpod_4090()
    deps = world(budgeted, provider, [])
    now = deps.clock.now()  # 2026-09-21T14:13:20Z
    book = Ledger(budgeted.ledger)
    book.start("aug", provider="runpod", experiment="exp1", gpu="x", price_per_hour=10.0, start_ts=now - 30 * 24 * HOUR)
    book.end("aug", end_ts=now - 25 * 24 * HOUR)  # $1200, all in August
    straddle_start = 1788220800.0 - 10 * HOUR  # 2026-09-01T00:00Z minus 10 h
    book.start("edge", provider="runpod", experiment="exp1", gpu="x", price_per_hour=1.0, start_ts=straddle_start)
    book.end("edge", end_ts=straddle_start + 50 * HOUR)  # 40 h of it in September: $40
    lines: list[str] = []
    deps.echo = lines.append
    with pytest.raises(Created):
        up(opts(max_hours=1), deps)  # 40 + 0.74 < 50
    assert any("$40.00 spent of $50.00" in line for line in lines)


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("GPUC_MONTHLY_BUDGET", "-5", "greater than 0"),
        ("GPUC_MONTHLY_BUDGET", "inf", "finite"),
        ("GPUC_MONTHLY_BUDGET", "fifty", "expected a number"),
        ("GPUC_EXPERIMENT_BUDGET", "0", "greater than 0"),
        ("GPUC_BUDGET_ALERT_FRACTION", "1.5", "at most 1"),
        ("GPUC_BUDGET_PULL_IN_S", "nan", "NaN"),
    ],
)
def test_a_bad_budget_setting_names_its_variable_and_the_file(
    tmp_path: Path, variable: str, value: str, why: str
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(f"{variable}={value}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"GPUC_HOME": str(tmp_path / "home"), "GPUC_ENV_FILE": str(env_file)})
    assert variable in caught.value.message and why in caught.value.message
    assert f"fix {variable} in {env_file}" == caught.value.hint
    with pytest.raises(ConfigError) as from_env:
        load_settings({"GPUC_HOME": str(tmp_path / "home"), "GPUC_ENV_FILE": str(tmp_path / "no.env"), variable: value})
    assert "your environment" in (from_env.value.hint or "")
