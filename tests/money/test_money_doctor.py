from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes.ctx import answering
from fakes.money import FakeProvider

from gpuc.client.context import Ctx
from gpuc.client.money.balance import BalanceLine, BalanceReport
from gpuc.client.setup import doctor as doctor_module
from gpuc.client.setup.checks import Check, render
from gpuc.client.setup.commands import doctor
from gpuc.client.setup.doctor import (
    DoctorDeps,
    check_balance,
    check_env_file,
    check_hook,
    check_keys,
    check_watchdog,
    run_checks,
    run_git,
)
from gpuc.client.setup.doctor_results import check_results
from gpuc.client.setup.hook import install_hook
from gpuc.core.api import ChannelInfo, StatusResponse
from gpuc.core.errors import ConfigError, WatchdogError
from gpuc.core.models import Balance
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr

RUNPOD_KEY = "rpa_" + "Q7x" * 12
ADMIN = "adm-" + "z9" * 16
NOTIFY_URLS = "ntfy://gpuc-topic-k3y9"


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def env_file(where: Path, mode: int = 0o600, body: str = f"RUNPOD_API_KEY={RUNPOD_KEY}\n") -> Path:
    path = where / ".env"
    path.write_text(body, encoding="utf-8")
    path.chmod(mode)
    return path


# --- .env --------------------------------------------------------------------------------------------------


def test_a_missing_env_file_fails_with_how_to_create_it(tmp_path: Path) -> None:
    (check,) = check_env_file(tmp_path / ".env", run_git)
    assert check.status == "fail" and check.fix
    assert f"chmod 600 {tmp_path / '.env'}" in check.fix


def test_an_env_file_others_can_read_fails_with_chmod(repo: Path) -> None:
    path = env_file(repo, 0o644)
    (repo / ".gitignore").write_text(".env\n")
    checks = by_name(check_env_file(path, run_git))
    assert checks[".env exists"].status == "ok"
    assert checks[".env mode 600"].status == "fail" and checks[".env mode 600"].fix == f"chmod 600 {path}"
    assert "644" in checks[".env mode 600"].detail
    assert checks[".env git-ignored"].status == "ok"


def test_an_env_file_git_would_commit_fails_with_the_ignore_line(repo: Path) -> None:
    path = env_file(repo)
    check = by_name(check_env_file(path, run_git))[".env git-ignored"]
    assert check.status == "fail" and check.fix == f"echo .env >> {repo / '.gitignore'}"
    assert by_name(check_env_file(path, run_git))[".env mode 600"].status == "ok"


def test_a_committed_env_file_fails_with_rotate_the_keys(repo: Path) -> None:
    path = env_file(repo)
    run_git(["add", ".env"], repo)
    run_git(["commit", "-q", "--no-verify", "-m", "oops"], repo)
    (repo / ".gitignore").write_text(".env\n")
    check = by_name(check_env_file(path, run_git))[".env git-ignored"]
    assert check.status == "fail" and check.fix and "git rm --cached .env" in check.fix and "rotate" in check.fix


def test_an_env_file_outside_any_repository_cannot_be_committed(git_env: None, tmp_path: Path) -> None:
    lone = tmp_path / "lone"
    lone.mkdir()
    check = by_name(check_env_file(env_file(lone), run_git))[".env git-ignored"]
    assert check.status == "ok" and "not inside a git repository" in check.detail


# --- keys --------------------------------------------------------------------------------------------------


def test_the_chosen_providers_key_must_be_present() -> None:
    checks = by_name(check_keys(Settings(provider="runpod")))
    assert checks["provider key"].status == "fail"
    assert checks["provider key"].fix == "add RUNPOD_API_KEY=... to .env (mode 600)"
    assert checks["watchdog admin token"].status == "fail"
    assert checks["watchdog admin token"].fix and "gpuc watchdog serve" in checks["watchdog admin token"].fix


def test_present_keys_pass_without_showing_their_values() -> None:
    settings = Settings(provider="runpod", runpod_api_key=SecretStr(RUNPOD_KEY), admin_token=SecretStr(ADMIN))
    checks = check_keys(settings)
    assert all(c.status == "ok" for c in checks)
    text = render(checks) + json.dumps([c.model_dump() for c in checks])
    assert RUNPOD_KEY not in text and ADMIN not in text and "RUNPOD_API_KEY set" in text


def test_no_remote_key_on_the_local_provider_is_a_warning() -> None:
    check = by_name(check_keys(Settings()))["provider key"]
    assert check.status == "warn" and check.fix and "VAST_API_KEY" in check.fix


# --- balance -----------------------------------------------------------------------------------------------


def report(*lines: BalanceLine) -> BalanceReport:
    return BalanceReport(cap_usd=20.0, low_usd=5.0, providers=list(lines))


