"""A job's outcome, as a user sees it: the real `gpuc` command in a subprocess, local pods (real processes),
the local watchdog server over HTTP. `--wait` exits with the JOB's exit code and says where the results
went; a job whose outcome cannot be learnt says so and exits non-zero; `gpuc logs` shows the output
from the pod, then from the results once the pod is gone."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.localworld import ADMIN, World, only_run, open_world, wait_for

from gpuc.client.context import Ctx
from gpuc.client.jobs.follow import Follow, follow, report
from gpuc.client.jobs.podlog import LogPrinter
from gpuc.client.pods.plan import UpOptions
from gpuc.client.pods.up import up
from gpuc.core.errors import GpucError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with open_world(tmp_path) as opened:
        yield opened


# -- --wait -----------------------------------------------------------------------------------------------
def test_up_wait_streams_the_job_and_exits_with_its_code(world: World) -> None:
    done = world.gpuc("up", "exp", "--wait", "--", "python", "train.py", "3")
    assert done.returncode == 3, done.stderr
    assert "epoch 1 loss 0.9\na warning\n" in done.stdout and "done\n" in done.stdout, "the job's output, streamed"
    (outcome,) = [line for line in done.stderr.splitlines() if "job exited" in line]
    run = only_run(world)
    assert "job exited with code 3 after" in outcome and f"pod {run.pod_id}" in outcome and "$0.0" in outcome
    assert f"results and log: file://{world.home}/results/exp/{run.run_id}/" in outcome
    assert world.provider().list_pods() == [], "the wrapper destroyed it"
    assert run.phase == "ended"
    # After the destroy, the log is where the results went.
    logs = world.gpuc("logs", run.pod_id)
    assert logs.returncode == 0 and logs.stdout == "epoch 1 loss 0.9\na warning\ndone\n"
    assert "job exited with code 3" in logs.stderr
    assert world.gpuc("logs", "exp").stdout == logs.stdout, "an experiment name finds its latest run"


def test_up_without_wait_says_the_job_started_not_that_it_succeeded(world: World) -> None:
    done = world.gpuc("up", "exp", "--", "python", "train.py", "1")
    assert done.returncode == 0, done.stderr
    assert "job STARTED on" in done.stderr and "gpuc logs" in done.stderr and done.stdout == ""
    assert "succeeded" not in done.stderr.lower() and "exited" not in done.stderr


def test_the_wait_options_are_checked_before_anything_is_rented(world: World) -> None:
    assert world.gpuc("up", "exp", "--wait").returncode == 2
    assert world.gpuc("up", "exp", "--timeout", "5m", "--", "python", "train.py").returncode == 2
    refused = world.gpuc("up", "exp", "--wait", "--timeout", "soon", "--", "python", "train.py")
    assert refused.returncode == 2 and "duration" in refused.stderr
    assert world.deps().runs.all() == [] and world.provider().list_pods() == []


def test_a_wait_that_times_out_leaves_the_job_running_and_says_so(world: World) -> None:
    done = world.gpuc("up", "exp", "--wait", "--timeout", "1s", "--", "python", "train.py", "0", "30")
    assert done.returncode == 124, done.stderr
    assert "stopped waiting (--timeout)" in done.stderr
    assert [p.status for p in world.provider().list_pods()] == ["running"], "the job goes on"


# Incident: `gpuc up exp -- python train.py` in a folder without train.py rented a pod, bootstrapped it
# (minutes, billed), then the job died at once with "can't open file". Then: refused on the pod,
# still after a create and a boot. Now refused on the laptop, from the upload's list, with a did-you-mean.
def test_a_script_missing_from_the_upload_is_refused_before_anything_is_rented(world: World) -> None:
    done = world.gpuc("up", "exp", "--wait", "--", "python", "trian.py")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "trian.py is not in the upload" in done.stderr and "nothing was rented" in done.stderr
    assert "did you mean train.py?" in done.stderr
    assert world.provider().list_pods() == [] and world.deps().runs.all() == [], "nothing created, no intent"
    assert "creating" not in done.stderr


def test_a_script_in_the_upload_but_missing_on_the_pod_destroys_the_new_pod(world: World) -> None:
    # GPUC_GIT_REMOTE's clone lands in repo/: not the upload's to decide, so the pod's check stays the net.
    done = world.gpuc("up", "exp", "--wait", "--", "python", "repo/train.py", GPUC_GIT_REMOTE="file:///nowhere")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "repo/train.py not in the job's folder" in done.stderr and "destroyed" in done.stderr
    assert world.provider().list_pods() == []
    assert only_run(world).phase == "failed"
    assert "job STARTED" not in done.stderr, "the job never ran"


def test_run_refuses_a_missing_script_and_keeps_the_pod(world: World) -> None:
    assert world.gpuc("up", "exp").returncode == 0
    pod_id = only_run(world).pod_id
    refused = world.gpuc("run", pod_id, "--wait", "--", "python", "nothere.py")
    assert refused.returncode == 2 and "nothere.py not in the job's folder" in refused.stderr
    assert [p.id for p in world.provider().list_pods()] == [pod_id], "a pod not created for this job is kept"


# -- kept pods, and a previous job's outcome ----------------------------------------------------------------
def test_a_kept_pod_reports_the_failed_sync_and_a_later_job_reports_its_own_code(world: World) -> None:
    unsyncable = "nowhere://bucket"
    first = world.gpuc("up", "exp", "--wait", "--", "python", "train.py", "0", GPUC_RESULTS_BUCKET=unsyncable)
    assert first.returncode == 120, first.stderr  # KEPT: its own code, not the job's failure
    assert "results sync FAILED" in first.stderr and "KEPT" in first.stderr
    pod_id = only_run(world).pod_id
    assert [p.id for p in world.provider().list_pods()] == [pod_id]
    # The first job's outcome is still on the pod: it must not be taken for the second job's.
    second = world.gpuc("run", pod_id, "--wait", "--", "python", "train.py", "4", GPUC_RESULTS_BUCKET=unsyncable)
    assert second.returncode == 120, second.stderr  # its sync failed too: KEPT; its own code is in the line
    assert "job exited with code 4" in second.stderr
    live = world.gpuc("logs", pod_id)
    assert live.returncode == 0 and live.stdout.endswith("done\n") and "job exited with code 4" in live.stderr


def test_logs_never_print_gpucs_own_tokens(world: World) -> None:
    # A job that prints the admin token (assembled on the pod: a file holding it whole would not be uploaded).
    half = len(ADMIN) // 2
    (world.project / "leak.py").write_text(f"print('token:', {ADMIN[:half]!r} + {ADMIN[half:]!r})\n")
    done = world.gpuc("up", "exp", "--wait", "--", "python", "leak.py")
    assert done.returncode == 0, done.stderr
    assert ADMIN not in done.stdout + done.stderr and "token: ***" in done.stdout
    logs = world.gpuc("logs", "exp")
    assert ADMIN not in logs.stdout and "token: ***" in logs.stdout


# -- when the results cannot tell ---------------------------------------------------------------------------
def _finished_pod(world: World, code: int) -> tuple[Ctx, Any, Any]:
    deps = world.deps()
    job_id = "job-under-test"
    pod = up(
        UpOptions(experiment="exp", command=["python", "-c", f"raise SystemExit({code})"], job_id=job_id),
        deps,
    )
    assert pod is not None
    assert wait_for(lambda: world.provider().get(pod.id) is None)
    return deps, pod, deps.runs.find(pod.id)


def test_without_the_results_the_watchdogs_job_exit_tells_the_code(world: World) -> None:
    deps, pod, run = _finished_pod(world, 7)
    (world.home / "results" / "exp" / run.run_id / "logs" / "outcome.json").unlink()
    state = follow(deps, pod, job_id="job-under-test", out=io.BytesIO())
    assert state.gone
    result = report(deps, pod, run, state, job_id="job-under-test", since=run.created_at)
    assert result.exit_code == 7 and "from the watchdog's notification" in result.line


def _no_watchdog() -> Any:
    raise GpucError("the watchdog is away", hint="start it")


def test_an_outcome_nobody_knows_is_said_and_exits_non_zero(world: World) -> None:
    deps, pod, run = _finished_pod(world, 0)
    (world.home / "results" / "exp" / run.run_id / "logs" / "outcome.json").unlink()
    deps.watchdog.status = _no_watchdog  # type: ignore[method-assign]
    gone = Follow(LogPrinter(io.BytesIO(), []), gone=True)
    result = report(deps, pod, run, gone, job_id="job-under-test", since=run.created_at)
    assert result.exit_code == 125 and "outcome is unknown" in result.line  # the literal, as a script sees it


def test_another_jobs_outcome_at_the_destination_is_not_this_ones(world: World) -> None:
    deps, pod, run = _finished_pod(world, 0)
    deps.watchdog.status = _no_watchdog  # type: ignore[method-assign]
    gone = Follow(LogPrinter(io.BytesIO(), []), gone=True)
    assert report(deps, pod, run, gone, job_id="job-under-test", since=run.created_at).exit_code == 0
    result = report(deps, pod, run, gone, job_id="another-job", since=run.created_at)
    assert result.exit_code == 125
