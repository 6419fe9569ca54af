"""`gpuc up ... | tee log` stopped at each of its steps leaves no pod billing.

The real CLI in a subprocess rents from the RunPod emulator over loopback HTTP, reaches the pod over a loopback
sshd, registers with a real watchdog in a thread. Its stdout goes into a real `tee`, in the same process group,
as a shell pipeline puts them. Each step of `up` is held open by what it waits on, and the test waits for that
hold (never a sleep guess) before it stops `up`:

- create: the emulator applies the create and holds its answer (the pod exists, `up` has no id);
- registration: the watchdog holds the register request;
- boot wait: the emulator keeps the pod provisioning;
- upload, bootstrap, job start: a stand-in `ssh` on gpuc's PATH holds the remote command of that step.

Then `tee` dies first, as it does on Ctrl-C, and the signal goes to the process group. What `up` created must be
destroyed before it prints anything (its first print fails on the broken pipe), the exit code must not be 0, and
with stderr still a terminal it says what it destroyed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpuc.core.settings import Settings
from gpuc.core.settingvalues import SecretStr
from gpuc.core.signing import new_token
from gpuc.functions import handlers
from gpuc.functions.server import ServerHandle, start_in_thread
from gpuc.testkit.emulators.server import EmulatorServer
from gpuc.testkit.platform import Platform, client_environ, start_platform, write_env_file
from gpuc.testkit.sshd import LoopbackSshd, start_loopback_sshd

pytestmark = [pytest.mark.sshd, pytest.mark.e2e]  # the real CLI through tee, signals at every step: minutes

WAIT_S = 60.0  # for a hold to be reached, or for `up` to end: generous, never a guess at a step's timing
STEPS = ("create", "registration", "boot", "upload", "bootstrap", "job")
# The remote command of each ssh-held step (client/onpod: put_file into the upload folder, the bootstrap, the
# wrapper's spawn): what the stand-in ssh holds.
SSH_HOLDS = {"upload": "/upload/", "bootstrap": "gpuc.instance_side bootstrap", "job": "gpuc.instance_side run "}
SIGNALS = {"SIGINT": signal.SIGINT, "SIGHUP": signal.SIGHUP, "SIGTERM": signal.SIGTERM}


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackSshd]:
    server = start_loopback_sshd(tmp_path_factory.mktemp("sshd"))
    yield server
    server.stop()


def wait_for(what: str, ready: Callable[[], bool], proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"`up` ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"never reached: {what}")
        time.sleep(0.02)


class RegisterHold:
    """The watchdog's register route, held until released: `up` waits on its answer."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.reached = threading.Event()
        self.release = threading.Event()
        real = handlers.dispatch  # what the watchdog's server calls for every request

        def dispatch(request: Any, deps: Any, now: float) -> Any:
            if self.armed and request.method == "POST" and request.path == "/v1/pods":
                self.reached.set()
                self.release.wait(WAIT_S)
            return real(request, deps, now)

        monkeypatch.setattr("gpuc.functions.server.dispatch", dispatch)