def test_a_balance_above_the_cap_fails_with_the_fix() -> None:
    (check,) = check_balance(
        report(BalanceLine(provider="vast", configured=True, balance_usd=48.0, spend_per_hour=0.0))
    )
    assert (check.name, check.status) == ("balance vast", "fail")
    assert "$48.00 is above the $20.00 cap" in check.detail
    assert check.fix and "GPUC_BALANCE_CAP_USD" in check.fix


def test_a_balance_below_the_low_mark_fails_with_top_up() -> None:
    (check,) = check_balance(
        report(BalanceLine(provider="runpod", configured=True, balance_usd=2.0, spend_per_hour=0.5))
    )
    assert check.status == "fail" and check.fix == "top up to at most $20.00 before the next run"


def test_an_unreadable_balance_fails_with_the_providers_hint() -> None:
    (check,) = check_balance(
        report(BalanceLine(provider="runpod", configured=True, error="HTTP 401", hint="check RUNPOD_API_KEY"))
    )
    assert check.status == "fail" and check.fix == "check RUNPOD_API_KEY"


def test_balances_within_bounds_pass_and_no_account_warns() -> None:
    (good,) = check_balance(
        report(
            BalanceLine(provider="vast", configured=True, balance_usd=12.0, spend_per_hour=0.0),
            BalanceLine(provider="runpod", configured=False),
        )
    )
    assert good.status == "ok"
    (none,) = check_balance(report(BalanceLine(provider="runpod", configured=False)))
    assert none.status == "warn"


# --- the watchdog ------------------------------------------------------------------------------------------


def test_an_unreachable_watchdog_fails_with_how_to_start_it() -> None:
    def status() -> StatusResponse:
        raise WatchdogError("connection refused", hint="start it: gpuc watchdog serve")

    (check,) = check_watchdog(status, "http://127.0.0.1:8787")
    assert check.status == "fail" and check.fix == "start it: gpuc watchdog serve"
    assert "http://127.0.0.1:8787" in check.detail


def test_a_reaper_that_never_ran_fails() -> None:
    checks = by_name(check_watchdog(lambda: StatusResponse(server_time=1e9, reaper_period_s=300), "u"))
    assert checks["watchdog reachable"].status == "ok"
    assert checks["reaper ran recently"].status == "fail"
    assert checks["reaper ran recently"].fix and "gpuc watchdog serve" in checks["reaper ran recently"].fix


def test_a_stale_reaper_fails_and_a_fresh_one_passes() -> None:
    stale = StatusResponse(server_time=1e9, reaper_last_run=1e9 - 3600, reaper_period_s=300)
    check = by_name(check_watchdog(lambda: stale, "u"))["reaper ran recently"]
    assert check.status == "fail" and "stale" in check.detail and "60 min ago" in check.detail
    assert check.fix and "restart" in check.fix
    fresh = StatusResponse(server_time=1e9, reaper_last_run=1e9 - 240, reaper_period_s=300)
    assert by_name(check_watchdog(lambda: fresh, "u"))["reaper ran recently"].status == "ok"


# --- the hook ----------------------------------------------------------------------------------------------


def test_no_hook_fails_with_install_hook(repo: Path) -> None:
    check = check_hook(repo, run_git)
    assert check.status == "fail" and check.fix == "gpuc doctor --install-hook"


