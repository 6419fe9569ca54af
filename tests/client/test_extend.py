"""`gpuc extend` and `gpuc keep` move a pod's deadline within the user's cap, against the real local
watchdog, and say in words when the pod now ends; `up` refuses a --max-hours above the cap before renting;
the price line, `doctor` and `doctor --live` name the layers that hold the deadline on every provider."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuc.client.command_table import COMMANDS
from gpuc.client.context import Ctx
from gpuc.client.pods.commands import extend, keep
from gpuc.client.pods.lease import extend as extend_words
from gpuc.client.pods.lease import parse_when
from gpuc.client.pods.plan import Quote, UpOptions, before_create, cost_line
from gpuc.client.runs import RunStore
from gpuc.client.setup.doctor import check_deadline
from gpuc.client.setup.doctor_live import live_report
from gpuc.core.api import AttemptRecord, DeadlineAnswer, DeadlineRequest, RegisterRequest, RunRecovery
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError
from gpuc.core.providers.http import zero_backoff
from gpuc.core.providers.runpod import RunPodProvider
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import derive_key, new_token
from gpuc.core.watchdog_client import WatchdogClient
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.testkit.emulators.runpod import RunPodEmulator

ADMIN = "admin-token-PLANTED-9a8b7c6d"
HOUR = 3600.0
Served = tuple[ServerHandle, dict[str, str]]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A local watchdog with two pods: lp-1 started now (deadline in 1 h), lp-old started 40 h ago."""
    home = tmp_path / "home"
    settings = Settings(home=home, env_file=tmp_path / "none.env", admin_token=SecretStr(ADMIN))
    server = start_in_thread(settings, port=0)
    runs = RunStore(home)
    now = server.deps.clock.now()
    with WatchdogClient(settings.with_overrides(watchdog_url=server.url)) as client:
        for pod_id, started in (("lp-1", now), ("lp-old", now - 40 * HOUR)):
            runs.record_intent(pod_id, f"gpuc-{pod_id}", "local", "exp", 1.0)
            runs.set_pod_id(pod_id, pod_id)
            client.register(
                RegisterRequest(
                    pod_id=pod_id,
                    provider="local",
                    name=f"gpuc-{pod_id}",
                    experiment="exp",
                    key=derive_key(new_token()),
                    started_at=started,
                    deadline_at=started + HOUR,
                    price_per_hour=0.5 if pod_id == "lp-1" else None,
                )
            )
    env = {"GPUC_HOME": str(home), "GPUC_WATCHDOG_URL": server.url, "GPUC_ADMIN_TOKEN": ADMIN}
    try:
        yield server, env
    finally:
        server.stop()


def stored_deadline(server: ServerHandle, pod_id: str) -> float:
    rec = server.deps.store.get_pod(pod_id)
    assert rec is not None and rec.deadline_at is not None
    return rec.deadline_at


def test_extend_moves_the_deadline_and_says_when_the_pod_now_ends(served: Served) -> None:
    server, env = served
    before = stored_deadline(server, "lp-1")
    result = CliRunner().invoke(extend, ["lp-1", "2h"], env=env)
    assert result.exit_code == 0, result.output
    assert stored_deadline(server, "lp-1") == before + 2 * HOUR
    day = r"(\d{4}-\d\d-\d\d )?"  # another day's date, near midnight
    words = rf"lp-1: now ends at {day}\d\d:\d\d UTC \(3 h from now\), its deadline \(was {day}\d\d:\d\d UTC\)\n"
    # What the new deadline puts at stake: $0.50/h from its start (now) to 3 h from now, and what it spent.
    worst = (
        r"  worst case now \$1\.50 \(was \$0\.5000\): \$0\.5000/h from its start to its deadline; "
        r"\$0\.0\d{3} so far \(\d+s at \$0\.5000/h\)\n"
    )
    assert re.fullmatch(words + worst, result.stderr), result.stderr
    assert result.stdout == "", "what gpuc did is talk: stderr"


