"""The drill's rows where the pod should end because its work did: the job ends or crashes (F1, F2), the
user walks away from a shell or leaves ssh open (F3, F4), a job that works without the GPU (F3j) lives
until it ends."""

from __future__ import annotations

from gpuc.instance_side.procs import SshSession
from gpuc.testkit.drill_stage import EXIT_SLACK_S, MIN, SYNC_S, DrillPod, RowResult, Stage, job_end_row, pod_row


def f1_job_ends(stage: Stage) -> RowResult:
    return _job_exit_row(stage, "F1", "job ends normally, user away", code=0)[0]


def f2_job_crashes(stage: Stage) -> RowResult:
    row, exit_at = _job_exit_row(stage, "F2", "job crashes (exit 137)", code=137)
    pod_id = "f2-pod"
    if any("137" in m for m in stage.messages(pod_id)):
        return row
    rec = stage.real_store.get_pod(pod_id)
    if rec is None or rec.end_at is not None or not stage.pods[pod_id].cut_off_since(exit_at):
        row.problems.append("no notification carries the exit code 137")
        return row
    # A fault refused the pod's end (its exit code with it) for longer than its word may hold the destroy back:
    # the pod ended on time all the same (money first). The user hears it from the reaper (gone, two passes
    # agreeing); the exit code is in what the pod synced before its end (`gpuc logs`).
    stage.run(6 * stage.period, until=lambda: _told_gone(stage, pod_id))
    if not _told_gone(stage, pod_id):
        row.problems.append("its end refused by a fault, and the user never told the pod is gone")
    row.bound_text += "; its end refused by a fault: told by the reaper (gone)"
    return row


def _told_gone(stage: Stage, pod_id: str) -> bool:
    return any(n.kind == "gone" for n in stage.sent(pod_id))


def _job_exit_row(stage: Stage, row: str, failure: str, *, code: int) -> tuple[RowResult, float]:
    pod_id = f"{row.lower()}-pod"
    pod = stage.launch_busy(pod_id, 30 * MIN)
    exit_at = stage.now
    outcome = pod.job_exit(code, 30 * MIN)
    problems = [] if outcome == "destroyed" else [f"wrapper ended with {outcome}"]
    billed = stage.billed_min(pod_id, exit_at)
    if billed is None:  # a fault refused the self-destroy: the reaper takes over, as in F9
        stage.run_until_gone(pod_id, 2 * 3600)
        billed = stage.billed_min(pod_id, exit_at)
        bound = stage.passes_bound_min(stage.settings.silence_limit_s, exit_at)
        text = f"self-destroy failed: as F9{stage.bound_note(exit_at)}"
        problems = []
    else:
        bound, text = (EXIT_SLACK_S + SYNC_S) / MIN, f"10 s + sync ({SYNC_S:g} s)"
    stage.run(2 * stage.period)
    return pod_row(stage, pod, row, failure, "wrapper", billed, bound, text, problems=problems), exit_at


def f3_walks_away(stage: Stage) -> RowResult:
    pod = stage.launch("f3-pod")
    session = SshSession(tty="pts/0", last_input=stage.now)
    pod.ssh.sessions_ = [session]
    for _ in range(6):  # typing for half an hour
        stage.run(5 * MIN)
        pod.ssh.sessions_ = [SshSession(tty="pts/0", last_input=stage.now)]
    left_at = stage.now
    pod.ssh.sessions_ = []  # logs out and walks away
    return _idle_row(stage, pod, "F3", "manual ssh work, user walks away", left_at, 0.0, "20 min (setting)")


def f4_ssh_left_open(stage: Stage) -> RowResult:
    pod = stage.launch("f4-pod")
    stage.run(10 * MIN)
    left_at = stage.now
    pod.ssh.sessions_ = [SshSession(tty="pts/0", last_input=left_at)]  # open, no more input
    window = stage.settings.ssh_input_window_s
    return _idle_row(stage, pod, "F4", "ssh session left open, user at dinner", left_at, window, "20 min + N")


def _idle_row(
    stage: Stage, pod: DrillPod, row: str, failure: str, left_at: float, extra_s: float, text: str
) -> RowResult:
    stage.run_until_gone(pod.pod_id)
    check = stage.settings.idle_check_interval_s
    bound = (stage.settings.idle_destroy_s + extra_s + check) / MIN
    billed = stage.billed_min(pod.pod_id, left_at)
    return pod_row(stage, pod, row, failure, "idle watch", billed, bound, f"{text} + 1 check")


# -- the job under the wrapper, and a pod clock that is off ------------------------------------------
def f3j_job_works_without_gpu(stage: Stage) -> RowResult:
    """A non-python job under the wrapper (a download: a little CPU, a lot of I/O) with the GPU idle, for
    longer than the idle window; then it ends and the wrapper ends the pod. Its result is written at its
    exit: a pod destroyed before then has lost it."""
    pod = stage.launch("f3j-pod")
    pod.job.start(worker="curl", cpu_per_s=0.03, io_per_s=40e6)
    ran_s = stage.settings.idle_destroy_s + 25 * MIN
    stage.run(ran_s)
    caught_by = "idle watch (job tree progress); wrapper"
    return job_end_row(stage, pod, "F3j", "non-python job working, GPU idle (download)", caught_by, ran_s)
