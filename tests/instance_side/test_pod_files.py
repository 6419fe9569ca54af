"""The pod's files: the pydantic-free mirror of core.podconfig stays in lockstep with it."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.pod import POD_ID, TOKEN, make_pod, wire

from gpuc.core import podconfig, podpaths
from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError
from gpuc.instance_side import podfiles
from gpuc.instance_side.ending import Ending
from gpuc.instance_side.podfiles import AgentConfig, PodPaths, is_ended, load_secrets, mark_ended, pod_token

DROP = object()


def test_the_pod_reads_its_config_by_the_laptops_one_declaration() -> None:
    """No mirror: the pod's fields, defaults and bounds are PodConfig's own, through its JSON Schema."""
    required = {"pod_id": "p", "provider": "l", "experiment": "e", "run_id": "r", "watchdog_url": "u"}
    assert AgentConfig.from_mapping(required).as_dict() == podconfig.PodConfig(**required).model_dump()


def test_the_pod_and_the_laptop_share_one_pod_paths(tmp_path: Path) -> None:
    assert podfiles.PodPaths is podconfig.PodPaths is podpaths.PodPaths
    assert (podfiles.POD_ROOT_ENV, podfiles.TOKEN_ENV) == (podconfig.POD_ROOT_ENV, podconfig.TOKEN_ENV)
    assert PodPaths.from_env({}).root == Path("/")
    assert PodPaths.from_env({"GPUC_POD_ROOT": str(tmp_path)}).workspace == tmp_path / "workspace"


def test_the_agent_does_not_pull_in_pydantic_httpx_or_boto3() -> None:
    """The agent's memory budget: what it imports (the shared PodPaths included) stays light."""
    code = (
        "import sys, gpuc.instance_side.__main__, gpuc.instance_side.context\n"
        "heavy = ('pydantic', 'httpx', 'boto3', 'botocore', 'click')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_it_reads_the_config_the_laptop_writes(tmp_path: Path) -> None:
    paths = make_pod(tmp_path, idle_warn_s=30, results_bucket="file:///b", simulated_gpu=True)
    cfg = AgentConfig.load(paths.config)
    laptop = podconfig.PodConfig.model_validate_json(paths.config.read_text())
    assert cfg.as_dict() == laptop.model_dump()


def test_unknown_keys_from_a_newer_laptop_do_not_stop_the_agent() -> None:
    cfg = AgentConfig.from_mapping(
        {"pod_id": "p", "provider": "local", "experiment": "e", "run_id": "r", "watchdog_url": "u", "new": 1}
    )
    assert cfg.pod_id == "p"


def test_a_config_written_before_the_watchdog_rename_still_starts_the_agent() -> None:
    """A recovery kit registered by an older gpuc holds `functions_url`: the re-rented pod must still start."""
    old = {"pod_id": "p", "provider": "local", "experiment": "e", "run_id": "r", "functions_url": "https://wd"}
    assert AgentConfig.from_mapping(old).watchdog_url == "https://wd"
    both = {**old, "watchdog_url": "https://new"}
    assert AgentConfig.from_mapping(both).watchdog_url == "https://new"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"pod_id": DROP}, "pod_id: required"),
        ({"heartbeat_interval_s": "60"}, "heartbeat_interval_s: number expected"),
        ({"heartbeat_interval_s": 0}, "heartbeat_interval_s: not above 0"),
        ({"kept_window_s": 0}, "kept_window_s: not above 0"),
        ({"simulated_gpu": 1}, "simulated_gpu: boolean expected"),
        ({"pod_id": None}, "pod_id: string expected"),
    ],
)
def test_a_broken_config_is_a_config_error_with_a_hint(data: dict[str, object], message: str) -> None:
    base: dict[str, object] = {
        "pod_id": "p",
        "provider": "l",
        "experiment": "e",
        "run_id": "r",
        "watchdog_url": "u",
    }
    with pytest.raises(ConfigError, match=message) as exc:
        AgentConfig.from_mapping({k: v for k, v in {**base, **data}.items() if v is not DROP})
    assert exc.value.hint


def test_a_missing_or_garbled_config_file_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no pod config"):
        AgentConfig.load(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not a JSON object"):
        AgentConfig.load(tmp_path / "config.json")


def test_secrets_are_read_and_a_loose_mode_is_tightened(tmp_path: Path) -> None:
    paths = make_pod(tmp_path)
    paths.secrets.chmod(0o644)
    secrets = load_secrets(paths.secrets)
    assert stat.S_IMODE(paths.secrets.stat().st_mode) == 0o600
    assert pod_token(secrets, {}) == TOKEN and secrets["HF_TOKEN"] == "hf_abcdefghijklmnop"


def test_a_missing_token_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GPUC_POD_TOKEN is missing"):
        pod_token({}, {})
    with pytest.raises(ConfigError, match="no secrets file"):
        load_secrets(tmp_path / "secrets.env")


def test_the_ended_marker_names_its_pod(tmp_path: Path) -> None:
    paths = PodPaths(tmp_path)
    paths.state.mkdir(parents=True)
    assert not is_ended(paths, POD_ID)
    mark_ended(paths, POD_ID)
    assert is_ended(paths, POD_ID) and not is_ended(paths, "lp-next-pod-on-this-volume")
    paths.ended.write_text("")  # someone who only touched it
    assert is_ended(paths, POD_ID)


def test_marking_a_pod_whose_disk_is_gone_is_harmless(tmp_path: Path) -> None:
    mark_ended(PodPaths(tmp_path / "destroyed"), POD_ID)
    assert not (tmp_path / "destroyed").exists()


def test_only_one_process_ends_a_pod_at_a_time(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock)
    fd = os.open(pod.paths.end_lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the wrapper is mid-ending
        assert pod.ender().end(Ending(kind="idle_destroy", message="idle")) == "in_progress"
    finally:
        os.close(fd)
    assert pod.calls == []
    assert pod.ender().end(Ending(kind="idle_destroy", message="idle")) == "destroyed"
    assert pod.ender().end(Ending(kind="idle_destroy", message="idle")) == "ended"
    assert pod.calls.count("destroy") == 1


def test_config_json_round_trips_through_json(tmp_path: Path) -> None:
    paths = make_pod(tmp_path)
    data = json.loads(paths.config.read_text())
    assert AgentConfig.from_mapping(data).pod_id == POD_ID
