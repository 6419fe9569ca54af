"""The job wrapper with real subprocess jobs: F1, F2 (exit codes, signals), F8, KEEP_ALIVE, DRY_RUN."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fakes.pod import MINUTE, POD_ID, FakeSync, Pod, wire

from gpuc.core.clock import FakeClock
from gpuc.instance_side.manifest import Manifest
from gpuc.instance_side.podfiles import is_ended
from gpuc.instance_side.wrapper import JobWrapper, SignalRelay, exit_status, job_environ


@pytest.fixture
def pod(tmp_path: Path, clock: FakeClock) -> Pod:
    return wire(tmp_path / "pod", clock, role="wrapper")


class ExitCodeFirstSync(FakeSync):
    """Records what the exit-code file held when the sync started."""

    paths: Any = None

    def push(self, results_dir: Path) -> Manifest:
        recorded = self.paths.exit_code.read_text().strip() if self.paths.exit_code.exists() else "missing"
        self.calls.append(f"exit_code={recorded}")
        return super().push(results_dir)


def wrapper(pod: Pod, *, keep_alive: bool = False, dry_run: bool = False, **kw: Any) -> JobWrapper:
    sync = ExitCodeFirstSync(pod.calls, fail=pod.sync.fail, verified=pod.sync.verified)
    sync.paths = pod.paths
    pod.sync = sync
    return JobWrapper(
        pod.ctx.cfg,
        pod.paths,
        ender=pod.ender(keep_alive=keep_alive, dry_run=dry_run),
        clock=pod.clock,
        log=pod.ctx.log,
        env=job_environ(os.environ, pod.ctx.secrets, POD_ID),
        dry_run=dry_run,
        terminal_delivers=kw.pop("terminal_delivers", False),
        **kw,
    )


def py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def sleeper(ready: Path, trap: str = "") -> list[str]:
    return py(f"import pathlib, signal, time\n{trap}\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(60)")


def signal_when_ready(ready: Path, *signals: int) -> threading.Thread:
    """Send signals to THIS process (the wrapper) once the job is up, as a dropped ssh or kill would."""

    def send() -> None:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        for sig in signals:
            os.kill(os.getpid(), sig)
            time.sleep(0.05)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_f1_a_clean_exit_records_the_code_then_syncs_notifies_and_destroys(pod: Pod) -> None:
    code = wrapper(pod).run(py("print('training done')"))
    assert code == 0
    assert pod.calls == ["exit_code=0", "sync", "verify", "notify:job_exit", "destroy"]
    event = pod.functions.events[-1]
    assert event.exit_code == 0 and event.end_at is not None and event.duration_s is not None
    assert "last line" not in event.message  # a clean exit has no error to show
    assert is_ended(pod.paths, POD_ID)


def test_f2_a_crash_carries_its_exit_code_in_the_notification(pod: Pod) -> None:
    code = wrapper(pod).run(py("import sys; sys.exit(3)"))
    assert code == 3
    assert pod.calls == ["exit_code=3", "sync", "verify", "notify:job_exit", "destroy"]
    assert pod.functions.events[-1].exit_code == 3
    assert "job exited with code 3" in pod.functions.events[-1].message


def test_a_failed_job_says_its_last_error_line_and_no_results_path(pod: Pod) -> None:
    """The push of a FAILED job shows its error; the results' destination is the laptop's to say
    (in the pod's words it reached the phone defanged, `file[:]///...`)."""
    wrapper(pod).run(py("print('step 1'); raise SystemExit('CUDA out of memory: tried 2.00 GiB')"))
    message = pod.functions.events[-1].message
    assert "last line: CUDA out of memory: tried 2.00 GiB" in message, message
    assert "://" not in message and "1 file, " in message, message


@pytest.mark.parametrize(("sig", "expected"), [(signal.SIGHUP, 129), (signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_f2_a_signal_to_the_wrapper_reaches_the_job_and_the_pod_still_ends(
    pod: Pod, sig: signal.Signals, expected: int
) -> None:
    ready = pod.paths.workspace / "ready"
    # SIGINT's default in python is KeyboardInterrupt (exit 1); restore the OS default like a C job
    trap = "signal.signal(signal.SIGINT, signal.SIG_DFL)"
    signal_when_ready(ready, sig)
    code = wrapper(pod).run(sleeper(ready, trap))
    assert code == expected
    assert pod.calls == [f"exit_code={expected}", "sync", "verify", "notify:job_exit", "destroy"]
    assert pod.functions.events[-1].exit_code == expected


def test_f2_a_second_sighup_is_ignored_and_the_wrapper_survives_it(pod: Pod) -> None:
    ready = pod.paths.workspace / "ready"
    # A job that survives hangups (nohup-style), counts them, and exits with 40 + the count.
    trap = (
        "import os, threading\n"
        "hups = []\n"
        "signal.signal(signal.SIGHUP, lambda *_: hups.append(1))\n"
        "threading.Timer(1.0, lambda: os._exit(40 + len(hups))).start()"
    )
    signal_when_ready(ready, signal.SIGHUP, signal.SIGHUP, signal.SIGHUP)
    code = wrapper(pod).run(sleeper(ready, trap))
    assert code == 41  # the job saw exactly one SIGHUP
    assert pod.calls[-1] == "destroy"


def test_a_job_killed_outright_still_ends_the_pod(pod: Pod) -> None:
    code = wrapper(pod).run(py("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert code == 137
    assert pod.calls == ["exit_code=137", "sync", "verify", "notify:job_exit", "destroy"]


def test_a_command_that_cannot_start_ends_the_pod_with_127(pod: Pod) -> None:
    code = wrapper(pod).run(["/nonexistent/train"])
    assert code == 127
    assert pod.calls == ["exit_code=127", "sync", "verify", "notify:job_exit", "destroy"]


def test_f8_a_failed_sync_keeps_the_pod_and_nags_at_the_nag_interval(tmp_path: Path, clock: FakeClock) -> None:
    pod = wire(tmp_path / "pod", clock, role="wrapper", nag_interval_s=60 * MINUTE, kept_window_s=24 * 3600)
    pod.sync.fail = "No space left on device"
    start = clock.now()
    code = wrapper(pod, should_stop=lambda: len(pod.functions.events) >= 4).run(py("pass"))
    assert code == 0
    assert "destroy" not in pod.calls and "notify:job_exit" not in pod.calls
    assert pod.functions.kinds() == ["sync_failed"] * 4
    assert all(e.message.startswith("kept alive: sync failed: No space left") for e in pod.functions.events)
    minutes = [round((t - start) / MINUTE) for t in pod.functions.event_times]
    assert minutes == [0, 60, 120, 180]
    assert not is_ended(pod.paths, POD_ID)


def test_f8_an_unverified_sync_keeps_the_pod(pod: Pod) -> None:
    pod.sync.verified = False
    wrapper(pod, should_stop=lambda: True).run(py("pass"))
    assert "destroy" not in pod.calls
    assert pod.functions.events[-1].message.startswith(
        "kept alive: sync failed: the remote listing does not match what was sent; results/ is only on the pod"
    )


def test_the_reminders_stop_when_the_user_ends_the_pod(pod: Pod) -> None:
    pod.sync.fail = "bucket unreachable"

    def user_runs_down() -> bool:
        if len(pod.functions.events) == 2:
            pod.paths.ended.write_text(POD_ID)
        return False

    wrapper(pod, should_stop=user_runs_down).run(py("pass"))
    assert pod.functions.kinds() == ["sync_failed", "sync_failed"]


def test_keep_alive_syncs_and_notifies_but_never_destroys(pod: Pod) -> None:
    code = wrapper(pod, keep_alive=True).run(py("import sys; sys.exit(2)"))
    assert code == 2
    assert pod.calls == ["exit_code=2", "sync", "verify", "notify:job_exit"]
    event = pod.functions.events[-1]
    assert event.end_at is None and "KEEP_ALIVE" in event.message
    assert not is_ended(pod.paths, POD_ID)


def test_dry_run_prints_each_step_in_order_and_takes_none(pod: Pod) -> None:
    code = wrapper(pod, dry_run=True).run(py("pass"))
    assert code == 0
    assert pod.calls == []
    assert not pod.paths.exit_code.exists() and not is_ended(pod.paths, POD_ID)
    steps = [line.split("DRY_RUN: ", 1)[1] for line in pod.log_text().splitlines() if "DRY_RUN: " in line]
    assert [s.split()[1] for s in steps] == ["record", "sync", "notify", "destroy"]


def test_a_refused_self_destroy_is_reported_and_heartbeats_stop(pod: Pod) -> None:
    pod.destroyer.refuse = True
    wrapper(pod).run(py("pass"))
    assert pod.functions.kinds() == ["job_exit", "destroy_failed"]
    assert "the reaper will destroy the pod" in pod.functions.events[-1].message
    assert is_ended(pod.paths, POD_ID)


def test_f13_the_destroy_happens_even_when_notifications_cannot_be_delivered(pod: Pod) -> None:
    pod.functions.down = True
    start = pod.clock.now()
    wrapper(pod).run(py("pass"))
    assert pod.calls[-1] == "destroy"
    assert pod.clock.now() - start <= 10  # the notification's budget, on the virtual clock


def test_the_job_gets_the_users_secrets_but_not_the_pod_token(pod: Pod) -> None:
    out = pod.paths.workspace / "env.json"
    keys = "['HF_TOKEN', 'GPUC_POD_TOKEN', 'GPUC_POD_ID']"
    wrapper(pod).run(
        py(f"import json, os; json.dump({{k: os.environ.get(k) for k in {keys}}}, open({str(out)!r}, 'w'))")
    )
    seen = json.loads(out.read_text())
    assert seen == {"HF_TOKEN": "hf_abcdefghijklmnop", "GPUC_POD_TOKEN": None, "GPUC_POD_ID": POD_ID}


def test_the_job_runs_in_the_workspace(pod: Pod) -> None:
    wrapper(pod).run(py("open('results.txt', 'w').write('x')"))
    assert (pod.paths.workspace / "results.txt").read_text() == "x"


def test_the_wrapper_puts_back_the_signal_handlers_it_found(pod: Pod) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    wrapper(pod).run(py("pass"))
    assert {s: signal.getsignal(s) for s in before} == before


class RecordingProc:
    returncode = None

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send_signal(self, sig: int) -> None:
        self.sent.append(sig)


def test_in_a_terminals_foreground_only_sigterm_is_passed_on(pod: Pod) -> None:
    """The terminal already sent SIGINT/SIGHUP to the job's group: a second copy could cut short the
    job's own clean-up."""
    relay = SignalRelay(pod.ctx.log, terminal_delivers=True)
    job = RecordingProc()
    relay.proc = job  # type: ignore[assignment]
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        relay._on_signal(sig, None)
    assert job.sent == [signal.SIGTERM]


def test_exit_status_follows_the_shell_convention() -> None:
    assert [exit_status(c) for c in (0, 1, -1, -9, -15)] == [0, 1, 129, 137, 143]


def test_the_job_pid_file_names_the_job_and_its_start_for_the_idle_watch(pod: Pod) -> None:
    """The idle watch follows this process's tree; the start time tells it from a pid reused later."""
    seen = pod.paths.workspace / "seen"
    wait_for_file = f"for i in $(seq 1000); do [ -s {pod.paths.job} ] && break; sleep 0.01; done"  # <= 10 s
    script = f'echo "$$ $(cut -d" " -f22 /proc/$$/stat)" > {seen}; {wait_for_file}; cat {pod.paths.job} >> {seen}'
    assert wrapper(pod).run(["sh", "-c", script]) == 0
    own, written = seen.read_text().splitlines()
    assert written == own  # "PID START", as the job itself sees them in /proc
    assert not pod.paths.job.exists()  # gone with the job


def test_a_recovered_attempt_restores_the_last_push_before_the_job_starts(pod: Pod, tmp_path: Path) -> None:
    from gpuc.core.pod import RESUME_ENV
    from gpuc.instance_side.pushmanifest import MANIFEST_NAME, PushManifest

    dest = tmp_path / "bucket"
    (dest / "logs").mkdir(parents=True)
    (dest / "step-007.txt").write_text("7")
    (dest / MANIFEST_NAME).write_text(PushManifest("x", 1.0, {"step-007.txt": (1, 1)}).to_json())
    job = wrapper(pod)
    job.env = {**job.env, RESUME_ENV: f"file://{dest}"}
    seen = pod.paths.workspace / "seen.txt"
    listing = f"str(sorted(os.listdir({str(pod.paths.results)!r})))"
    code = job.run(py(f"import os; open({str(seen)!r}, 'w').write({listing})"))
    assert code == 0 and seen.read_text() == "['step-007.txt']"


def test_a_recovered_attempt_that_cannot_restore_starts_no_job(pod: Pod, tmp_path: Path) -> None:
    from gpuc.core.pod import RESUME_ENV
    from gpuc.instance_side.wrapper import RESUME_FAILED

    job = wrapper(pod)
    job.env = {**job.env, RESUME_ENV: f"file://{tmp_path / 'nothing-here'}"}
    ran = pod.paths.workspace / "ran.txt"
    assert job.run(py(f"open({str(ran)!r}, 'w').write('x')")) == RESUME_FAILED
    assert not ran.exists()  # never started over, billing hours to redo the work
