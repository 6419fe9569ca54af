"""`gpuc doctor` judges the ssh key a first rental needs: there, private, and with its public half."""

from __future__ import annotations

from pathlib import Path

from gpuc.client.money.balance import BalanceReport
from gpuc.client.setup.doctor import DoctorDeps, check_ssh_key, run_checks, run_git
from gpuc.core.api import StatusResponse
from gpuc.core.errors import FunctionsError
from gpuc.core.settings import Settings


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
    raise FunctionsError("connection refused")


def names(settings: Settings, tmp_path: Path) -> list[str]:
    report = BalanceReport(cap_usd=20, low_usd=5, providers=[])
    deps = DoctorDeps(settings, tmp_path, run_git, status=unreachable, balances=lambda: report)
    return [c.name for c in run_checks(deps, tmp_path, environ={})]


def test_doctor_checks_the_key_for_a_rented_provider_only(tmp_path: Path) -> None:
    assert "ssh key" in names(Settings(home=tmp_path, provider="runpod", ssh_key_path=key(tmp_path)), tmp_path)
    assert "ssh key" not in names(Settings(home=tmp_path, provider="local"), tmp_path)
