"""The hand mutants ("safety checks that no test guards"), as exact replacements.

Each one breaks one safety property a user would lose money, results or secrets over; `tests` are the
tests that must fail on it (run.py checks that they do). Two survivors of the original round are guarded
elsewhere and not listed here: `.env.local` / `.env.production` uploaded, and `--wait` exiting 0 on an
unknown outcome.
"""

from __future__ import annotations

from mutant import Mutant

SIGHT = "functions/reaper/sight.py"
RULES = "functions/reaper/rules.py"
REAPER_STEPS = "functions/reaper/steps.py"
ALERTS = "functions/reaper/alerts.py"
TRUST = "functions/reaper/trust.py"
SWEEP = "functions/reaper/sweep.py"
GUARDS = "tests/functions/test_reaper_guards.py"


def guard(name: str) -> str:
    return f"{GUARDS}::{name}"


DRY_RUN = guard("test_a_dry_run_writes_notifies_and_destroys_nothing_whatever_the_pass_would_do")
DYNAMO = "tests/aws/test_dynamo_paging.py"
PID_FILE = "tests/instance_side/test_job_pid_file.py"
SSH = "tests/instance_side/test_ssh_generations.py"
KEY = "tests/providers/test_pod_key_fallback.py"
TOKEN = "tests/core/test_token_strength.py"
GET = "tests/providers/test_get_contract.py"
V2 = "tests/providers/test_runpod_v2.py"
DOWN = "tests/client/test_down_guards.py"
PRECHECK = "tests/client/test_plan.py"

