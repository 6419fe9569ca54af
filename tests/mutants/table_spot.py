"""The interruptible recovery's money mutants: each breaks one bound a user would lose money over, and
`tests` must fail on it. The lead merges MUTANTS_spot into MUTANTS (tests/mutants/table.py)."""

from __future__ import annotations

from mutant import Mutant

RECOVER = "functions/recovery/decide.py"
RULES = "tests/recovery/test_recover_spot.py"
HOOK = "functions/recovery/webhook.py"
VAST = "core/providers/vast.py"


def rule(name: str) -> str:
    return f"{RULES}::{name}"


MUTANTS_SPOT: tuple[Mutant, ...] = (
    Mutant(
        "spot-exit-rerented",
        "a job that exits non-zero is re-rented (errors counted as preemptions)",
        RECOVER,
        'if reading != "paused":',
        'if reading not in ("paused", "exited"):',
        (rule("test_a_job_that_exits_is_never_re_rented"),),
    ),
    Mutant(
        "spot-recover-forever",
        "recovery goes on past --recover N",
        RECOVER,
        "if used >= plan.recover:",
        "if used > plan.recover:",
        (rule("test_it_stops_after_n_recoveries"),),
    ),
    Mutant(
        "spot-envelope-ignored",
        "the next attempt is rented although its worst case breaks the run's envelope",
        RECOVER,
        "if not _fits(plan, attempts, offer, now):",
        "if False:",
        (rule("test_the_next_attempts_worst_case_must_fit_the_envelope"),),
    ),
    Mutant(
        "spot-deadline-per-attempt",
        "each attempt gets a fresh deadline (dstack's max_duration): the run's clock never ends",
        RECOVER,
        "if env.hours_left(now) <= 0:",
        "if False:",
        (rule("test_the_deadline_counts_from_the_first_attempt_not_this_one"),),
    ),
    Mutant(
        "spot-bid-above-cap",
        "a re-rent bids above the user's --bid",
        RECOVER,
        "o.interruptible and o.price_per_hour <= plan.price_cap",
        "o.interruptible",
        (rule("test_no_offer_within_the_price_cap_stops"),),
    ),
    Mutant(
        "spot-webhook-replayed",
        "a replayed outbid webhook is acted on again",
        HOOK,
        "if not first_time(event_id):",
        "if False:",
        (rule("test_a_replayed_webhook_is_ignored_and_a_good_one_only_asks_for_a_look"),),
    ),
    Mutant(
        "spot-new-contract-kept",
        "a losing bid's stopped instance (new_contract) is left billing its disk",
        VAST,
        "self._destroy_failed_create(str(stray), error)",
        "pass",
        (
            "tests/providers/test_vast_spot.py::test_a_losing_bid_the_server_creates_anyway_is_destroyed_and_confirmed_gone",
        ),
    ),
)