def test_extend_without_a_price_on_record_says_the_worst_case_is_not_known(served: Served) -> None:
    _, env = served
    result = CliRunner().invoke(extend, ["lp-old", "1h"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == "  its worst case is not known: no price on record (gpuc ledger)"


def test_extend_past_the_cap_is_refused_in_words_and_nothing_moves(served: Served) -> None:
    server, env = served
    before = stored_deadline(server, "lp-old")
    result = CliRunner().invoke(extend, ["lp-old", "10h"], env=env)
    error = result.exception
    assert isinstance(error, ConfigError), result.output
    assert "it may live at most 48 h from its start" in error.message and "(8 h from now)" in error.message
    assert error.hint is not None and "gpuc extend lp-old --to " in error.hint
    assert "GPUC_MAX_LIFETIME_HOURS" in error.hint
    assert stored_deadline(server, "lp-old") == before


def test_extend_to_a_time(served: Served) -> None:
    server, env = served
    result = CliRunner().invoke(extend, ["lp-1", "--to", "2099-01-01T00:00Z"], env=env)
    assert isinstance(result.exception, ConfigError)  # far past the cap
    now = server.deps.clock.now()
    result = CliRunner().invoke(extend, ["lp-1", "--to", _iso(now + 5 * HOUR)], env=env)
    assert result.exit_code == 0, result.output
    assert abs(stored_deadline(server, "lp-1") - (now + 5 * HOUR)) < 60


def test_extend_needs_exactly_one_of_a_duration_and_a_time_in_range(served: Served) -> None:
    _, env = served
    wrong = [[], ["2h", "--to", "18:00"], ["0s"], ["400d"], ["--to", "2200-01-01T00:00Z"]]
    for args in (["lp-1", *w] for w in wrong):
        result = CliRunner().invoke(extend, args, env=env)
        assert isinstance(result.exception, ConfigError), result.output


def test_keep_pulls_a_sooner_deadline_up_to_the_lease(served: Served) -> None:
    server, env = served
    result = CliRunner().invoke(keep, ["lp-1", "--for", "3h"], env=env)
    assert result.exit_code == 0, result.output
    now = server.deps.clock.now()
    assert abs(stored_deadline(server, "lp-1") - (now + 3 * HOUR)) < 60
    assert "lp-1: now ends at " in result.output.splitlines()[1]


def test_keep_beyond_the_cap_says_when_the_pod_still_ends(served: Served) -> None:
    server, env = served
    result = CliRunner().invoke(keep, ["lp-old", "--for", "10h"], env=env)
    assert result.exit_code == 0, result.output
    lease, ends = result.output.splitlines()
    assert lease.startswith("lp-old: idle destroy suspended until ")
    assert ends.startswith("lp-old: its deadline can go no later than ") and "lease or not" in ends
    rec = server.deps.store.get_pod("lp-old")
    assert rec is not None and rec.started_at is not None
    assert stored_deadline(server, "lp-old") == rec.started_at + 48 * HOUR


def test_parse_when_takes_the_next_hh_mm_in_utc() -> None:
    now = 1_790_000_000.0  # 2026-09-21 14:13:20 UTC
    midnight = now - now % 86400
    assert parse_when("15:00", now) == midnight + 15 * HOUR
    assert parse_when("14:00", now) == midnight + 38 * HOUR  # passed today: tomorrow's
    with pytest.raises(ConfigError, match="no time zone"):
        parse_when("2026-09-21T18:00", now)
    with pytest.raises(ConfigError, match="is not a time"):
        parse_when("soon", now)


# -- up ---------------------------------------------------------------------------------------------------


def test_up_refuses_max_hours_above_the_cap_before_renting(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", env_file=tmp_path / "none.env", max_lifetime_hours=24)
    deps = Ctx(settings, echo=lambda _: None)
    with pytest.raises(ConfigError, match=r"--max-hours 30 is not within 0 < h <= 24") as caught:
        before_create(UpOptions(experiment="x", max_hours=30), deps)
    assert caught.value.hint is not None and "--max-hours 24" in caught.value.hint
    before_create(UpOptions(experiment="x", max_hours=24), deps)  # at the cap: fine


@pytest.mark.parametrize("provider", ["runpod", "vast", "local"])
def test_the_price_line_names_the_layers_that_hold_on_every_provider(provider: str) -> None:
    opts = UpOptions(experiment="x", provider=provider, max_hours=10)
    now = 1_790_000_000.0
    priced = cost_line(Quote(0.5, "listed"), opts, "RTX 4090", now)
    assert "at most $5.00 by the deadline (--max-hours 10h, ends at 2026-09-22 00:13 UTC)" in priced
    unpriced = cost_line(Quote(None, "unknown"), opts, "RTX 4090", now)
    for line in (priced, unpriced):
        assert "enforced by the pod's agent and the watchdog" in line
        assert "RunPod ends" not in line and "provider-side" not in line


# -- doctor -----------------------------------------------------------------------------------------------


def test_doctor_says_which_layers_hold_the_deadline() -> None:
    check = check_deadline(Settings())
    assert check.status == "ok"
    assert "the pod's agent" in check.detail and "the watchdog" in check.detail
    assert "RunPod and Vast alike" in check.detail and "never enforced, runpodctl #330" in check.detail
    assert check_deadline(Settings(max_hours=60)).status == "fail"


def test_doctor_live_says_runpod_never_enforced_terminate_after(clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key="rpa_" + "0" * 36, clock=clock)
    provider = RunPodProvider(
        "rpa_" + "0" * 36,
        graphql_url="https://api.runpod.test/graphql",
        rest_url="https://api.runpod.test/v2",
        transport=emu.transport(),
        clock=clock,
        backoff=zero_backoff,
    )
    report = live_report({"runpod": lambda: provider})
    [fact] = [f for f in report.facts if "terminateAfter" in f.fact]
    assert fact.status == "refuted" and "runpodctl #330" in fact.detail and "does not rely" in fact.fact


def test_extend_is_in_the_command_table() -> None:
    assert COMMANDS["extend"][0] == "gpuc.client.pods.commands:extend"


def _iso(ts: float) -> str:
    from gpuc.core.clock import iso

    return iso(ts)


class RecoveringWatchdog:
    """A watchdog holding a run that recovers from outbids: its first pod v1 outbid and ended, attempt 2 (v2)
    live. A deadline moved on v2 moves the run's envelope (functions/recovery/runs.py move_envelope)."""

    def __init__(self, now: float) -> None:
        self.now, self.moved_on = now, ""
        self.view = RunRecovery(
            run_id="r-spot",
            experiment="exp",
            provider="vast",
            recover=2,
            envelope_usd=4.0,
            deadline_at=now + 3 * HOUR,
            spent_usd=0.9,
            as_of=now,
            attempts=[
                AttemptRecord(pod_id="v1", start=now - HOUR, price_per_hour=0.4, disk_per_hour=0.0, end=now - 600),
                AttemptRecord(pod_id="v2", start=now - 500, price_per_hour=0.4, disk_per_hour=0.0),
            ],
        )

    def run(self, run_id: str) -> RunRecovery | None:
        return self.view if run_id == "r-spot" else None

    def deadline(self, pod_id: str, request: DeadlineRequest) -> DeadlineAnswer:
        self.moved_on = pod_id
        was = self.view.deadline_at
        assert request.extend_s is not None
        self.view = self.view.model_copy(update={"deadline_at": was + request.extend_s, "envelope_usd": 6.0})
        return DeadlineAnswer(deadline_at=was + request.extend_s, previous=was, limit_at=was + 40 * HOUR)

    def close(self) -> None:
        pass


def test_extend_on_a_recovering_run_moves_its_live_attempt_and_says_the_new_envelope(tmp_path: Path) -> None:
    clock = FakeClock()
    settings = Settings(home=tmp_path / "home", env_file=tmp_path / "none.env")
    runs = RunStore(settings.home)
    runs.record_intent("r-spot", "gpuc-r-spot", "vast", "exp", clock.now())
    runs.set_pod_id("r-spot", "v1")  # the laptop knows the first pod only: the watchdog rented v2
    watchdog = RecoveringWatchdog(clock.now())
    ctx = Ctx(settings, runs=runs, clock=clock, watchdog=watchdog)  # type: ignore[arg-type]
    said = extend_words("exp", ctx, seconds=2 * HOUR)
    assert watchdog.moved_on == "v2", "the run's pod now, not its outbid first one"
    head, envelope = said.splitlines()
    assert head.startswith("v2: now ends at ")
    assert re.fullmatch(
        r"  run r-spot recovers from outbids: its envelope is now \$6\.00 across every attempt, to "
        r"(\d{4}-\d\d-\d\d )?\d\d:\d\d UTC; \$0\.9000 spent so far",
        envelope,
    ), envelope