CORE: tuple[Mutant, ...] = (
    # -- 1. a provider's "unknown" taken as gone ---------------------------------------------------------
    Mutant(
        "unknown-get-gone",
        "reaper: `get` answering unknown counts as gone (the watch is dropped)",
        SIGHT,
        'if current is None or current.status == "terminated":',
        'if current is None or current.status in ("terminated", "unknown"):',
        (guard("test_a_pod_only_get_finds_and_calls_unknown_is_never_taken_for_gone"),),
    ),
    Mutant(
        "unknown-track-keeps-gone",
        "reaper: an unknown reading does not clear a 'not found' note (one more not found settles it)",
        SIGHT,
        "    if pod is not None and rec.gone_seen_at is not None:",
        '    if pod is not None and pod.status != "unknown" and rec.gone_seen_at is not None:',
        (guard("test_an_unknown_reading_between_two_not_founds_starts_the_gone_count_again"),),
    ),
    Mutant(
        "unknown-judge-fine",
        "reaper: a silent pod the provider calls unknown is fine (no alert while it bills)",
        RULES,
        'if pod.status in ("provisioning", "unknown") and is_silent(rules, rec):',
        'if pod.status in ("provisioning",) and is_silent(rules, rec):',
        ("tests/functions/test_reaper.py::test_the_unknown_provider_status_is_alert_only",),
    ),
    Mutant(
        "unknown-veto",
        "reaper: no veto on an unknown status (ended pods and strays are destroyed blind)",
        RULES,
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
        "dry-stop",
        "reaper: a dry run stops a kept pod due for its stop",
        REAPER_STEPS,
        '"stop", f"{reason} (dry run: nothing done)")\n        return\n',
        '"stop", f"{reason} (dry run: nothing done)")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-destroy",
        "reaper: a dry run destroys a pod due for destroy",
        REAPER_STEPS,
        '"destroy", f"{reason} (dry run: nothing done)")\n        return\n',
        '"destroy", f"{reason} (dry run: nothing done)")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-retry",
        "reaper: a dry run retries an unfinished destroy",
        REAPER_STEPS,
        'retried (dry run: nothing done)")\n        return\n',
        'retried (dry run: nothing done)")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-settle-gone",
        "reaper: a dry run settles a gone pod (and notifies)",
        REAPER_STEPS,
        '    run.act_on(rec, "confirm", "gone at the provider")\n    if run.dry_run:\n        return\n',
        '    run.act_on(rec, "confirm", "gone at the provider")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-mark",
        "reaper: a dry run marks a pod for destroy (and notifies)",
        REAPER_STEPS,
        "    if not run.dry_run:\n        # last_seq in the condition",
        "    if True:\n        # last_seq in the condition",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-track-status",
        "reaper: a dry run records a provider status change",
        SIGHT,
        '    if not run.dry_run:\n        run.deps.store.update_if(rec.pod_id, {"provider_status"',
        '    if True:\n        run.deps.store.update_if(rec.pod_id, {"provider_status"',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-track-found",
        "reaper: a dry run clears a 'not found' note",
        SIGHT,
        '        if not run.dry_run:\n            run.deps.store.update_if(rec.pod_id, {"gone_seen_at"',
        '        if True:\n            run.deps.store.update_if(rec.pod_id, {"gone_seen_at"',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-gone-note",
        "reaper: a dry run notes a first 'not found'",
        REAPER_STEPS,
        "    if (first is None or pinged) and not run.dry_run:",
        "    if first is None or pinged:",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-adopt",
        "reaper: a dry run adopts a stray",
        SIGHT,
        "        if run.dry_run or run.deps.store.adopt(rec):",
        "        if run.deps.store.adopt(rec):",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-listed-again",
        "reaper: a dry run revives a pod taken for gone (and notifies)",
        SIGHT,
        "    if not run.dry_run:\n        revive(",
        "    if True:\n        revive(",
        (DRY_RUN,),
    ),
    Mutant(
        "dry-alert",
        "reaper: a dry run records and sends a pod alert",
        REAPER_STEPS,
        '    run.act_on(rec, "alert", reason)\n    if run.dry_run:\n        return\n',
        '    run.act_on(rec, "alert", reason)\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-all-clear",
        "reaper: a dry run clears an alert (and notifies)",
        REAPER_STEPS,
        '    run.act_on(rec, "cancel", "back to normal")\n    if run.dry_run:\n        return\n',
        '    run.act_on(rec, "cancel", "back to normal")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-run-problem",
        "reaper: a dry run sends a pass-wide alert (balance, cap, fleet)",
        ALERTS,
        '            run.act("*", detail or "*", "alert", title)\n        return\n',
        '            run.act("*", detail or "*", "alert", title)\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-blind",
        "reaper: a dry run records and sends a blindness alert",
        ALERTS,
        'f"gpuc: reaper blind on {name}")\n        return\n',
        'f"gpuc: reaper blind on {name}")\n',
        (DRY_RUN,),
    ),
    Mutant(
        "dry-clock-jump",
        "reaper: a dry run after a clock jump rewrites every deadline (and notifies)",
        TRUST,
        "    if run.dry_run:\n        return False\n    for rec in records:",
        "    for rec in records:",
        (guard("test_a_dry_run_after_a_clock_jump_restarts_no_deadline"),),
    ),
    Mutant(
        "dry-record-run",
        "reaper: a dry run records itself as the reaper's last pass",
        SWEEP,
        "    if not dry_run:\n        record_run(",
        "    if True:\n        record_run(",
        (guard("test_a_dry_run_after_a_clock_jump_restarts_no_deadline"),),
    ),
    Mutant(
        "dry-store-born",
        "reaper: a dry run dates a new store",
        TRUST,
        "born = store_born(run.deps.store, run.now, write=not run.dry_run)",
        "born = store_born(run.deps.store, run.now, write=True)",
        (guard("test_a_dry_run_on_a_new_store_does_not_date_it"),),
    ),
    # -- 3. a backwards clock step and an ended pod -------------------------------------------------------
    Mutant(
        "clock-back-ended",
        "reaper: after the clock steps back, an ended pod's destroy waits out the step",
        TRUST,
        '    if rec.state == "down" or late_end:',
        '    if rec.state == "down":',
        (guard("test_an_ended_pod_is_destroyed_one_grace_after_a_backwards_clock_step_not_the_steps_length_later"),),
    ),
    # -- 4. DynamoDB reads one page ----------------------------------------------------------------------
    Mutant(
        "dynamo-pods-one-page",
        "dynamo: only the first page of pods is read (past 1 MB of records, pods are never reaped)",
        "functions/dynamo.py",
        '            if "LastEvaluatedKey" not in got:\n                return items\n',
        "            return items\n",
        (DYNAMO,),
    ),
    Mutant(
        "dynamo-notes-one-page",
        "dynamo: only the first page of notifications is read (status shows too few)",
        "functions/dynamo.py",
        '                break\n            kwargs["ExclusiveStartKey"] = got["LastEvaluatedKey"]\n        records',
        "                break\n            break\n        records",
        (DYNAMO,),
    ),
    Mutant(
        "dynamo-notes-restart",
        "dynamo: the notification query restarts from the top on every page (duplicates, the rest lost)",
        "functions/dynamo.py",
        '            kwargs["ExclusiveStartKey"] = got["LastEvaluatedKey"]\n        records',
        "            kwargs.clear()\n        records",
        (DYNAMO,),
    ),
    # -- 5. an unreadable job pid file ------------------------------------------------------------------
    Mutant(
        "pid-unreadable-no-job",
        "pod: an unreadable job pid file is 'no job' (the idle watch destroys the pod under its job)",
        "instance_side/jobtree.py",
        "    except (OSError, UnicodeDecodeError) as exc:\n        raise JobScanError(",
        "    except (OSError, UnicodeDecodeError) as exc:\n        return None\n        raise JobScanError(",
        (PID_FILE,),
    ),
    Mutant(
        "pid-heartbeat-no-job",
        "pod: the heartbeat says no job runs when the pid file cannot be read",
        "instance_side/agent.py",
        '            return True  # a pid file that is there but unreadable is uncertain, so busy: never "no job"',
        "            return False",
        (PID_FILE,),
    ),
    # -- 6. OpenSSH's process names -----------------------------------------------------------------------
    Mutant(
        "ssh-no-sshd-session",
        "pod: sessions under OpenSSH >= 9.8 (sshd-session) are not seen (idle kill under a typing user)",
        "instance_side/sshscan.py",
        'SSHD_NAMES = ("sshd", "sshd-session")',
        'SSHD_NAMES = ("sshd",)',
        (SSH,),
    ),
    Mutant(
        "ssh-no-sshd",
        "pod: sessions under OpenSSH < 9.8 (sshd) are not seen",
        "instance_side/sshscan.py",
        'SSHD_NAMES = ("sshd", "sshd-session")',
        'SSHD_NAMES = ("sshd-session",)',
        (SSH,),
    ),
    # -- 7. the pod's key for a wrapper started over ssh --------------------------------------------------
    Mutant(
        "key-no-pid1-fallback",
        "pod: a wrapper started over ssh cannot find the pod's key (every self-destroy fails)",
        "instance_side/selfdestroy.py",
        "    platform_env = {**container_environ(proc_root), **env}",
        "    platform_env = dict(env)",
        (KEY,),
    ),
    # -- 8. a weak pod token ------------------------------------------------------------------------------
    Mutant(
        "token-32-bit",
        "up: pod tokens of 32 bits (pings and events forgeable)",
        "core/signing.py",
        "    token = secrets.token_urlsafe(32)",
        "    token = secrets.token_urlsafe(4)",
        (TOKEN,),
    ),
    Mutant(
        "token-floor",
        "signing: the strength floor lets a 32-bit token through",
        "core/signing.py",
        "    if len(token) < MIN_TOKEN_CHARS:",
        "    if len(token) < 6:",
        (TOKEN,),
    ),
    Mutant(
        "token-load-unchecked",
        "pod: a weak token in the pod's secrets is accepted",
        "instance_side/podfiles.py",
        "    weak = weak_token(token)\n    if weak is not None:\n        # A guessable",
        "    weak = None\n    if weak is not None:\n        # A guessable",
        (TOKEN,),
    ),
    # -- 9. RunPod and Vast `get`: doubt read as gone -----------------------------------------------------
    Mutant(
        "runpod-one-404-gone",
        "runpod: one 404 problem for a pod that is there reads as gone (not read twice)",
        "core/providers/runpod.py",
        "        self.clock.sleep(self.recheck_delay_s)\n",
        "        return None\n",
        (GET, V2),
    ),
    Mutant(
        "runpod-unreadable-gone",
        "runpod: an unreadable REST v2 pod reads as gone",
        "core/providers/runpod.py",
        "        return parse_v2_pod(reply.body)\n",
        "        try:\n"
        "            return parse_v2_pod(reply.body)\n"
        "        except ProviderError:\n"
        "            return None\n",
        (GET,),
    ),
    Mutant(
        "runpod-empty-gone",
        "runpod: an empty REST v2 answer ({} / []) reads as gone",
        "core/providers/runpod.py",
        "        return parse_v2_pod(reply.body)\n",
        "        if not reply.body:\n            return None\n        return parse_v2_pod(reply.body)\n",
        (GET,),
    ),
    Mutant(
        "runpod-any-404-gone",
        "runpod: any 404 (a wrong URL's) reads as gone",
        "core/providers/runpod.py",
        '        reply = self.http.request("GET", path, accept=(404,))\n'
        "        if reply.status == 404:\n"
        '            require(is_problem_404(reply.body), PROVIDER, f"404 from {path} is not a RunPod problem body")\n',
        '        reply = self.http.request("GET", path, accept=(404,))\n        if reply.status == 404:\n',
        (GET, "tests/providers/test_provider_fixtures.py"),
    ),
    Mutant(
        "runpod-short-lookup",
        "runpod: a create whose answer was lost is looked up for 4 s only: the listing's lag costs a second pod",
        "core/providers/runpod.py",
        "LOOKUP_WINDOW_S = 45.0",
        "LOOKUP_WINDOW_S = 4.0",
        (V2,),
    ),
    Mutant(
        "runpod-v2-status-gone",
        "runpod: a REST v2 status nobody listed reads as terminated",
        "core/providers/runpod_pods.py",
        'V2_STATUS.get(status or "", "unknown")',
        'V2_STATUS.get(status or "", "terminated")',
        (GET,),
    ),
    Mutant(
        "vast-status-gone",
        "vast: an actual_status nobody listed reads as terminated",
        "core/providers/vast_instances.py",
        'ACTUAL_STATUS.get(actual, "unknown")',
        'ACTUAL_STATUS.get(actual, "terminated")',
        (GET,),
    ),
    Mutant(
        "vast-empty-gone",
        "vast: an empty instances ([] / {}) reads as gone",
        "core/providers/vast.py",
        '        if body["instances"] is None:\n            return None  # Vast\'s positive',
        '        if not body["instances"]:\n            return None  # Vast\'s positive',
        (GET,),
    ),
    Mutant(
        "vast-no-instances-gone",
        "vast: an answer without `instances` ({} / []) reads as gone",
        "core/providers/vast.py",
        '        require(isinstance(body, dict) and "instances" in body, PROVIDER,',
        '        if not isinstance(body, dict) or "instances" not in body:\n            return None\n'
        "        require(True, PROVIDER,",
        (GET,),
    ),
    Mutant(
        "vast-404-gone",
        "vast: a 404 to a read reads as gone",
        "core/providers/vast.py",
        "self.api.instance_url(pod_id))\n",
        "self.api.instance_url(pod_id), accept=(404,))\n        if reply.status == 404:\n            return None\n",
        (GET,),
    ),
    Mutant(
        "self-unreadable-gone",
        "a pod (runpod or vast): 'not found' to its own key and a failed read of itself taken as gone (no stop)",
        "core/providers/podkey.py",
        '        if still is False:\n            return f"{self._me} was already gone"',
        '        if not still:\n            return f"{self._me} was already gone"',
        (GET, "tests/providers/test_scoped_self_destroy.py::test_the_decision"),
    ),
    Mutant(
        "vast-empty-instance",
        "vast: an empty instance object reads as a pod made of defaults (provisioning)",
        "core/providers/vast.py",
        '        require(bool(body["instances"]), PROVIDER, "instances is an empty object")\n',
        "",
        (GET,),
    ),
    # -- 10. down and run ---------------------------------------------------------------------------------
    Mutant(
        "down-parked-pod",
        "down: a stopped or exited pod is destroyed without --force (its unsynced results lost)",
        "client/pods/down.py",
        '    if pod.status != "running":\n        if force:',
        "    if False:\n        if force:",
        (DOWN,),
    ),
    Mutant(
        "down-run-foreign",
        "down / run: a pod without gpuc's markers is acted on when a run record names it",
        "client/pods/run.py",
        "    if pod is not None and not pod.managed:",
        "    if False:",
        (DOWN,),
    ),
    # -- 11. the results destination and the ledger's running pods ------------------------
    Mutant(
        "up-no-destination-check",
        "up: a pod is rented with nowhere to send its results (its sync fails: KEPT, billing)",
        "client/pods/plan.py",
        "        require_destination(ctx.settings, opts.experiment, ctx.echo)",
        "        pass",
        (PRECHECK, "tests/aws/test_destcheck_s3.py"),
    ),
    Mutant(
        "destcheck-s3-probe-kept",
        "up: the S3 probe object is left in the user's bucket",
        "core/destcheck.py",
        "        left = _remove_probe(client, sync.bucket, sync.base, shown)",
        "        left = None",
        ("tests/aws/test_destcheck_s3.py",),
    ),
    Mutant(
        "destcheck-git-probe-kept",
        "up: the git probe ref is left in the user's repository, and said to be removed",
        "core/destcheck.py",
        '            code, _ = git.run(["push", "--quiet", remote, f":{ref}"])',
        "            code = 0",
        ("tests/core/test_destcheck.py", PRECHECK),
    ),
    Mutant(
        "ledger-running-hidden",
        "gpuc ledger: a running pod's cost so far is left out of the month",
        "client/money/render.py",
        "    lines += running_lines(summary)",
        "    pass",
        ("tests/money/test_money_running_cli.py",),
    ),
    Mutant(
        "reconcile-live-mismatch",
        "gpuc ledger reconcile: a live pod's open row is a mismatch (exit 1)",
        "client/money/ledger_view.py",
        "names, live=live_pods(status) or ())",
        "names)",
        ("tests/money/test_money_running_cli.py",),
    ),
)

