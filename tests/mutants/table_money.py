"""The money mutants (the month's budget at its worst case, the checks a mutant round found unguarded), as
exact replacements in table.py's format: each breaks one check a user would lose money over, and `tests`
must fail on it. The lead merges MUTANTS_MONEY into MUTANTS.
Which ones an older test already killed, and which test now does, is said on each."""

from __future__ import annotations

from mutant import Mutant

UP = "client/pods/up.py"
BUDGETCHECK = "client/pods/budgetcheck.py"
CORE_BUDGET = "core/budget.py"
REAPER_BUDGET = "functions/reaper/budget.py"
DESTCHECK = "core/destcheck.py"
WORST = "tests/money/test_money_worst_case.py"
REAPER_MONEY = "tests/functions/test_reaper_money.py"
LISTING = "tests/money/test_money_destcheck_listing.py"


def worst(name: str) -> str:
    return f"{WORST}::{name}"


def reaper(name: str) -> str:
    return f"{REAPER_MONEY}::{name}"


REGISTERED_DEADLINE = worst("test_up_registers_its_max_hours_deadline_on_the_watchdog_and_in_the_agents_config")

MUTANTS_MONEY: tuple[Mutant, ...] = (
    # -- the budget counts every pod still running or kept at its worst case --------------------------
    Mutant(
        "budget-up-spent-so-far",
        "up: running pods count at what they spent so far (three $5.28 pods pass an $8 budget)",
        BUDGETCHECK,
        "    ahead = pods_ahead(records or [], ctx, now)",
        "    ahead: list[Ahead] = []",
        (worst("test_the_second_up_is_refused_when_the_first_pods_worst_case_leaves_no_room"),),
    ),
    Mutant(
        "budget-reaper-spent-so-far",
        "reaper: pulls deadlines in only once the month is spent, not when its worst case crosses the budget",
        REAPER_BUDGET,
        "        runs_out = ahead.runs_out_at(budget)",
        "        runs_out = run.now if ahead.spend.total_usd >= budget else None",
        (worst("test_the_watchdog_judges_by_the_same_rule_and_pulls_the_deadlines_in"),),
    ),
    Mutant(
        "budget-kept-disk-free",
        "budget: a stopped pod kept for its results counts as $0 (its disk bills all month)",
        CORE_BUDGET,
        "            usd += self.disk_per_hour * max(0.0, month_end - max(now, self.until)) / 3600.0",
        "            usd += 0.0 * month_end",
        (
            worst("test_a_stopped_kept_pod_counts_at_its_disk_price_to_the_months_end"),
            worst("test_the_rule_counts_a_stopped_kept_pod_by_its_disk_and_a_running_one_by_its_price"),
        ),
    ),
    # -- the surviving mutants of the money round ---------------------------------------------------
    Mutant(
        "up-max-hours-unregistered",
        "up: --max-hours not registered (the watchdog's 12 h stands in, the agent adopts it: --max-hours 2 bills 12 h)",
        UP,
        "            interruptible=spec.interruptible,\n            deadline_at=deadline_at,\n",
        "            interruptible=spec.interruptible,\n",
        (REGISTERED_DEADLINE,),
    ),
    Mutant(
        "up-max-hours-agent",
        "up: the agent's config holds no --max-hours deadline (it ends the pod only at the watchdog's word)",
        UP,
        "        deadline_at=deadline_at,\n        job=bool(opts.command),",
        "        job=bool(opts.command),",
        (REGISTERED_DEADLINE,),
    ),
    Mutant(
        "deadline-provisioning-alert-only",
        "reaper: a pod stuck provisioning past its deadline is only alerted, never ended",
        "functions/reaper/rules.py",
        'DEADLINE_STATUSES = ("running", "exited", "provisioning", "unknown")',
        'DEADLINE_STATUSES = ("running", "exited", "unknown")',
        (reaper("test_a_pod_stuck_provisioning_past_its_deadline_is_destroyed_not_only_alerted"),),
    ),
    Mutant(
        "clock-jump-deadline-same-pass",
        "reaper: after a clock jump, a deadline the jump passed is marked and destroyed in the same pass",
        "functions/reaper/steps.py",
        '    if run.hold is not None and (not run.young or rec.origin == "adopted"):',
        '    if run.hold is not None and (not run.young or rec.origin == "adopted") and "deadline" not in reason:',
        (
            reaper("test_a_deadline_a_clock_jump_passed_is_warned_first_and_destroyed_a_pass_later"),
            reaper("test_the_warning_after_a_clock_jump_leaves_time_to_extend"),
        ),
    ),
    Mutant(
        "budget-month-no-destroyed",
        "reaper: the month leaves out destroyed pods (the budget never reaches 100 %)",
        REAPER_BUDGET,
        "        records = run.deps.store.list_pods()",
        '        records = [r for r in run.deps.store.list_pods() if r.state != "destroyed"]',
        (reaper("test_the_month_counts_destroyed_pods_and_pods_on_a_provider_unread_this_pass"),),
    ),
    Mutant(
        "budget-month-no-blind",
        "reaper: the month leaves out the pods on a provider it cannot read this pass",
        REAPER_BUDGET,
        "        records = run.deps.store.list_pods()",
        "        records = [r for r in run.deps.store.list_pods() if r.provider not in run.blind]",
        (reaper("test_the_month_counts_destroyed_pods_and_pods_on_a_provider_unread_this_pass"),),
    ),
    Mutant(
        "budget-experiment-ignored",
        "up: the per-experiment budget is ignored whenever a monthly budget is set",
        BUDGETCHECK,
        "    wanted = [w for w in wanted if getattr(settings, w[0]) is not None]",
        "    wanted = [w for w in wanted if getattr(settings, w[0]) is not None][:1]",
        (worst("test_the_experiment_budget_holds_when_a_monthly_budget_is_set_too"),),
    ),
    Mutant(
        "budget-pulled-once-ever",
        "reaper: a pod pulled in last month is never pulled in again in a new month",
        REAPER_BUDGET,
        "    return rec.budget_pulled_at is None or not start <= rec.budget_pulled_at < end",
        "    return rec.budget_pulled_at is None",
        (reaper("test_a_pod_pulled_in_last_month_is_pulled_in_again_in_a_new_month"),),
    ),
    Mutant(
        "destcheck-s3-listing-unchecked",
        "up: a bucket that takes the probe but does not list it back passes (every sync fails: KEPT, billing)",
        DESTCHECK,
        "        if sizes.get(sync.base) != len(PROBE_BODY):",
        "        if False:",
        (f"{LISTING}::test_a_bucket_whose_listing_hides_the_probe_is_refused_and_the_probe_removed",),
    ),
    Mutant(
        "destcheck-git-listing-unchecked",
        "up: a git remote that takes the probe push but does not list it back passes",
        DESTCHECK,
        "            if commit not in listed:",
        "            if False:",
        (f"{LISTING}::test_a_git_remote_whose_listing_hides_the_probe_is_refused_and_the_ref_removed",),
    ),
    Mutant(
        "stray-cap-from-creation",
        "watchdog: a rescued stray's lifetime cap counts from the pod's creation, not from first sight",
        "functions/deadline.py",
        '    if pod.origin == "adopted" or pod.started_at is None:',
        "    if pod.started_at is None:",
        (reaper("test_a_rescued_strays_lifetime_cap_counts_from_first_sight_not_its_creation"),),
    ),
    Mutant(
        "deadline-moves-lost",
        "watchdog: two deadline moves at once (two `gpuc extend`) and one is silently lost",
        "functions/transitions.py",
        '{"state": pod.state, "deadline_at": pod.deadline_at}, changes):',
        '{"state": pod.state}, changes):',
        (reaper("test_two_deadline_moves_at_once_never_lose_one_silently"),),
    ),
)
