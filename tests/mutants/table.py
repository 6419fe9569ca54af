"""The hand mutants of issue 17 ("Safety checks that no test guards"), as exact replacements.

Each one breaks one safety property a user would lose money, results or secrets over; `tests` are the
tests that must fail on it (run.py checks that they do). Two survivors of the original round are guarded
elsewhere and not listed here: `.env.local` / `.env.production` uploaded, and `--wait` exiting 0 on an
unknown outcome.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str  # the safety property it breaks, as the user would feel it
    file: str  # relative to the repository root
    original: str  # must occur exactly once in the file
    mutated: str
    tests: tuple[str, ...]


REAPER = "functions/reaper.py"
GUARDS = "tests/functions/test_reaper_guards.py"


def guard(name: str) -> str:
    return f"{GUARDS}::{name}"


DRY_RUN = guard("test_a_dry_run_writes_notifies_and_destroys_nothing_whatever_the_pass_would_do")

MUTANTS: tuple[Mutant, ...] = (
    # -- 1. a provider's "unknown" taken as gone ---------------------------------------------------------
    Mutant(
        "unknown-get-gone",
        "reaper: `get` answering unknown counts as gone (the watch is dropped)",
        REAPER,
        'if current is None or current.status == "terminated":',
        'if current is None or current.status in ("terminated", "unknown"):',
        (guard("test_a_pod_only_get_finds_and_calls_unknown_is_never_taken_for_gone"),),
    ),
    Mutant(
        "unknown-track-keeps-gone",
        "reaper: an unknown reading does not clear a 'not found' note (one more not found settles it)",
        REAPER,
        "    if pod is not None and rec.gone_seen_at is not None:",
        '    if pod is not None and pod.status != "unknown" and rec.gone_seen_at is not None:',
        (guard("test_an_unknown_reading_between_two_not_founds_starts_the_gone_count_again"),),
    ),
    Mutant(
        "unknown-veto",
        "reaper: no veto on an unknown status (ended pods and strays are destroyed blind)",
        REAPER,
        '    if pod.status == "unknown":\n        return "unknown",',
        '    if False:\n        return "unknown",',
        (
            guard("test_an_ended_pod_the_provider_calls_unknown_is_not_destroyed"),
            guard("test_a_stray_the_provider_calls_unknown_is_not_destroyed"),
        ),
    ),
    Mutant(
        "unknown-confirms-destroy",
        "providers: an unknown status after a destroy confirms it gone",
        "core/providers/base.py",
        '            if pod is None or pod.status == "terminated":\n                return True',
        '            if pod is None or pod.status in ("terminated", "unknown"):\n                return True',
        (guard("test_a_destroy_followed_by_unknown_is_not_confirmed_gone"),),
    ),
    # -- 2. a dry run that acts -------------------------------------------------------------------------
    Mutant(
        "dry-destroy",
        "reaper: a dry run destroys a pod due for destroy",
        REAPER,
        '{reason} (dry run: nothing done)")\n        return\n',
        '{reason} (dry run: nothing done)")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-retry",
        "reaper: a dry run retries an unfinished destroy",
        REAPER,
        'retried (dry run: nothing done)")\n        return\n',
        'retried (dry run: nothing done)")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-settle-gone",
        "reaper: a dry run settles a gone pod (and notifies)",
        REAPER,
        '    run.act_on(rec, "confirm", "gone at the provider")\n    if run.dry_run:\n        return\n',
        '    run.act_on(rec, "confirm", "gone at the provider")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-mark",
        "reaper: a dry run marks a pod for destroy (and notifies)",
        REAPER,
        "    if not run.dry_run:\n        # last_seq in the condition",
        "    if True:\n        # last_seq in the condition",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-track-status",
        "reaper: a dry run records a provider status change",
        REAPER,
        "    if not run.dry_run:\n        run.deps.store.update_if(rec.pod_id, {\"provider_status\"",
        "    if True:\n        run.deps.store.update_if(rec.pod_id, {\"provider_status\"",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-track-found",
        "reaper: a dry run clears a 'not found' note",
        REAPER,
        "        if not run.dry_run:\n            run.deps.store.update_if(rec.pod_id, {\"gone_seen_at\"",
        "        if True:\n            run.deps.store.update_if(rec.pod_id, {\"gone_seen_at\"",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-gone-note",
        "reaper: a dry run notes a first 'not found'",
        REAPER,
        "    if (first is None or pinged) and not run.dry_run:",
        "    if first is None or pinged:",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-adopt",
        "reaper: a dry run adopts a stray",
        REAPER,
        "        if run.dry_run or run.deps.store.adopt(rec):",
        "        if run.deps.store.adopt(rec):",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-listed-again",
        "reaper: a dry run revives a pod taken for gone (and notifies)",
        REAPER,
        "    if not run.dry_run:\n        revive(",
        "    if True:\n        revive(",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-alert",
        "reaper: a dry run records and sends a pod alert",
        REAPER,
        '    run.act_on(rec, "alert", reason)\n    if run.dry_run:\n        return\n',
        '    run.act_on(rec, "alert", reason)\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-all-clear",
        "reaper: a dry run clears an alert (and notifies)",
        REAPER,
        '    run.act_on(rec, "cancel", "back to normal")\n    if run.dry_run:\n        return\n',
        '    run.act_on(rec, "cancel", "back to normal")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-run-problem",
        "reaper: a dry run sends a pass-wide alert (balance, cap, fleet)",
        REAPER,
        '            run.act("*", detail or "*", "alert", title)\n        return\n',
        '            run.act("*", detail or "*", "alert", title)\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-blind",
        "reaper: a dry run records and sends a blindness alert",
        REAPER,
        'f"gpuc: reaper blind on {name}")\n        return\n',
        'f"gpuc: reaper blind on {name}")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-clock-jump",
        "reaper: a dry run after a clock jump rewrites every deadline (and notifies)",
        REAPER,
        "    if run.dry_run:\n        return False\n    for rec in records:",
        "    for rec in records:",
        (guard("test_a_dry_run_after_a_clock_jump_restarts_no_deadline"),),
    ),
    Mutant(
        "dry-record-run",
        "reaper: a dry run records itself as the reaper's last pass",
        REAPER,
        "    if not dry_run:\n        record_run(",
        "    if True:\n        record_run(",
        (guard("test_a_dry_run_after_a_clock_jump_restarts_no_deadline"),),
    ),
    Mutant(
        "dry-store-born",
        "reaper: a dry run dates a new store",
        REAPER,
        "born = store_born(run.deps.store, run.now, write=not run.dry_run)",
        "born = store_born(run.deps.store, run.now, write=True)",
        (guard("test_a_dry_run_on_a_new_store_does_not_date_it"),),
    ),
    # -- 3. a backwards clock step and an ended pod -------------------------------------------------------
    Mutant(
        "clock-back-ended",
        "reaper: after the clock steps back, an ended pod's destroy waits out the step",
        REAPER,
        '    if rec.state == "down" or late_end:',
        '    if rec.state == "down":',
        (
            guard(
                "test_an_ended_pod_is_destroyed_one_grace_after_a_backwards_clock_step_not_the_steps_length_later"
            ),
        ),
    ),
)
