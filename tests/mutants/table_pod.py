"""The mutants of a pod's own boot (a re-rented pod boots with no laptop), as exact replacements in
table.py's format: each breaks one check, and `tests` must fail on it. The lead merges MUTANTS_POD into MUTANTS.
Each was tried by hand."""

from __future__ import annotations

from mutant import Mutant

BOOT = "tests/recovery/test_pod_boot.py"
AGAIN = "tests/recovery/test_pod_boot_again.py"
PLAN = "tests/recovery/test_pod_boot_plan.py"
S3 = "tests/recovery/test_resume_s3.py"

MUTANTS_POD: tuple[Mutant, ...] = (
    Mutant(
        "boot-wheel-unchecked",
        "onstart: a wheel that does not match the kit's sha256 is unpacked and run",
        "core/bootkit.py",
        'if hashlib.sha256(w).hexdigest()!=k.get("wheel_sha256"):die',
        "if False:die",
        (f"{BOOT}::test_a_wheel_that_does_not_match_its_sha256_installs_and_starts_nothing",),
    ),
    Mutant(
        "boot-4xx-retried",
        "onstart: a refused ticket is asked again and again instead of giving up",
        "core/bootkit.py",
        "if e.code<500 and e.code not in %(retry)r:die",
        "if e.code<400 and e.code not in %(retry)r:die",
        (f"{BOOT}::test_a_refused_ticket_starts_nothing",),
    ),
    Mutant(
        "boot-json-readable",
        "onstart: boot.json, with the pod's secrets, is readable by others",
        "core/bootkit.py",
        "os.O_EXCL,0o600)",
        "os.O_EXCL,0o644)",
        (f"{BOOT}::test_a_re_rented_pod_boots_restores_then_runs_its_job",),
    ),
    Mutant(
        "boot-ticket-in-argv",
        "onstart: the ticket goes into the boot's argv, where any process listing shows it",
        "core/bootkit.py",
        'os.execv(sys.executable,[sys.executable,"-m","gpuc.instance_side","boot"])',
        'os.execv(sys.executable,[sys.executable,"-m","gpuc.instance_side","boot",t])',
        (f"{BOOT}::test_a_re_rented_pod_boots_restores_then_runs_its_job",),
    ),
    Mutant(
        "boot-other-pod",
        "boot: a kit for another pod is installed and run here",
        "instance_side/boot.py",
        "if container and container != config.pod_id:",
        "if False:",
        (f"{PLAN}::test_a_kit_for_another_pod_installs_nothing",),
    ),
    Mutant(
        "boot-restore-again",
        "boot --again: the wrapper restores the older push over what the job wrote since",
        "instance_side/boot.py",
        "if k not in (BOOT_TICKET_ENV, RESUME_ENV)}",
        "if k not in (BOOT_TICKET_ENV,)}",
        (f"{AGAIN}::test_a_restarted_container_runs_the_agent_and_the_same_job_on_from_its_own_disk",),
    ),
    Mutant(
        "boot-job-after-failed-restore",
        "boot: a restore that failed still starts the job, which starts over and bills hours to redo the work",
        "instance_side/podstart.py",
        "if plan.resume_from and not self.restored(plan.resume_from):",
        "if plan.resume_from and not self.restored(plan.resume_from) and False:",
        (f"{AGAIN}::test_a_restore_that_fails_starts_no_job_and_says_why",),
    ),
    Mutant(
        "boot-job-on-bad-machine",
        "boot: a machine that fails verification runs the job anyway",
        "instance_side/podstart.py",
        "        if not self.verified():\n            return 1",
        "        self.verified()",
        (f"{AGAIN}::test_a_machine_that_fails_verification_and_is_kept_still_runs_no_job",),
    ),
    Mutant(
        "boot-ended-job-rerun",
        "boot --again: a job that had ended runs again after a restart",
        "instance_side/podstart.py",
        "        if ended or paths.exit_code.exists():",
        "        if False:",
        (f"{AGAIN}::test_a_restarted_container_runs_the_agent_and_the_same_job_on_from_its_own_disk",),
    ),
    Mutant(
        "boot-cut-short-lost",
        "boot --again: a first boot killed during its bootstrap never starts the job (the attempt idles out)",
        "instance_side/podstart.py",
        "        if (paths.state / BOOT_FILE).exists() and not paths.job_command.exists():",
        "        if False:",
        (f"{AGAIN}::test_a_first_boot_cut_short_by_a_restart_is_done_again",),
    ),
    Mutant(
        "boot-redone-under-job",
        "boot --again: a boot whose job had started is done again, its restore over what the job wrote since",
        "instance_side/podstart.py",
        "        if (paths.state / BOOT_FILE).exists() and not paths.job_command.exists():",
        "        if (paths.state / BOOT_FILE).exists():",
        (f"{AGAIN}::test_a_restarted_container_runs_the_agent_and_the_same_job_on_from_its_own_disk",),
    ),
    Mutant(
        "restore-name-escapes",
        "restore: a manifest name out of results/ (behind a harmless key) is written outside it",
        "instance_side/resume.py",
        '    if path.is_absolute() or ".." in path.parts or not path.parts:\n        raise RestoreError',
        "    if False:\n        raise RestoreError",
        (f"{S3}::test_an_s3_manifest_naming_a_path_outside_results_is_refused",),
    ),
    Mutant(
        "restore-s3-torn",
        "restore: an S3 file whose size does not match the manifest is restored as if whole",
        "instance_side/grants.py",
        "            if size is not None and got != size:",
        "            if False:",
        (f"{S3}::test_an_s3_file_that_does_not_match_the_manifest_is_refused_whole",),
    ),
)
