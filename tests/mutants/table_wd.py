"""Hand mutants of the watchdog's recovery (functions/recovery/): each breaks one check a
user would lose money or secrets over, and its test must fail. The lead merges MUTANTS_WD into table.py."""

from __future__ import annotations

from mutant import Mutant

REC = "tests/recovery/test_recovery_watchdog.py"


MUTANTS_WD: tuple[Mutant, ...] = (
    Mutant(
        "one-reading-re-rents",
        "recovery re-rents on one reading of 'paused' (the two reads disagree)",
        "functions/recovery/decide.py",
        '    if not confirmed:\n        return Decision("none"',
        '    if False:\n        return Decision("none"',
        (f"{REC}::test_one_reading_of_paused_rents_nothing",),
    ),
    Mutant(
        "no-wait-before-re-rent",
        "recovery re-rents at once: the bid never gets GPUC_RECOVER_WAIT_S to win again",
        "functions/recovery/decide.py",
        "    if paused_for_s < wait_s:",
        "    if False:",
        (f"{REC}::test_recovery_waits_for_the_bid_to_win_again_before_re_renting",),
    ),
    Mutant(
        "re-rent-after-unconfirmed-destroy",
        "a destroy that does not confirm is ignored: two instances bill at once",
        "functions/recovery/rerent.py",
        "    except Exception:\n        release(run, stored)\n        raise",
        "    except Exception:\n        pass",
        (f"{REC}::test_a_destroy_that_does_not_confirm_rents_nothing",),
    ),
    Mutant(
        "job-end-re-rented",
        "a run whose job ended is re-rented after an outbid",
        "functions/recovery/watch.py",
        "    if rec is not None and rec.state in FINISHED_STATES and rec.ended_by != RECOVERY_ENDED_BY:",
        "    if False:",
        (f"{REC}::test_the_jobs_own_end_is_never_re_rented",),
    ),
    Mutant(
        "recover-past-n",
        "recovery goes on past --recover N",
        "functions/recovery/decide.py",
        "    if used >= plan.recover:",
        "    if False:",
        (f"{REC}::test_after_n_recoveries_it_stops_destroys_and_says_why",),
    ),
    Mutant(
        "stop-tap-ignored",
        "the phone's 'stop recovery' is ignored",
        "functions/recovery/decide.py",
        "    if stop_asked:\n",
        "    if False:\n",
        (f"{REC}::test_the_phones_stop_tap_stops_the_recovery",),
    ),
    Mutant(
        "boot-ticket-reused",
        "a boot ticket is never spent: anyone reading Vast's env listing gets the kit's secrets",
        "functions/recovery/runs.py",
        "    if stored is None or stored.spent_at is not None:",
        "    if stored is None:",
        (f"{REC}::test_a_re_rent_on_both_stores_boots_once_with_the_kit",),
    ),
    Mutant(
        "race-double-create",
        "two passes racing both re-rent (the claim's condition dropped)",
        "functions/recovery/claim.py",
        "    if r.done or r.acting is not None or len(r.attempts) != len(read.attempts)",
        "    if r.done",
        (f"{REC}::test_two_passes_racing_rent_once",),
    ),
    Mutant(
        "paused-rule-kills-recovering",
        "the paused-pod rule destroys a live run's paused pod under recovery",
        "functions/reaper/rules.py",
        '    if pod.status == "paused" and rec.run_id is not None and rec.run_id in rules.recovering:',
        "    if False:",
        (f"{REC}::test_a_paused_pod_of_a_live_run_is_not_reaped_by_the_paused_rule",),
    ),
    Mutant(
        "attempt-same-name",
        "every attempt has the run's name: the previous one, still listed, is taken for the new",
        "functions/recovery/runs.py",
        '    return run_id if attempt <= 1 else f"{run_id}-a{attempt}"',
        "    return run_id",
        (f"{REC}::test_the_previous_attempt_still_listed_is_never_taken_for_the_new_one",),
    ),
    Mutant(
        "budget-not-passed",
        "a re-rent ignores the month's budget",
        "functions/recovery/watch.py",
        "recover_wait_s, budget_left(run, run_id))",
        "recover_wait_s, None)",
        (f"{REC}::test_a_re_rent_that_would_cross_the_months_budget_stops",),
    ),
    Mutant(
        "booting-attempt-silent",
        "a re-rented pod booting is taken for silent after 5 min and destroyed",
        "functions/reaper/rules.py",
        "        window = max(window, rules.settings.unregistered_grace_s)",
        "        pass",
        (f"{REC}::test_a_re_rented_pod_booting_is_not_taken_for_silent_before_the_unregistered_grace",),
    ),
)