def test_someone_elses_hook_fails_with_move_it_aside(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    check = check_hook(repo, run_git)
    assert check.status == "fail" and check.fix and f"mv {hook} {hook}.local" in check.fix
    with pytest.raises(ConfigError) as err:
        install_hook(repo, repo / ".env", run_git)
    assert err.value.hint and ".local" in err.value.hint


def test_a_guard_that_cannot_run_fails_with_chmod(repo: Path) -> None:
    hook = install_hook(repo, repo / ".env", run_git)
    assert check_hook(repo, run_git).status == "ok"
    hook.chmod(0o600)
    check = check_hook(repo, run_git)
    assert check.status == "fail" and check.fix == f"chmod 700 {hook}"


def test_outside_a_repository_the_hook_check_says_where_to_run(git_env: None, tmp_path: Path) -> None:
    check = check_hook(tmp_path, run_git)
    assert check.status == "warn" and check.fix and "--repo" in check.fix
    with pytest.raises(ConfigError):
        install_hook(tmp_path, tmp_path / ".env", run_git)


def test_the_hook_honours_core_hookspath(repo: Path) -> None:
    run_git(["config", "core.hooksPath", "githooks"], repo)
    hook = install_hook(repo, repo / ".env", run_git)
    assert hook == repo / "githooks" / "pre-commit"
    assert check_hook(repo, run_git).status == "ok"


# --- all of it ---------------------------------------------------------------------------------------------


def deps(repo: Path, settings: Settings, status: StatusResponse, balances: BalanceReport) -> DoctorDeps:
    return DoctorDeps(settings=settings, repo=repo, git=run_git, status=lambda: status, balances=lambda: balances)


def healthy(repo: Path) -> DoctorDeps:
    env = env_file(repo)
    (repo / ".gitignore").write_text(".env\n")
    install_hook(repo, env, run_git)
    ssh_key = repo.parent / "id_ed25519"  # what a first rental needs: a private key with its public half
    ssh_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    ssh_key.chmod(0o600)
    ssh_key.with_name("id_ed25519.pub").write_text("ssh-ed25519 AAAA doctor\n")
    settings = Settings(
        env_file=env,
        ssh_key_path=ssh_key,
        monthly_budget=40.0,
        provider="runpod",
        runpod_api_key=SecretStr(RUNPOD_KEY),
        admin_token=SecretStr(ADMIN),
        notify_urls=SecretStr(NOTIFY_URLS),
        git_remote="https://github.com/you/exp.git",  # where results go (the destination line)
        git_token=SecretStr("ghp_doctor"),
    )
    status = StatusResponse(
        server_time=1e9, reaper_last_run=1e9 - 60, reaper_period_s=300, channels=[ChannelInfo(index=1, kind="ntfy")]
    )
    balances = report(BalanceLine(provider="runpod", configured=True, balance_usd=15.0, spend_per_hour=0.0))
    return deps(repo, settings, status, balances)


def test_a_healthy_setup_passes_every_check(repo: Path) -> None:
    checks = run_checks(healthy(repo), repo)
    assert [c.name for c in checks if c.status != "ok"] == []
    text = render(checks)
    assert text.count("✓") == len(checks) and "✗" not in text and RUNPOD_KEY not in text


def test_each_failure_is_rendered_with_its_fix(repo: Path) -> None:
    d = healthy(repo)
    (repo / ".env").chmod(0o640)
    d.balances = lambda: report(BalanceLine(provider="runpod", configured=True, balance_usd=99.0, spend_per_hour=0.0))
    text = render(run_checks(d, repo))
    assert "✗ .env mode 600" in text and f"    fix: chmod 600 {repo / '.env'}" in text
    assert "✗ balance runpod" in text
    assert text.count("✗") == 2 and text.count("fix:") == 2


def test_a_fresh_local_only_setup_is_judged_by_what_it_needs(repo: Path) -> None:
    """No .env and no keys are fine for the local provider; no admin token is ONE ✗ with its
    fix, not a second one for the watchdog it makes unreachable."""
    install_hook(repo, repo / ".env", run_git)
    settings = Settings(env_file=repo / ".env", provider="local")
    unreachable = WatchdogError("no admin token for the watchdog", hint="start it")

    def status() -> StatusResponse:
        raise unreachable

    d = DoctorDeps(settings=settings, repo=repo, git=run_git, status=status, balances=lambda: report())
    checks = run_checks(d, repo)
    assert [c.name for c in checks if c.status == "fail"] == ["watchdog admin token"]
    assert by_name(checks)[".env exists"].status == "warn"
    assert "watchdog reachable" not in by_name(checks)


def test_a_missing_env_file_fails_when_renting(tmp_path: Path) -> None:
    (renting,) = check_env_file(tmp_path / ".env", run_git, renting=True)
    (local,) = check_env_file(tmp_path / ".env", run_git, renting=False)
    assert (renting.status, local.status) == ("fail", "warn") and local.fix == renting.fix


def healthy_ctx(repo: Path) -> Ctx:
    """The command's Ctx for the healthy setup: the same settings, watchdog and runpod balance."""
    d = healthy(repo)
    runpod = FakeProvider("runpod", balance=Balance(provider="runpod", balance_usd=15.0, spend_per_hour=0.0))
    return Ctx(d.settings, watchdog=answering(d.status()), providers={"runpod": runpod})


def test_the_cli_exits_1_on_a_failure_and_prints_json(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = healthy_ctx(repo)
    os.remove(repo / ".git" / "hooks" / "pre-commit")
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(doctor, ["--json"], obj=ctx)
    assert result.exit_code == 1, result.output
    body = json.loads(result.output)
    assert body["ok"] is False and body["installed_hook"] is None
    failed = [c for c in body["checks"] if c["status"] == "fail"]
    assert [(c["name"], c["fix"]) for c in failed] == [("pre-commit secret guard", "gpuc doctor --install-hook")]
    assert RUNPOD_KEY not in result.output


def test_the_cli_installs_the_hook_then_passes(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = healthy_ctx(repo)
    os.remove(repo / ".git" / "hooks" / "pre-commit")
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(doctor, ["--install-hook", "--repo", str(repo)], obj=ctx)
    assert result.exit_code == 0, result.output
    assert f"installed the secret guard: {repo / '.git' / 'hooks' / 'pre-commit'}" in result.output
    assert "✓ pre-commit secret guard" in result.output


# -- the results destination: judged without a request; `up` proves the write ----------------
def test_a_rented_setup_with_nowhere_to_sync_fails_with_a_working_value(repo: Path) -> None:
    d = healthy(repo)
    d.settings = d.settings.with_overrides(git_remote=None, git_token=None)
    check = by_name(run_checks(d, repo))["results destination"]
    assert check.status == "fail" and "nowhere to send its results" in check.detail
    assert check.fix and "s3://my-bucket/gpuc" in check.fix


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"git_remote": "git@github.com:you/exp.git"}, "is an ssh remote"),
        ({"git_remote": None, "results_bucket": "s3://results/gpuc"}, "GPUC_S3_ACCESS_KEY_ID and"),
        ({"git_remote": None, "results_bucket": "file:///tmp/r"}, "the pod's own disk"),
        ({"git_remote": None, "results_bucket": "gs://results"}, "neither s3://bucket/prefix"),
    ],
)
def test_a_destination_a_rented_pod_cannot_use_fails_before_any_request(
    repo: Path, fields: dict[str, str | None], said: str
) -> None:
    d = healthy(repo)
    d.settings = d.settings.with_overrides(**fields)
    check = by_name(run_checks(d, repo))["results destination"]
    assert check.status == "fail" and said in check.detail, check


