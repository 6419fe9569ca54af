"""boot.json as the pod reads it (stdlib, by hand) against the wire's BootAnswer, and the boot's own checks before
anything is installed: a kit for another pod, a wheel changed since the onstart checked it."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuc.client.onpod.bundle import build_bundle
from gpuc.core.api import BootAnswer, BootKit
from gpuc.core.bootkit import BOOT_FILE, BOOT_SITE, BOOT_TICKET_ENV
from gpuc.core.errors import ConfigError
from gpuc.core.pod import RESUME_ENV
from gpuc.instance_side import boot
from gpuc.instance_side.boot import BootPlan, child_environ
from gpuc.instance_side.podfiles import PodPaths

TOKEN = "boot-token-" + "k" * 32


def answer(**kit: Any) -> dict[str, Any]:
    wheel = build_bundle()
    fields: dict[str, Any] = {
        "wheel_url": "file:///kit/" + wheel.filename,
        "wheel_name": wheel.filename,
        "wheel_sha256": wheel.sha256,
        "installer": "offline",
        "offline_python": sys.executable,
        "config": {"pod_id": "41", "provider": "vast", "experiment": "exp", "run_id": "run01", "watchdog_url": "x"},
        "secrets": {"HF_TOKEN": "hf_x"},
        "command": ["python", "train.py"],
        "job_id": "job-0001",
        **kit,
    }
    return BootAnswer(kit=BootKit.model_validate(fields), token=TOKEN, resume_from="file:///b").model_dump(mode="json")


def test_the_pod_reads_every_field_of_the_wire_answer() -> None:
    wire = {*BootKit.model_fields, *BootAnswer.model_fields} - {"kit", "wheel_url"}  # wheel_url: the onstart's
    assert {f.name for f in dataclasses.fields(BootPlan)} == wire
    plan = BootPlan.parse(answer())
    assert plan.token == TOKEN and plan.command == ["python", "train.py"] and plan.resume_from == "file:///b"


@pytest.mark.parametrize(
    ("kit", "field"),
    [
        ({"wheel_name": "../gpuc-1-py3-none-any.whl"}, "wheel_name"),
        ({"wheel_sha256": "X" * 64}, "wheel_sha256"),
        ({"command": []}, "kit.command"),
        ({"command": ["python", 3]}, "kit.command"),
        ({"installer": "venv"}, "kit.installer"),
        ({"project_url": "file:///p.tar.gz"}, "kit.project_url"),
        ({"job_id": "job 1; rm -rf /"}, "job_id"),
        ({"secrets": {"HF_TOKEN": 1}}, "kit.secrets"),
    ],
    ids=[
        "wheel-path",
        "sha",
        "empty-command",
        "command-type",
        "older-gpucs-venv",
        "project-no-sha",
        "job-id",
        "secret",
    ],
)
def test_a_kit_of_the_wrong_shape_is_refused(kit: dict[str, Any], field: str) -> None:
    data = answer()
    data["kit"].update(kit)
    with pytest.raises(ConfigError, match=field):
        BootPlan.parse(data)


def _pod(tmp_path: Path, data: dict[str, Any]) -> PodPaths:
    paths = PodPaths(tmp_path / "root")
    paths.code.mkdir(parents=True)
    wheel = build_bundle()
    (paths.code / wheel.filename).write_bytes(wheel.data)
    (paths.state / BOOT_FILE).write_text(json.dumps(data))
    return paths


def _nothing_done(paths: PodPaths) -> None:
    assert not (paths.state / BOOT_FILE).exists(), "its secrets are not left behind"
    assert not paths.python.exists() and not (paths.code / "site").exists()
    assert not paths.config.exists() and not paths.secrets.exists()


def test_a_kit_for_another_pod_installs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _pod(tmp_path, answer())
    assert boot.boot(paths, {"CONTAINER_ID": "42"}) == 1
    _nothing_done(paths)
    assert "the kit is for pod 41, this is 42" in capsys.readouterr().out


def test_a_wheel_changed_after_the_onstart_checked_it_is_not_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _pod(tmp_path, answer())
    wheel = paths.code / build_bundle().filename
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    assert boot.boot(paths, {"CONTAINER_ID": "41"}) == 1
    _nothing_done(paths)
    assert "does not match the kit's sha256" in capsys.readouterr().out


def test_the_pods_processes_get_neither_the_ticket_nor_the_restore_nor_the_unpacked_wheel(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path)
    site = str(paths.code / BOOT_SITE)
    env = child_environ(
        {BOOT_TICKET_ENV: "t" * 40, RESUME_ENV: "file:///b", "PYTHONPATH": f"{site}:/image/lib", "HOME": "/root"},
        paths,
    )
    assert env == {"PYTHONPATH": "/image/lib", "HOME": "/root"}
    assert "PYTHONPATH" not in child_environ({"PYTHONPATH": site}, paths)


def test_config_and_secrets_are_written_as_up_writes_them(tmp_path: Path) -> None:
    from gpuc.core.podconfig import pod_secrets, render_env_file
    from gpuc.core.podpaths import CLAIM_ENV

    data = answer()
    data["claim"] = "c" * 40
    plan = BootPlan.parse(data)
    paths = PodPaths(tmp_path)
    paths.state.mkdir(parents=True)
    boot.write_pod_files(paths, plan)
    assert paths.secrets.stat().st_mode & 0o777 == 0o600 and paths.config.stat().st_mode & 0o777 == 0o600
    expected = render_env_file(pod_secrets({"HF_TOKEN": "hf_x", CLAIM_ENV: "c" * 40}, TOKEN))
    assert paths.secrets.read_text() == expected
    assert json.loads(paths.config.read_text()) == data["kit"]["config"]
