"""The bootstrap: idempotent steps, timed into a CSV; a second run skips what is done."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from fakes.pod import TOKEN, make_pod

from gpuc.core.clock import FakeClock
from gpuc.core.errors import ConfigError
from gpuc.instance_side.bootstrap import (
    PREFETCH,
    TORCH_PROBE,
    Bootstrap,
    BootstrapPlan,
    CommandResult,
    bootstrap_environ,
    read_csv,
    unpinned,
)
from gpuc.instance_side.podfiles import PodPaths
from gpuc.instance_side.podlog import PodLog

HF = "hf_" + "BootstrapSecret" * 2
GIT = "ghp_" + "BootstrapGit" * 3
REPO = "https://github.com/me/exp.git"
FULL = BootstrapPlan(
    repo_url=REPO,
    apt=("git", "tmux"),
    models=("TinyLlama/TinyLlama-1.1B-Chat-v1.0",),
    smoke="python3 smoke.py",
)


@dataclass
class FakePod:
    """The commands a pod would run, with their effects on the sandbox; every call is recorded."""

    paths: PodPaths
    clock: FakeClock
    installed: set[str] = field(default_factory=lambda: {"git"})
    fail: set[str] = field(default_factory=set)
    calls: list[tuple[list[str], dict[str, str]]] = field(default_factory=list)
    requirements: str = "torch==2.4.0\nnumpy==1.26.4\n"

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, timeout_s: float
    ) -> CommandResult:
        args = list(argv)
        self.calls.append((args, dict(env)))
        self.clock.advance(1.5)  # each command takes time, so the CSV has something to show
        verb = self._verb(args)
        if verb in self.fail:
            return CommandResult(1, f"{verb}: something broke\nERROR: last line says why")
        if verb == "dpkg-query":
            ok = args[-1] in self.installed
            return CommandResult(0 if ok else 1, "install ok installed" if ok else "no packages found")
        if verb == "apt-install":
            self.installed.update(a for a in args[2:] if not a.startswith("-"))
        if verb == "torch":
            return CommandResult(0, json.dumps({"version": "2.4.0", "cuda": "12.4", "available": True, "devices": 1}))
        if verb == "clone":
            repo = Path(args[-1])
            (repo / ".git").mkdir(parents=True)
            (repo / "requirements.txt").write_text(self.requirements)
        if verb == "get-url":
            return CommandResult(0, REPO + "\n")
        if verb == "prefetch":
            for model in args[3:]:
                hub = Path(env["HF_HOME"]) / "hub" / ("models--" + model.replace("/", "--"))
                (hub / "snapshots" / "abc").mkdir(parents=True)
        return CommandResult(0, "done\n")

    @staticmethod
    def _verb(args: list[str]) -> str:
        if args[0] == "apt-get":
            return "apt-update" if "update" in args else "apt-install"
        if "clone" in args:
            return "clone"
        if "get-url" in args:
            return "get-url"
        if args[1:3] == ["-c", TORCH_PROBE]:
            return "torch"
        if args[1:3] == ["-c", PREFETCH]:
            return "prefetch"
        if args[1:4] == ["-m", "pip", "install"]:
            return "pip"
        if args[0] == "sh":
            return "smoke"
        return args[0]

    def verbs(self) -> list[str]:
        return [self._verb(a) for a, _ in self.calls]


def which(name: str) -> str | None:
    return f"/usr/bin/{name}" if name in ("dpkg-query", "apt-get", "git") else None


def setup(tmp_path: Path, plan: BootstrapPlan = FULL, **secrets: str) -> tuple[Bootstrap, FakePod]:
    paths = make_pod(tmp_path / "pod")
    clock = FakeClock()
    fake = FakePod(paths, clock)
    env = bootstrap_environ({"PATH": "/usr/bin"}, {"GPUC_POD_TOKEN": TOKEN, **secrets}, paths)
    log = PodLog(paths.bootstrap_log, clock, role="bootstrap", secrets=[TOKEN, *secrets.values()])
    return Bootstrap(paths, plan, env=env, runner=fake, clock=clock, log=log, which=which), fake


def statuses(boot: Bootstrap) -> dict[str, str]:
    return {step: status for step, _, status in read_csv(boot.paths.bootstrap_csv)}


def test_a_second_run_skips_every_completed_step_and_the_csv_shows_it(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path, HF_TOKEN=HF, GPUC_GIT_TOKEN=GIT)
    first = boot.run()
    assert [(r.step, r.status) for r in first] == [
        ("system", "ok"),
        ("torch", "ok"),
        ("git", "ok"),
        ("deps", "ok"),
        ("hf_login", "ok"),
        ("models", "ok"),
        ("smoke", "ok"),
    ]
    rows = read_csv(boot.paths.bootstrap_csv)
    assert [r[0] for r in rows] == [r.step for r in first]
    assert dict((r[0], r[1]) for r in rows)["git"] == 1.5  # timed: the clone took one command
    assert boot.paths.bootstrap_csv.read_text().splitlines()[0] == "step,seconds,status"
    work = ["apt-update", "apt-install", "torch", "clone", "pip", "prefetch", "smoke"]
    assert [v for v in pod.verbs() if v != "dpkg-query"] == work

    pod.calls.clear()
    second = boot.run()
    assert {r.status for r in second} == {"skipped"}
    assert set(statuses(boot).values()) == {"skipped"}
    assert set(pod.verbs()) == {"dpkg-query"}  # only the look that the tools are still there


def test_a_failed_step_does_not_stop_the_others_and_is_retried_next_time(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path)
    pod.fail = {"pip"}
    first = {r.step: r for r in boot.run()}
    assert first["deps"].status == "failed" and "pip install failed (exit 1): ERROR: last line says why" in (
        first["deps"].note
    )
    assert first["smoke"].status == "ok" and not (boot.paths.bootstrap / "deps.done").exists()
    pod.fail = set()
    assert statuses(boot)["deps"] == "failed"
    boot.run()
    assert statuses(boot) == {
        "system": "skipped",
        "torch": "skipped",
        "git": "skipped",
        "deps": "ok",
        "hf_login": "not-configured",
        "models": "skipped",
        "smoke": "skipped",
    }


def test_changed_inputs_or_vanished_work_run_the_step_again(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path)
    boot.run()
    (boot.paths.repo / "requirements.txt").write_text("torch==2.4.0\nnumpy==2.0.0\n")
    pod.installed.discard("tmux")  # someone removed a tool
    boot.run()
    assert statuses(boot)["deps"] == "ok" and statuses(boot)["system"] == "ok"
    assert statuses(boot)["git"] == "skipped"


def test_nothing_configured_is_said_so(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path, BootstrapPlan(apt=()))
    boot.run()
    assert statuses(boot) == {
        "system": "not-configured",
        "torch": "ok",
        "git": "not-configured",
        "deps": "not-configured",
        "hf_login": "not-configured",
        "models": "not-configured",
        "smoke": "not-configured",
    }
    assert pod.verbs() == ["torch"]


def test_torch_that_sees_no_gpu_fails_the_check(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path, BootstrapPlan(apt=()))
    pod.fail = {"torch"}
    assert {r.step: r.status for r in boot.run()}["torch"] == "failed"


def test_an_image_without_torch_on_purpose_skips_the_check(tmp_path: Path) -> None:
    """GPUC_BOOTSTRAP_TORCH=skip (a CPU image, the emulators' sandbox pods): no failed step to read past."""
    boot, pod = setup(tmp_path, BootstrapPlan(apt=(), torch=False))
    pod.fail = {"torch"}
    assert {r.step: r.status for r in boot.run()}["torch"] == "not-configured"
    assert "torch" not in pod.verbs()


def test_unpinned_requirements_fail_the_deps_step_and_name_the_culprits(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path)
    pod.requirements = (
        "-r base.txt\nnumpy\ntransformers>=4.40\nflash-attn @ https://x/y.whl\n--extra-index-url https://i\n"
    )
    boot.run()
    (boot.paths.repo / "base.txt").write_text("torch==2.4.0 ; python_version >= '3.10'\naccelerate\n")
    result = {r.step: r for r in boot.run()}["deps"]
    assert result.status == "failed"
    assert "accelerate, numpy, transformers>=4.40" in result.note
    assert "pip" not in pod.verbs()


def test_unpinned_follows_includes_and_skips_options(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text(
        "# comment\n-c b.txt\nx==1 \\\n  --hash=sha256:abc\n\n--index-url https://i\n-e .\n"
    )
    (tmp_path / "b.txt").write_text("y===2\nz\n")
    assert unpinned(tmp_path / "a.txt") == ["z", "-e ."]


def test_secrets_reach_commands_through_the_environment_only(tmp_path: Path) -> None:
    boot, pod = setup(tmp_path, HF_TOKEN=HF, GPUC_GIT_TOKEN=GIT)
    boot.run()
    for argv, env in pod.calls:
        assert not any(HF in a or GIT in a or TOKEN in a for a in argv)
        assert TOKEN not in env.values()  # the heartbeat token stays with the agent
    clone_argv, clone_env = next(c for c in pod.calls if "clone" in c[0])
    assert clone_env["GPUC_GIT_TOKEN"] == GIT and any("credential.helper=!f()" in a for a in clone_argv)
    token_file = Path(boot.env["HF_HOME"]) / "token"
    assert token_file.read_text() == HF and stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.is_relative_to(boot.paths.workspace)  # HF_HOME on the volume
    text = boot.paths.bootstrap_log.read_text()
    assert "hf_login: ok" in text and HF not in text and GIT not in text
    assert HF not in "".join(m.read_text() for m in boot.paths.bootstrap.glob("*.done"))


def test_a_changed_hf_token_logs_in_again(tmp_path: Path) -> None:
    boot, _ = setup(tmp_path, BootstrapPlan(apt=()), HF_TOKEN=HF)
    boot.run()
    boot.env["HF_TOKEN"] = HF + "x"
    assert {r.step: r.status for r in boot.run()}["hf_login"] == "ok"
    assert (Path(boot.env["HF_HOME"]) / "token").read_text() == HF + "x"


def test_a_directory_in_the_way_of_the_clone_fails_clearly(tmp_path: Path) -> None:
    boot, _ = setup(tmp_path)
    boot.paths.repo.mkdir(parents=True)
    (boot.paths.repo / "notes.txt").write_text("mine")
    result = {r.step: r for r in boot.run()}["git"]
    assert result.status == "failed" and "is not a git clone" in result.note


def test_the_plan_comes_from_bootstrap_json_or_from_the_pods_config(tmp_path: Path) -> None:
    paths = make_pod(tmp_path / "pod", git_remote=REPO)
    assert BootstrapPlan.load(paths) == BootstrapPlan(repo_url=REPO)
    paths.bootstrap_plan.write_text(FULL.to_json())
    assert BootstrapPlan.load(paths) == FULL
    paths.bootstrap_plan.write_text(json.dumps({"models": "not-a-list"}))
    with pytest.raises(ConfigError, match="'models' should be a list"):
        BootstrapPlan.load(paths)
    paths.bootstrap_plan.write_text(json.dumps({"torch": "no"}))
    with pytest.raises(ConfigError, match="'torch' should be true or false"):
        BootstrapPlan.load(paths)


def test_the_command_runs_twice_in_a_sandbox_and_the_second_run_skips_done_steps(tmp_path: Path) -> None:
    """python -m gpuc.instance_side bootstrap, real commands, in a sandbox pod."""
    paths = make_pod(tmp_path / "pod")
    paths.workspace.mkdir(exist_ok=True)
    plan = BootstrapPlan(apt=(), smoke="echo smoke >> smoke.txt", python=sys.executable)
    paths.bootstrap_plan.write_text(plan.to_json())
    env = {"PATH": os.environ["PATH"], "GPUC_POD_ROOT": str(paths.root)}

    def bootstrap() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpuc.instance_side", "bootstrap"], env=env, capture_output=True, text=True
        )

    first = bootstrap()
    # No torch in the test environment: that step fails (and says so); the others still run.
    assert first.returncode == 1 and "1 step(s) failed: torch" in first.stdout
    assert statuses_of(paths) == {
        "system": "not-configured",
        "torch": "failed",
        "git": "not-configured",
        "deps": "not-configured",
        "hf_login": "ok",
        "models": "not-configured",
        "smoke": "ok",
    }
    second = bootstrap()
    assert second.returncode == 1
    assert statuses_of(paths)["hf_login"] == "skipped" and statuses_of(paths)["smoke"] == "skipped"
    assert (paths.workspace / "smoke.txt").read_text() == "smoke\n"  # the smoke test ran once
    assert "hf_abcdefghijklmnop" not in first.stdout + second.stdout + paths.bootstrap_log.read_text()


def statuses_of(paths: PodPaths) -> dict[str, str]:
    return {step: status for step, _, status in read_csv(paths.bootstrap_csv)}