def test_the_local_provider_alone_needs_no_destination(repo: Path) -> None:
    settings = Settings(env_file=repo / ".env")
    assert check_results(settings).status == "ok" and "local provider only" in check_results(settings).detail
    folder = settings.with_overrides(results_bucket="file:///tmp/r")
    assert check_results(folder).status == "ok"


def test_a_local_setup_with_a_provider_key_is_warned_not_failed(repo: Path) -> None:
    settings = Settings(env_file=repo / ".env", runpod_api_key=SecretStr(RUNPOD_KEY))
    check = check_results(settings)
    assert check.status == "warn" and "for `up -p`: a rented pod would have nowhere" in check.detail


def test_a_bad_setting_is_one_cross_and_the_other_checks_still_run(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = healthy(repo)
    monkeypatch.setattr(doctor_module, "doctor_deps", lambda ctx, where: d)
    monkeypatch.setenv("GPUC_HOME", str(repo / "home"))
    monkeypatch.setenv("GPUC_ENV_FILE", str(repo / ".env"))
    monkeypatch.setenv("GPUC_IDLE_DESTROY_S", "20 min")
    monkeypatch.chdir(repo)
    result = CliRunner().invoke(doctor, ["--json"], obj=Ctx())  # no settings given: doctor loads them
    assert result.exit_code == 1, result.output
    checks = json.loads(result.output)["checks"]
    failed = [c for c in checks if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["setting"] and "GPUC_IDLE_DESTROY_S" in failed[0]["detail"]
    assert failed[0]["fix"] == "fix GPUC_IDLE_DESTROY_S in your environment (export/unset it)"
    assert any(c["name"] == "pre-commit secret guard" and c["status"] == "ok" for c in checks)


# -- notification channels: set, and held by the watchdog too ---------------------------
def test_no_channel_is_a_warning_naming_the_setting(repo: Path) -> None:
    d = healthy(repo)
    d.settings = d.settings.with_overrides(notify_urls=None)
    channels = by_name(run_checks(d, repo))["notification channels"]
    assert channels.status == "warn" and "GPUC_NOTIFY_URLS is not set" in channels.detail
    assert "ntfy://" in (channels.fix or "")


def test_a_channel_the_deployed_watchdog_lacks_is_a_cross_with_the_redeploy(repo: Path) -> None:
    d = healthy(repo)
    tg = "tgram://123456:ABC-def/-100123"
    d.settings = d.settings.with_overrides(
        notify_urls=SecretStr(f"{NOTIFY_URLS},{tg}"), watchdog_url="https://abc.lambda-url.us-east-1.on.aws"
    )
    calls: list[int] = []
    status = d.status

    def counted() -> StatusResponse:
        calls.append(1)
        return status()

    d.status = counted
    checks = run_checks(d, repo)
    channels = by_name(checks)["notification channels"]
    assert channels.status == "fail"
    assert channels.detail == "the watchdog does not have channel 2 (telegram)"
    assert channels.fix == "redeploy: gpuc watchdog deploy"
    assert len(calls) == 1  # one status read serves every check
    assert "ABC-def" not in render(checks) and "gpuc-topic" not in render(checks)  # never a URL


def test_the_channels_held_by_the_watchdog_pass(repo: Path) -> None:
    assert by_name(run_checks(healthy(repo), repo))["notification channels"].status == "ok"
