"""The mutants of a person's week (notifications, the rehearsal, balance, serve), as exact replacements in
table.py's format: each breaks one thing a user would lose sleep, money or a rehearsal over, and `tests` must
fail on it."""

from __future__ import annotations

from mutant import Mutant

DAY = "tests/functions/test_notification_day.py"

MUTANTS_WEEK2: tuple[Mutant, ...] = (
    Mutant(
        "cap-alert-hourly",
        "a balance above the cap wakes the phone every hour again, and the user mutes the topic",
        "functions/reaper/alerts.py",
        "            every=CAP_NAG_S,",
        "            every=None,",
        (f"{DAY}::test_a_day_of_a_typical_week_is_a_handful_of_pushes_and_one_low_cap_alert",),
    ),
    Mutant(
        "cap-alert-high",
        "a balance above the cap is a high-priority push",
        "functions/reaper/alerts.py",
        '            level="low",',
        '            level="warning",',
        (f"{DAY}::test_a_day_of_a_typical_week_is_a_handful_of_pushes_and_one_low_cap_alert",),
    ),
    Mutant(
        "push-first-line-pod-words",
        "the lock screen's first line is the pod's defanged words, not what to do",
        "functions/podnews.py",
        """    return f"{todo.format(pod=pod.pod_id)}\\n{' '.join(part for part in parts if part)}".lstrip("\\n")""",
        """    return " ".join([todo.format(pod=pod.pod_id), *parts]).strip()""",
        (f"{DAY}::test_every_pod_push_opens_with_what_to_do_in_gpucs_words_within_120_characters",),
    ),
    Mutant(
        "failed-job-no-last-line",
        "a FAILED job's push does not say its error",
        "instance_side/wrapper.py",
        '                said += f"; last line: {last}"  # what a FAILED job\'s push shows first',
        "                pass",
        ("tests/instance_side/test_pod_wrapper.py::test_a_failed_job_says_its_last_error_line_and_no_results_path",),
    ),
    Mutant(
        "sandbox-counts-the-host",
        "a rehearsal's hung job stays busy on a busy machine, and bills until its deadline",
        "instance_side/context.py",
        '    scope = paths.root if paths.root != Path("/") else None',
        "    scope = None",
        ("tests/instance_side/test_pod_procs.py::test_the_agent_scopes_its_scan_to_its_sandbox_and_not_on_a_real_pod",),
    ),
    Mutant(
        "rehearsal-broken-output-skips-cleanup",
        "a scripted rehearsal whose output is closed skips destroying what is left",
        "testkit/rehearse.py",
        "    say = _unbreakable(echo)",
        "    say = echo",
        (
            "tests/demo/test_rehearse_phone.py::test_a_scripted_rehearsal_stops_on_a_signal_within_seconds[SIGTERM]",
            "tests/demo/test_rehearse_phone.py::test_a_scripted_rehearsal_stops_on_a_signal_within_seconds[SIGINT]",
        ),
    ),
    Mutant(
        "ended-lately-no-exit",
        "the status page's Ended lately does not tell a failed job from a good one",
        "functions/actions/status_page.py",
        '        words = f"its job ended: {exit_outcome(exit_code)}"',
        "        pass",
        ("tests/functions/test_status_page.py::test_ended_lately_says_whether_the_job_failed",),
    ),
    Mutant(
        "balance-every-provider",
        "balance lists providers the user never signed up for",
        "client/money/commands.py",
        "provider_factories(ctx, providers_in_use(ctx.settings))",
        "provider_factories(ctx)",
        (
            "tests/money/test_money_balance.py::test_the_configured_provider_without_a_key_is_listed_and_an_unused_one_is_not",
        ),
    ),
)
