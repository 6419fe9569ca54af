"""`gpuc doctor` judges the ssh key a first rental needs: there, private, and with its public half."""

from __future__ import annotations

from pathlib import Path

from fakes.providers import RUNPOD_KEY, runpod_on

from gpuc.client.context import Ctx
from gpuc.client.money.balance import BalanceReport
from gpuc.client.setup.checks import Check
from gpuc.client.setup.doctor import DoctorDeps, check_registered_keys, check_ssh_key, run_checks, run_git
from gpuc.core.api import StatusResponse
from gpuc.core.clock import FakeClock
from gpuc.core.errors import WatchdogError
from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.testkit.emulators.runpod import RunPodEmulator


def key(tmp_path: Path, mode: int = 0o600, public: bool = True) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    path.chmod(mode)
    if public:
        path.with_name("id_ed25519.pub").write_text("ssh-ed25519 AAAA test\n")
    return path


def test_a_missing_key_fails_with_the_command_that_makes_one(tmp_path: Path) -> None:
    check = check_ssh_key(Settings(ssh_key_path=tmp_path / "none"))
    assert check.status == "fail" and "ssh-keygen -t ed25519" in (check.fix or "")


def test_a_key_others_can_read_fails_with_chmod(tmp_path: Path) -> None:
    check = check_ssh_key(Settings(ssh_key_path=key(tmp_path, 0o644)))
    assert check.status == "fail" and "644" in check.detail and check.fix == f"chmod 600 {tmp_path / 'id_ed25519'}"


def test_a_key_without_its_public_half_warns(tmp_path: Path) -> None:
    check = check_ssh_key(Settings(ssh_key_path=key(tmp_path, public=False)))
    assert check.status == "warn" and "ssh-keygen -y" in (check.fix or "")


def test_a_private_key_with_its_public_half_passes(tmp_path: Path) -> None:
    assert check_ssh_key(Settings(ssh_key_path=key(tmp_path))).status == "ok"


def unreachable() -> StatusResponse:
    raise WatchdogError("connection refused")


def names(settings: Settings, tmp_path: Path) -> list[str]:
    report = BalanceReport(cap_usd=20, low_usd=5, providers=[])
    deps = DoctorDeps(settings, tmp_path, run_git, status=unreachable, balances=lambda: report)
    return [c.name for c in run_checks(deps, tmp_path, environ={})]


def test_doctor_checks_the_key_for_a_rented_provider_only(tmp_path: Path) -> None:
    assert "ssh key" in names(Settings(home=tmp_path, provider="runpod", ssh_key_path=key(tmp_path)), tmp_path)
    assert "ssh key" not in names(Settings(home=tmp_path, provider="local"), tmp_path)


# -- RunPod: is the key registered there (startSsh alone gives a pod only registered keys) -------------------

LINE = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGpucGMtdGVzdC1rZXktbm90LWEtcmVhbC1vbmUx me@laptop"


def runpod_ctx(tmp_path: Path, emu: RunPodEmulator, clock: FakeClock) -> Ctx:
    path = key(tmp_path)
    path.with_name("id_ed25519.pub").write_text(LINE + "\n")
    provider = runpod_on(emu, clock)
    settings = Settings(home=tmp_path, provider="runpod", ssh_key_path=path, runpod_api_key=SecretStr(RUNPOD_KEY))
    return Ctx(settings, providers={"runpod": provider})


def test_doctor_warns_when_no_key_is_registered_at_runpod_with_the_fix(tmp_path: Path, clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock)
    [check] = check_registered_keys(runpod_ctx(tmp_path, emu, clock), ("runpod",))
    assert (check.name, check.status) == ("ssh key at runpod", "warn")
    assert "no ssh key is registered at runpod" in check.detail and "PUBLIC_KEY" in check.detail
    assert "SSH public keys" in (check.fix or "") and "id_ed25519.pub" in check.detail
    assert [r.path for r in emu.requests] == ["/v2/account/ssh-keys"]  # a read, nothing else


def test_doctor_passes_a_registered_key_and_warns_about_another_one(tmp_path: Path, clock: FakeClock) -> None:
    emu = RunPodEmulator(api_key=RUNPOD_KEY, clock=clock, ssh_keys=(LINE,))
    [check] = check_registered_keys(runpod_ctx(tmp_path, emu, clock), ("runpod",))
    assert check.status == "ok"
    emu.ssh_keys = ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOtherKeyOtherKeyOtherKeyOtherKeyOther other@box"]
    [check] = check_registered_keys(runpod_ctx(tmp_path, emu, clock), ("runpod",))
    assert check.status == "warn" and "not among the 1 key(s) registered" in check.detail


def test_doctor_runs_the_registered_key_check_for_a_rented_provider(tmp_path: Path) -> None:
    report = BalanceReport(cap_usd=20, low_usd=5, providers=[])
    called: list[bool] = []

    def registered() -> list[Check]:
        called.append(True)
        return [Check(name="ssh key at runpod", status="warn", detail="d", fix="f")]

    settings = Settings(home=tmp_path, provider="runpod", ssh_key_path=key(tmp_path))
    deps = DoctorDeps(settings, tmp_path, run_git, status=unreachable, balances=lambda: report,
                      registered_keys=registered)  # fmt: skip
    assert "ssh key at runpod" in [c.name for c in run_checks(deps, tmp_path, environ={})] and called


def test_a_runpod_key_without_its_public_half_fails(tmp_path: Path) -> None:
    check = check_ssh_key(Settings(provider="runpod", ssh_key_path=key(tmp_path, public=False)))
    assert check.status == "fail" and "hands it to each RunPod pod" in check.detail
