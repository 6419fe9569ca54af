"""The laptop's side of interruptible recovery (`up --recover`): each mutant breaks one bound a user would
lose money (or code) over, and `tests` must fail on it. The lead merges MUTANTS_LAP into MUTANTS
(tests/mutants/table.py)."""

from __future__ import annotations

from mutant import Mutant

UP = "client/pods/up.py"
ABORT = "client/pods/abort.py"
RECOVERY = "client/pods/recovery/prepare.py"
LEDGER = "core/ledger/intake.py"
DOWN = "client/pods/down.py"
UP_TESTS = "tests/recovery/test_up_recover.py"
LEDGER_TESTS = "tests/recovery/test_ledger_recovery.py"
DOWN_TESTS = "tests/recovery/test_down_recovery.py"


def up_test(name: str) -> str:
    return f"{UP_TESTS}::{name}"


MUTANTS_LAP: tuple[Mutant, ...] = (
    Mutant(
        "lap-recover-unchecked",
        "--recover rents with no interruptible pod, no bid or no bucket to resume from",
        UP,
        "    recovery.check_recovery(opts, ctx.settings)  # --recover",
        "    pass  # --recover",
        (up_test("test_recover_refusals_come_before_any_money"), up_test("test_recover_is_refused_on_runpod")),
    ),
    Mutant(
        "lap-recover-old-watchdog",
        "--recover rents under a watchdog that never re-rents the run",
        UP,
        "        recovery.check_recovery_protocol(watched, ctx.settings)",
        "        pass",
        (up_test("test_recover_refuses_a_watchdog_without_recovery"),),
    ),
    Mutant(
        "lap-budget-one-attempt",
        "the budget checks one attempt's price x hours, not the run's envelope across attempts",
        "client/pods/plan.py",
        "        if self.envelope is not None:\n            return self.envelope.usd",
        "        if False:\n            return 0.0",
        (up_test("test_the_budget_counts_the_runs_envelope_not_one_attempt"),),
    ),
    Mutant(
        "lap-kit-error-swallowed",
        "a kit that cannot be written still rents a pod whose next attempts cannot boot",
        RECOVERY,
        "    except GpucError:\n        raise\n    except Exception as exc:",
        "    except GpucError:\n        raise\n    except ValueError as exc:",
        (up_test("test_a_kit_that_cannot_be_written_rents_nothing"),),
    ),
    Mutant(
        "lap-failed-up-keeps-recovering",
        "an up that failed after registering leaves the run's recovery on: the watchdog may rent again",
        ABORT,
        "        if recovering_run is not None:\n            ctx.watchdog.stop_run(recovering_run)",
        "        if False:\n            ctx.watchdog.stop_run(recovering_run)",
        (up_test("test_an_up_that_fails_after_the_registration_stops_the_runs_recovery"),),
    ),
    Mutant(
        "lap-ledger-row-per-attempt",
        "each recovered attempt makes a ledger row of its own (the run counted in pieces, twice in the budget)",
        LEDGER,
        "        if later_attempt(record):\n            continue\n",
        "",
        (f"{LEDGER_TESTS}::test_a_later_attempt_never_makes_a_row_even_when_the_first_is_unknown",),
    ),
    Mutant(
        "lap-ledger-closed-at-first-outbid",
        "a recovering run's row closes at its first pod's end, at that pod's price: the rest unrecorded",
        LEDGER,
        "        if run_id is not None and (runs is None",
        "        if False and (runs is None",
        (f"{LEDGER_TESTS}::test_a_live_run_keeps_one_open_row_whatever_its_attempts",),
    ),
    Mutant(
        "lap-down-without-stop",
        "gpuc down destroys a recovering run's pod without stopping its recovery: the watchdog rents again",
        DOWN,
        "        if not recovering.stop_asked:\n            ctx.watchdog.stop_run(run.run_id)",
        "        if False:\n            ctx.watchdog.stop_run(run.run_id)",
        (f"{DOWN_TESTS}::test_down_stops_the_recovery_then_destroys_the_latest_attempt",),
    ),
)
