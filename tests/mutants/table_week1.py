"""The mutants of the warm pod, slips caught before renting, `ls` NEXT and the exit codes, as exact
replacements in table.py's format: each breaks one check, and `tests` must fail on it. The lead merges
MUTANTS_WEEK1 into MUTANTS. Each was tried by hand; note that tests/client/test_warm.py and
test_exit_codes.py's deadline row need local pods that run the checkout's instance_side (they do on main)."""

from __future__ import annotations

from mutant import Mutant

EXITS = "tests/client/test_exit_codes.py"
SLIPS = "tests/client/test_slips.py"
WARM = "tests/client/test_warm.py"

MUTANTS_WEEK1: tuple[Mutant, ...] = (
    Mutant(
        "wait-ended-idle-is-unknown",
        "--wait: a pod ended idle under its job exits 125 (unknown), not its own code 122",
        "client/jobs/follow.py",
        "if outcome is not None and outcome.exit_code is None else None",
        "if False else None",
        (f"{EXITS}::test_a_job_ended_idle_exits_with_the_idle_code_and_says_so_first",),
    ),
    Mutant(
        "wait-kept-is-job-failure",
        "--wait: a job that exited 0 on a pod KEPT for a failed sync exits 1, as if the job failed",
        "client/jobs/follow.py",
        "            KEPT_SYNC_FAILED_EXIT,\n",
        "            code or 1,\n",
        (f"{EXITS}::test_a_job_that_exited_0_on_a_kept_pod_exits_with_the_kept_code",),
    ),
    Mutant(
        "up-typo-rents",
        "up: a script not in the upload (trian.py) rents, boots and uploads before it is refused",
        "client/pods/up.py",
        "check_in_bundle(opts.command, opts.upload, clone=bool(ctx.settings.git_remote))",
        "pass",
        ("tests/client/test_outcome.py::test_a_script_missing_from_the_upload_is_refused_before_anything_is_rented",),
    ),
    Mutant(
        "up-python-is-the-name",
        "up -- python train.py: 'python' taken for the experiment's name, the job runs 'train.py'",
        "client/pods/jobline.py",
        "ctx.meta[NO_NAME] = not isinstance",
        "ctx.meta[NO_NAME] = False and not isinstance",
        (f"{SLIPS}::test_up_without_a_name_takes_the_folders_and_says_so_never_python",),
    ),
    Mutant(
        "up-deadline-inside-lead",
        "up: a --max-hours inside the lead plus a boot is rented; the job gets no time",
        "client/pods/plan.py",
        "    if max_hours * 3600 < least_s:",
        "    if False:",
        (f"{SLIPS}::test_a_deadline_inside_the_lead_plus_a_boot_is_refused_naming_the_minimum",),
    ),
    Mutant(
        "up-abort-not-ended",
        "up: a pod it destroyed itself stays open at the watchdog: a false 'gone at the provider' later",
        "client/pods/abort.py",
        "        destroyed.append(pod.id)  # ended at the watchdog",
        "        pass  # ended at the watchdog",
        (f"{SLIPS}::test_a_pod_up_destroyed_itself_is_ended_at_the_watchdog_not_found_gone",),
    ),
    Mutant(
        "bootstrap-deps-failure-starts-job",
        "up: requirements that did not install start the job anyway; the pod idles, billed",
        "client/onpod/provision.py",
        "if report.deps_failed is not None and job_needs_deps:",
        "if report.deps_failed is not None and job_needs_deps and False:",
        ("tests/ssh/test_upload_loopback.py::test_requirements_that_fail_to_install_stop_the_job_with_the_error",),
    ),
    Mutant(
        "deadline-says-reached-early",
        "the pod's deadline end says 'reached' two minutes before the deadline",
        "instance_side/deadline.py",
        'in {left / 60:.0f} min: ending now,"',
        'reached,"',
        (
            "tests/instance_side/test_pod_deadline.py::test_it_warns_15_min_ahead_then_ends_through_the_ender_a_lead_before",
        ),
    ),
    Mutant(
        "warm-pod-destroyed-after-job",
        "up --warm: the job's end destroys the pod anyway; each edit pays a new start",
        "instance_side/__main__.py",
        'keep_alive = flag(environ, "KEEP_ALIVE") or ctx.cfg.warm_s > 0',
        'keep_alive = flag(environ, "KEEP_ALIVE")',
        (f"{WARM}::test_edit_and_rerun_on_a_warm_pod_then_down",),
    ),
    Mutant(
        "warm-pod-idle-uses-default",
        "up --warm 3s: the idle watch ignores the warm time",
        "instance_side/idle.py",
        "        if cfg.warm_s > 0:  # `up --warm`",
        "        if False:  # `up --warm`",
        (f"{WARM}::test_a_warm_pod_left_idle_ends_itself_after_the_warm_time",),
    ),
    Mutant(
        "ls-kept-reads-ok",
        "gpuc ls: a pod KEPT after a failed sync reads as any running pod",
        "client/pods/survey.py",
        '    row["kept"] = "sync failed" if kept else None',
        '    row["kept"] = None',
        ("tests/client/test_ls_money.py::test_a_kept_pod_reads_kept_with_what_it_bills_not_ok",),
    ),
)
