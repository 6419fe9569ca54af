"""The mutants of warm pods as their own mode: the warm time counted from the last job's end and never warning a
job, the deadline that follows the jobs within the budget, `run --clean` that never removes what was not pushed,
each job's own log. Exact replacements in table.py's format; each was tried by hand."""

from __future__ import annotations

from mutant import Mutant

IDLE = "tests/instance_side/test_warm_idle.py"
CLEAN = "tests/instance_side/test_clean_results.py"
DEADLINE = "tests/client/test_warm_deadline.py"
PAGE = "tests/functions/test_warm_watchdog.py"

MUTANTS_WARM: tuple[Mutant, ...] = (
    Mutant(
        "warm-time-eaten-by-a-quiet-job",
        "up --warm 30m: a job quiet for 10 min leaves the pod 20 min of warm time after it, not 30",
        "instance_side/agent.py",
        "        if self._job_seen is not None:\n            self.state = IdleState()",
        "        if self._job_seen is not None:\n            pass",
        (f"{IDLE}::test_a_quiet_job_does_not_use_up_the_warm_time",),
    ),
    Mutant(
        "warm-timer-judges-a-job",
        "up --warm 1m: a job quiet for a minute is ended as idle by the warm timer, not the usual idle times",
        "instance_side/agent.py",
        "        self.th = Thresholds.from_config(self.cfg, job=job)",
        "        self.th = Thresholds.from_config(self.cfg, job=False)",
        (f"{IDLE}::test_a_hung_job_on_a_warm_pod_is_still_ended_at_the_usual_idle_times",),
    ),
    Mutant(
        "warm-warning-at-the-jobs-end",
        "up --warm 1m: 'idle 0 min: destroying in 1 min' the moment a job ends (and 'hung?' during it)",
        "core/warm.py",
        "    return max(0.0, min(idle_destroy_s - idle_warn_s, warm_s / 2))",
        "    return max(0.0, idle_destroy_s - idle_warn_s)",
        (f"{IDLE}::test_a_4_second_job_on_warm_1m_gets_no_warning_then_the_warm_time_counts_from_its_end",),
    ),
    Mutant(
        "warm-deadline-12h",
        "up --warm 30m: the budget holds 12 h for the pod ($5.28 on a 4090) and refuses the next up",
        "client/pods/upargs.py",
        "    if warm_s and max_hours is None:",
        "    if False:",
        (
            f"{DEADLINE}::test_the_price_line_says_what_the_budget_holds_for_a_warm_pod",
            f"{DEADLINE}::test_the_budget_holds_a_warm_pod_at_its_job_and_warm_time_not_12_hours",
        ),
    ),
    Mutant(
        "warm-run-keeps-the-old-deadline",
        "gpuc run on a warm pod: the deadline stays where up set it, and the fifth job is ended under it",
        "client/pods/warm.py",
        "    if record.deadline_at >= wanted:",
        "    if True:",
        (f"{DEADLINE}::test_each_run_moves_the_deadline_to_a_job_and_the_warm_time_from_its_start",),
    ),
    Mutant(
        "warm-move-past-the-budget",
        "gpuc run on a warm pod moves its deadline past what the month's budget can hold",
        "client/pods/warm.py",
        "    over = [w for w in weights if w.over]",
        "    over = [w for w in weights if False]",
        (f"{DEADLINE}::test_a_move_the_budget_cannot_hold_is_not_made",),
    ),
    Mutant(
        "clean-removes-what-was-not-pushed",
        "gpuc run --clean deletes a file the destination does not hold as it is (written since the push)",
        "instance_side/clean.py",
        "        elif manifest.files.get(name) != (st.st_size, st.st_mtime_ns) or name in manifest.waiting:",
        "        elif False:",
        (
            f"{CLEAN}::test_it_removes_what_the_destination_holds_and_keeps_what_it_does_not",
            f"{CLEAN}::test_a_file_changed_between_the_push_and_the_removal_stays",
        ),
    ),
    Mutant(
        "clean-after-a-failed-push",
        "gpuc run --clean empties results/ although the push failed: the results exist nowhere",
        "instance_side/clean.py",
        "    if report.error is not None:",
        "    if False:",
        (f"{CLEAN}::test_a_push_that_fails_removes_nothing",),
    ),
    Mutant(
        "clean-under-a-job",
        "gpuc run --clean --force empties results/ under a running job",
        "instance_side/clean.py",
        "    _no_job(paths)\n",
        "    pass\n",
        (f"{CLEAN}::test_never_under_a_running_job",),
    ),
    Mutant(
        "next-job-truncates-the-last-log",
        "a warm pod's next job writes over the last one's log: a crash's traceback is gone after the next run",
        "instance_side/joblog.py",
        "        with contextlib.suppress(OSError):\n            self.path.unlink(missing_ok=True)\n",
        "",
        ("tests/instance_side/test_job_log.py::test_each_job_on_a_kept_pod_keeps_its_own_log_at_the_destination",),
    ),
    Mutant(
        "page-warm-reads-idle-now",
        "the status page: a warm pod with no job 'ends itself idle at ... (now)' while ls says 28 min",
        "functions/actions/status_page.py",
        "    if pod.warm_s:\n        return pod.last_seen",
        "    if False:\n        return pod.last_seen",
        (f"{PAGE}::test_the_page_says_a_warm_pod_waits_for_its_next_job_until_its_warm_time_ends",),
    ),
)
