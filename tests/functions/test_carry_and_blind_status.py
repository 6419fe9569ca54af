"""`gpuc watchdog deploy` carries the local watchdog's live registrations into the new deployment; `gpuc ls`,
`gpuc watchdog status` and `gpuc doctor` say which provider the reaper cannot read, and since when."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fakes.watchdog import ADMIN, World, make_world

from gpuc.client.context import Ctx
from gpuc.client.pods.survey import status_warnings
from gpuc.client.setup.doctor import check_watchdog
from gpuc.client.watchdog.commands import watchdog
from gpuc.core.api import BlindProvider, RegisterRequest, StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.settings import Settings
from gpuc.core.settingsload import save_config
from gpuc.core.signing import derive_key, new_token
from gpuc.functions import deploy as dep
from gpuc.functions import deployplan
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.functions.store import SqliteStore, StoredPod

LOCAL = ("live-ok", "live-late")


def local_store(home: Path, now: float) -> dict[str, str]:
    """What `gpuc watchdog serve` left in GPUC_HOME: two live pods, one ended, one adopted stray."""
    tokens = {pod_id: new_token() for pod_id in (*LOCAL, "done-pod")}
    store = SqliteStore(home / "watchdog.db")
    for pod_id, token in tokens.items():
        store.register(
            StoredPod(
                pod_id=pod_id,
                provider="fake",
                name=f"gpuc-{pod_id}",
                experiment="exp",
                key=derive_key(token),
                started_at=now - 3600,
                registered_at=now - 3600,
            )
        )
    store.update_if("live-late", {}, {"state": "late"})
    store.update_if("done-pod", {}, {"state": "ended", "end_at": now})
    store.adopt(
        StoredPod(
            pod_id="stray-pod",
            provider="fake",
            name="gpuc-stray-pod",
            experiment="?",
            registered_at=now,
            origin="adopted",
        )
    )
    store.close()
    return tokens


def test_only_live_registered_pods_with_a_key_are_carried(home: Path, clock: FakeClock) -> None:
    local_store(home, clock.now())
    live = dep.live_registrations(Settings(home=home))
    assert sorted(r.pod_id for r in live) == sorted(LOCAL)
    assert all(r.carried for r in live)


def test_nothing_to_carry_without_a_local_store(tmp_path: Path) -> None:
    assert dep.live_registrations(Settings(home=tmp_path / "empty")) == []
    assert not (tmp_path / "empty" / "watchdog.db").exists()


@pytest.fixture
def aws(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[World, ServerHandle]]:
    """The new deployment: another watchdog, behind real HTTP on loopback."""
    world = make_world(tmp_path / "aws-home", clock)
    handle = start_in_thread(world.settings, deps=world.deps)
    yield world, handle
    handle.stop()
    world.store.close()


PLANS: list[deployplan.Plan] = []  # what each deploy was asked to do (the carried ids, a new key)


def invoke_deploy(
    monkeypatch: pytest.MonkeyPatch,
    home: Path,
    url: str,
    *args: str,
    on_terminal: bool = False,
    input: str | None = None,
) -> Any:
    def plan(settings: Settings, region: str, stack: str, **_: object) -> Any:
        return deployplan.Plan(region, stack, "/p", "fake", "python3.11", "x86_64")

    monkeypatch.setattr(deployplan, "make_plan", plan)

    def fake_deploy(settings: Settings, plan: deployplan.Plan, **kw: Any) -> dep.Deployed:
        PLANS.append(plan)
        path = save_config(settings.home, watchdog_url=url, admin_token=ADMIN)
        return dep.Deployed(url=url, table="t", config_path=path)

    monkeypatch.setattr(dep, "deploy", fake_deploy)
    ctx = Ctx(terminal=lambda: on_terminal)
    return CliRunner().invoke(watchdog, ["deploy", "--region", "us-east-1", *args], input=input, obj=ctx)


@pytest.mark.parametrize(
    ("args", "on_terminal", "answer", "carried"),
    [
        (["--carry"], False, None, True),
        (["--no-carry"], False, None, False),
        ([], False, None, True),  # not a terminal: the safe default
        ([], True, "y\n", True),
        ([], True, "n\n", False),
    ],
    ids=["--carry", "--no-carry", "no-terminal", "asked-yes", "asked-no"],
)
def test_deploy_carries_live_registrations_over(
    monkeypatch: pytest.MonkeyPatch,
    home: Path,
    aws: tuple[World, ServerHandle],
    args: list[str],
    on_terminal: bool,
    answer: str | None,
    carried: bool,
) -> None:
    world, handle = aws
    tokens = local_store(home, world.now)
    result = invoke_deploy(monkeypatch, home, handle.url, *args, on_terminal=on_terminal, input=answer)
    assert result.exit_code == 0, result.output
    # Carried pods stay marked for the local watchdog (no provider re-marks a running pod's env): their ids
    # go into the new watchdog's config, which then owns them.
    assert sorted(PLANS[-1].carried) == (sorted(LOCAL) if carried else [])
    assert PLANS[-1].rotate_key is False
    if not carried:
        assert world.store.list_pods() == []
        assert "not carried" in result.output
        return
    assert sorted(p.pod_id for p in world.store.list_pods()) == sorted(LOCAL)
    assert {p.origin for p in world.store.list_pods()} == {"carried"}
    assert "keep `gpuc watchdog serve` running" in result.output
    # Their keys came along: a ping from a carried pod verifies at the new deployment
    world.tokens["live-ok"] = tokens["live-ok"]
    assert world.ping("live-ok").status == 200
    for token in tokens.values():
        assert token not in result.output


def test_rotating_the_key_is_asked_for_by_name(
    monkeypatch: pytest.MonkeyPatch, home: Path, aws: tuple[World, ServerHandle]
) -> None:
    result = invoke_deploy(monkeypatch, home, aws[1].url, "--no-carry", "--rotate-key")
    assert result.exit_code == 0, result.output
    assert PLANS[-1].rotate_key is True
    assert any("a NEW key" in line and "their own agents" in line for line in PLANS[-1].describe())


def test_carry_goes_on_past_a_refused_registration(aws: tuple[World, ServerHandle]) -> None:
    world, _ = aws
    good = RegisterRequest(
        pod_id="pod-good", provider="fake", name="gpuc-pod-good", experiment="e", key="ab" * 32, carried=True
    )
    bad = good.model_copy(update={"pod_id": "pod-bad", "provider": "nowhere"})

    def register(request: RegisterRequest) -> None:
        answer = world.admin("POST", "/v1/pods", request)
        if answer.status != 200:
            from gpuc.core.errors import WatchdogError

            raise WatchdogError(answer.body["error"])

    carried, failed = dep.carry_registrations([bad, good], register)
    assert carried == ["pod-good"]
    assert failed == [("pod-bad", "json validation error: provider is not one of the configured providers")]


# -- a blind provider, as the user sees it ---------------------------------------------------------


def blind_status(now: float) -> StatusResponse:
    return StatusResponse(
        server_time=now,
        reaper_last_run=now - 60,
        reaper_period_s=300,
        reaper_blind=["vast"],
        reaper_blind_since=[BlindProvider(provider="vast", since=now - 90 * 60, why="HTTP 401: key revoked")],
    )


def test_ls_and_watchdog_status_name_the_blind_provider_and_since_when() -> None:
    warnings = status_warnings(blind_status(1_800_000_000.0))
    assert len(warnings) == 1
    assert "cannot read vast since 2027-01-15T06:30:00Z (90 min)" in warnings[0]
    assert "HTTP 401: key revoked" in warnings[0]
    healthy = StatusResponse(server_time=1e9, reaper_last_run=1e9 - 60, reaper_period_s=300)
    assert status_warnings(healthy) == []


def test_doctor_fails_while_a_provider_is_blind() -> None:
    checks = {c.name: c for c in check_watchdog(lambda: blind_status(1_800_000_000.0), "u")}
    blind = checks["reaper sees every provider"]
    assert blind.status == "fail"
    assert "vast since 90 min ago" in blind.detail and blind.fix and "API key" in blind.fix
    fine = StatusResponse(server_time=1e9, reaper_last_run=1e9 - 60, reaper_period_s=300)
    assert {c.name: c for c in check_watchdog(lambda: fine, "u")}["reaper sees every provider"].status == "ok"


def test_watchdog_status_shows_the_blind_provider(
    monkeypatch: pytest.MonkeyPatch, home: Path, aws: tuple[World, ServerHandle]
) -> None:
    from gpuc.testkit.fakes import outage

    world, handle = aws
    world.provider.fail = outage()
    world.reap()
    save_config(home, watchdog_url=handle.url, admin_token=ADMIN)
    result = CliRunner().invoke(watchdog, ["status"])
    assert result.exit_code == 0, result.output
    assert "cannot read fake since" in result.output