# Each round's mutants live in their own file (table_<topic>.py), gathered here: run.py and the table's
# own test read MUTANTS.
from table_faults import MUTANTS_FAULTS  # noqa: E402
from table_grants import MUTANTS_GRANTS  # noqa: E402
from table_hook import MUTANTS_HOOK  # noqa: E402
from table_house import MUTANTS_HOUSE  # noqa: E402
from table_lap import MUTANTS_LAP  # noqa: E402
from table_left import MUTANTS_LEFT  # noqa: E402
from table_money import MUTANTS_MONEY  # noqa: E402  (the topic tables import Mutant from mutant.py)
from table_page import MUTANTS_PAGE  # noqa: E402
from table_pod import MUTANTS_POD  # noqa: E402
from table_recov import MUTANTS_RECOV  # noqa: E402
from table_rental import MUTANTS_RENTAL  # noqa: E402
from table_secrets import MUTANTS_SECRETS  # noqa: E402
from table_spot import MUTANTS_SPOT  # noqa: E402
from table_vast import MUTANTS_VAST  # noqa: E402
from table_warm import MUTANTS_WARM  # noqa: E402
from table_wd import MUTANTS_WD  # noqa: E402
from table_week1 import MUTANTS_WEEK1  # noqa: E402
from table_week2 import MUTANTS_WEEK2  # noqa: E402

MUTANTS: tuple[Mutant, ...] = (
    *CORE,
    *MUTANTS_MONEY,
    *MUTANTS_PAGE,
    *MUTANTS_SECRETS,
    *MUTANTS_SPOT,
    *MUTANTS_HOUSE,
    *MUTANTS_WEEK1,
    *MUTANTS_WEEK2,
    *MUTANTS_LEFT,
    *MUTANTS_WD,
    *MUTANTS_LAP,
    *MUTANTS_POD,
    *MUTANTS_HOOK,
    *MUTANTS_VAST,
    *MUTANTS_RENTAL,
    *MUTANTS_RECOV,
    *MUTANTS_GRANTS,
    *MUTANTS_FAULTS,
    *MUTANTS_WARM,
)