def ssh_stand_in(folder: Path, hold: str | None, mark: Path, gate: Path) -> Path:
    """An `ssh` that holds the remote command containing `hold` (marking that it did) until `gate` exists,
    then runs the real one. gpuc gives ssh only PATH and a few variables: what it needs is written in."""
    real = shutil.which("ssh")
    assert real is not None, "the loopback sshd fixture needs the ssh client"
    folder.mkdir(parents=True, exist_ok=True)
    held = (
        ""
        if hold is None
        else (f'case "$last" in *"{hold}"*) : > "{mark}"; while [ ! -e "{gate}" ]; do sleep 0.02; done;; esac\n')
    )
    script = folder / "ssh"
    script.write_text(f'#!/bin/sh\nfor last; do :; done\n{held}exec "{real}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


@dataclass
class Run:
    """One `gpuc up ... | tee log` in a process group of its own, as a shell runs a pipeline."""

    proc: subprocess.Popen[bytes]
    tee: subprocess.Popen[bytes]
    err_lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @property
    def stderr(self) -> str:
        return "".join(self.err_lines)

    def stop(self, sig: int | None) -> int:
        """`tee` dies first (the pipe breaks), then the signal reaches the whole group; `up`'s exit code."""
        self.tee.kill()
        self.tee.wait(WAIT_S)
        if sig is not None:
            os.killpg(self.tee.pid, sig)
        return self.finish()

    def finish(self) -> int:
        code = self.proc.wait(WAIT_S)
        if self.reader is not None:
            self.reader.join(WAIT_S)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return code


def heed_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@dataclass
class World:
    tmp: Path
    sshd: LoopbackSshd
    emulator: EmulatorServer
    platform: Platform
    watchdog: ServerHandle
    register: RegisterHold
    env: dict[str, str]
    project: Path
    mark: Path
    gate: Path

    def up(self, hold: str | None = None, *, stderr_broken: bool = False, nohup: bool = False) -> Run:
        path = ssh_stand_in(self.tmp / "shim", hold, self.mark, self.gate)
        env = {**self.env, "PATH": f"{path}{os.pathsep}{self.env.get('PATH', '')}"}
        read_end, write_end = os.pipe()
        tee = subprocess.Popen(
            ["tee", str(self.tmp / "log")], stdin=read_end, stdout=subprocess.DEVNULL, process_group=0
        )
        argv = [sys.executable, "-m", "gpuc.client.cli", "up", "intr", "-y", "--", "python", "train.py"]
        argv = ["nohup", *argv] if nohup else argv  # the real one: SIGHUP ignored, then exec
        proc = subprocess.Popen(
            argv,
            cwd=self.project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=write_end if stderr_broken else subprocess.PIPE,
            process_group=tee.pid,
            # A terminal's `up` heeds SIGHUP, whatever the suite was started under (`nohup make test` makes
            # every child ignore it, and `up` then rightly goes on): only `nohup` here asks for that.
            preexec_fn=heed_sighup,
        )
        os.close(read_end)  # `tee` alone reads the pipe: when it dies, the pipe is broken
        os.close(write_end)
        run = Run(proc, tee)
        if proc.stderr is not None:
            stream = proc.stderr

            def read() -> None:
                for line in iter(stream.readline, b""):
                    run.err_lines.append(line.decode(errors="replace"))

            run.reader = threading.Thread(target=read, daemon=True)
            run.reader.start()
        return run

    def hold(self, step: str) -> str | None:
        """Arm the hold of `step`; the ssh pattern when the stand-in ssh holds it."""
        emu = self.emulator.emulator
        if step == "create":
            emu.faults.add("create", "timeout_after_commit", times=1)
        elif step == "registration":
            self.register.armed = True
        elif step == "boot":
            emu.boot_polls = 10**9  # type: ignore[attr-defined]
        return SSH_HOLDS.get(step)

    def reached(self, step: str) -> Callable[[], bool]:
        emu = self.emulator.emulator
        if step == "create":
            return lambda: bool(emu.ops("create")) and bool(self.platform.alive())
        if step == "registration":
            return self.register.reached.is_set
        if step == "boot":
            return lambda: len([r for r in emu.requests if r.op.startswith("get")]) >= 2
        return self.mark.exists

    def alive(self) -> dict[str, tuple[str, int]]:
        return self.platform.alive()


@pytest.fixture
def world(
    sshd: LoopbackSshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[World]:
    emulator, platform = start_platform(getattr(request, "param", "runpod"), sshd)
    token = new_token()
    register = RegisterHold(monkeypatch)
    watchdog = start_in_thread(Settings(home=tmp_path / "functions", admin_token=SecretStr(token)), port=0)
    home = tmp_path / "home"
    write_env_file(home)
    (home / "config.json").write_text('{"bootstrap_apt": ""}')
    env = client_environ(emulator, sshd, home)
    env.update({"GPUC_WATCHDOG_URL": watchdog.url, "GPUC_ADMIN_TOKEN": token})
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import time\ntime.sleep(30)\n")
    w = World(tmp_path, sshd, emulator, platform, watchdog, register, env, project, tmp_path / "held", tmp_path / "go")
    try:
        yield w
    finally:
        w.gate.touch()  # whatever is still held goes on (and finds its pod gone)
        register.release.set()
        platform.close()
        emulator.stop()
        watchdog.stop()


def stopped_at(world: World, step: str, sig: int | None, *, stderr_broken: bool = False) -> tuple[int, Run]:
    run = world.up(world.hold(step), stderr_broken=stderr_broken)
    try:
        wait_for(f"`up` held at {step}", world.reached(step), run.proc)
        code = run.stop(sig)
    finally:
        end(run)
    return code, run


def end(run: Run) -> None:
    """A run the test gave up on ends here (its assertion says why)."""
    for proc in (run.proc, run.tee):
        if proc.poll() is None:
            proc.kill()
            proc.wait(WAIT_S)
    if run.proc.stderr is not None and not run.proc.stderr.closed:
        if run.reader is not None:
            run.reader.join(WAIT_S)
        run.proc.stderr.close()


def created_pods(world: World) -> list[str]:
    """The pods this run created at the emulator, alive or destroyed since."""
    return sorted(set(world.platform.destroyed_by) | set(world.alive()))


@pytest.mark.parametrize("sig_name", list(SIGNALS))
@pytest.mark.parametrize("step", STEPS)
def test_up_stopped_at_each_step_behind_a_dead_tee_leaves_no_pod(world: World, step: str, sig_name: str) -> None:
    code, run = stopped_at(world, step, SIGNALS[sig_name])
    assert world.alive() == {}, f"pods left billing after {sig_name} at {step}: {world.alive()}\n{run.stderr}"
    (pod_id,) = created_pods(world)  # the step really had a pod to lose
    assert code == 128 + SIGNALS[sig_name], run.stderr
    assert f"destroyed {pod_id}" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    if step not in ("create", "registration"):  # the ledger holds its row from the registration on
        assert re.search(rf"destroyed {pod_id} \(\S+\); it ran \S+, \$\d+\.\d{{4}}", run.stderr), run.stderr


@pytest.mark.parametrize("world", ["vast"], indirect=True)
@pytest.mark.parametrize("step", ["create", "upload"])
def test_on_vast_too_a_stopped_up_leaves_no_instance(world: World, step: str) -> None:
    """Vast finds a cut-off create by its label, and destroys with its own API."""
    code, run = stopped_at(world, step, signal.SIGINT)
    assert world.alive() == {}, run.stderr
    (pod_id,) = created_pods(world)
    assert code == 128 + signal.SIGINT
    assert f"destroyed {pod_id}" in run.stderr, run.stderr


@pytest.mark.parametrize("step", STEPS)
def test_up_stopped_with_stderr_in_the_pipe_too_still_destroys_and_exits_quietly(world: World, step: str) -> None:
    """`gpuc up ... 2>&1 | tee log`: nothing can be printed at all; the destroy happens anyway."""
    code, _ = stopped_at(world, step, signal.SIGINT, stderr_broken=True)
    assert world.alive() == {}, f"pods left billing after Ctrl-C at {step}: {world.alive()}"
    assert len(created_pods(world)) == 1
    assert code == 128 + signal.SIGINT


def test_a_broken_pipe_alone_destroys_the_pod(world: World) -> None:
    """`gpuc up ... 2>&1 | head -1`: the reader of gpuc's lines goes away with no signal; `up`'s next line
    fails, and the pod it can no longer report on is destroyed, not left billing unseen."""
    run = world.up(world.hold("upload"), stderr_broken=True)
    try:
        wait_for("`up` held at upload", world.reached("upload"), run.proc)
        run.tee.kill()
        run.tee.wait(WAIT_S)
        world.gate.touch()  # the upload goes on, and `up`'s next line meets the broken pipe
        code = run.finish()
    finally:
        end(run)
    assert world.alive() == {}
    assert len(created_pods(world)) == 1
    assert code != 0


def test_a_broken_stdout_alone_is_no_reason_to_end_the_pod(world: World) -> None:
    """`gpuc up ... | head -1` without --wait: gpuc's lines are on stderr (the terminal), nothing of `up`'s goes
    to the pipe, so its reader going away changes nothing: the job starts, as asked."""
    run = world.up(world.hold("upload"))
    try:
        wait_for("`up` held at upload", world.reached("upload"), run.proc)
        run.tee.kill()
        run.tee.wait(WAIT_S)
        world.gate.touch()
        code = run.finish()
    finally:
        end(run)
    assert code == 0, run.stderr
    assert len(world.alive()) == 1 and "job STARTED" in run.stderr, run.stderr


def test_a_create_cut_off_before_the_provider_applied_it_finds_nothing_and_says_where_to_look(world: World) -> None:
    world.emulator.emulator.faults.add("create", "timeout", times=1)  # held before the create is applied
    run = world.up()
    try:
        wait_for("the create request", lambda: bool(world.emulator.emulator.ops("create")), run.proc)
        code = run.stop(signal.SIGINT)
    finally:
        end(run)
    assert world.alive() == {} and created_pods(world) == []
    assert code == 128 + signal.SIGINT
    assert "no pod named gpuc-" in run.stderr and "gpuc ls" in run.stderr and "watchdog" in run.stderr, run.stderr


def test_a_second_ctrl_c_during_the_destroy_does_not_stop_it(world: World) -> None:
    """The destroy's request hangs at the provider; Ctrl-C again meanwhile is deferred and said, and the
    destroy completes once the provider answers."""
    emu = world.emulator
    emu.hang_s = WAIT_S
    run = world.up(world.hold("upload"))
    try:
        wait_for("`up` held at upload", world.reached("upload"), run.proc)
        emu.emulator.faults.add("destroy", "timeout", times=1)
        run.tee.kill()
        run.tee.wait(WAIT_S)
        os.killpg(run.tee.pid, signal.SIGINT)
        wait_for("the destroy request", lambda: bool(emu.emulator.ops("destroy")), run.proc)
        os.killpg(run.tee.pid, signal.SIGINT)
        wait_for("the second Ctrl-C said", lambda: "still destroying" in run.stderr, run.proc)
        emu._released.set()  # the provider answers (the held request is dropped; the retry destroys)
        code = run.finish()
    finally:
        end(run)
    assert world.alive() == {}, run.stderr
    (pod_id,) = created_pods(world)
    assert code == 128 + signal.SIGINT
    assert f"destroyed {pod_id}" in run.stderr, run.stderr


def test_under_nohup_a_sighup_is_still_ignored_and_up_finishes(world: World) -> None:
    """`nohup gpuc up ... &` asked for `up` to outlive the terminal: its SIGHUP must not destroy the pod."""
    run = world.up(world.hold("upload"), nohup=True)
    try:
        wait_for("`up` held at upload", world.reached("upload"), run.proc)
        os.kill(run.proc.pid, signal.SIGHUP)  # delivered now: the process sleeps in the held ssh's wait
        world.gate.touch()
        code = run.finish()
    finally:
        end(run)
    assert code == 0, run.stderr
    assert len(world.alive()) == 1, run.stderr
