"""The `faults` round's mutants: the drill-with-faults fixes, the laptop's reading of a recovering run, and the ten
safety properties a hand mutation round found no test holding (plus one found by hand), as exact replacements in
table.py's format. Each was run by run.py: the named tests fail on it."""

from __future__ import annotations

from mutant import Mutant

RECOVERING = "functions/recovery/rerent.py"
WATCH = "functions/recovery/watch.py"
BUDGET = "core/budget.py"
CLAIMS = "functions/claims.py"
RUN_ROW = "tests/recovery/test_run_row_closes_at_its_last_end.py"
MONTH = "tests/recovery/test_rerent_weighs_the_whole_month.py"
REPLAY = "tests/functions/test_claim_replay_after_store_loss.py"

MUTANTS_FAULTS: tuple[Mutant, ...] = (
    # -- 1. one token per pod -------------------------------------------------------------------------------
    Mutant(
        "token-shared",
        "every pod's ping token is the same: one host signs for every pod",
        "core/signing.py",
        'return _mac(watchdog_key, f"pod-key|{provider}|{pod_id}|{run}")',
        'return _mac(watchdog_key, "pod-key")',
        ("tests/core/test_pod_token_per_pod.py", "tests/functions/test_pod_token_signs_for_one_pod.py"),
    ),
    Mutant(
        "token-ignores-pod-id",
        "pods of one run (an attempt, a retry) share a ping token",
        "core/signing.py",
        'return _mac(watchdog_key, f"pod-key|{provider}|{pod_id}|{run}")',
        'return _mac(watchdog_key, f"pod-key|{provider}|{run}")',
        ("tests/core/test_pod_token_per_pod.py",),
    ),
    # -- 2. the claim path's time window --------------------------------------------------------------------
    Mutant(
        "claim-window",
        "a store that lost the pod re-creates it from a ping captured long ago (or dated ahead)",
        "functions/edge.py",
        "    if abs(now - timestamp) > api.SIGNATURE_WINDOW_S:\n        raise _time_refused(now)  # a proven pod",
        "    if False:\n        raise _time_refused(now)  # a proven pod",
        ("tests/functions/test_claim_ping_window.py",),
    ),
    # -- 3. one boot per ticket -----------------------------------------------------------------------------
    Mutant(
        "boot-race-spends-twice",
        "two boots racing with one ticket both get the kit (its secrets and a pod token)",
        "functions/recovery/routes.py",
        '        if runs.boot_verdict(r, pod, body.pod_id, body.ticket, key) != "ok":\n            return None',
        "        if False:\n            return None",
        ("tests/recovery/test_boot_ticket_race.py",),
    ),
    # -- 4. the envelope counts what was spent --------------------------------------------------------------
    Mutant(
        "envelope-forgets-spent",
        "a next attempt (the on-demand last rung) is weighed against a fresh envelope, not what is left",
        BUDGET,
        "worst = run_spent(attempts, now) + next_attempt_worst(",
        "worst = next_attempt_worst(",
        ("tests/recovery/test_recover_counts_what_was_spent.py",),
    ),
    # -- 5. the month's whole spend -------------------------------------------------------------------------
    Mutant(
        "rerent-month-own-spend",
        "a re-rent is weighed against the run's own spend only: other pods' month is ignored",
        WATCH,
        "outlook(records_burns(records), ahead, run.now)",
        "outlook(records_burns([r for r in records if r.run_id == run_id]), ahead, run.now)",
        (MONTH,),
    ),
    Mutant(
        "rerent-others-not-ahead",
        "a re-rent ignores every other pod still running or kept (their worst case ahead)",
        WATCH,
        "        if rec.run_id != run_id\n",
        "        if rec.run_id == run_id\n",
        (MONTH,),
    ),
    # -- 6. a kept pod not read ------------------------------------------------------------------------------
    Mutant(
        "kept-unread-stopped",
        "a kept pod whose provider was not read counts as stopped (recovery reads none: it always passes)",
        BUDGET,
        'stopped = pod is not None and pod.status == "stopped"',
        'stopped = pod is None or pod.status == "stopped"',
        ("tests/core/test_kept_pod_unread_counts.py", MONTH),
    ),
    Mutant(
        "kept-unread-uncounted",
        "a pod ahead with an unknown disk price counts for nothing, its GPU to its deadline included",
        BUDGET,
        "return sum(w if w is not None else a.known(self.now) for a, w in self.ahead)",
        "return sum(w for _, w in self.ahead if w is not None)",
        ("tests/core/test_kept_pod_unread_counts.py", MONTH),
    ),
    # -- 7. a multi-GPU run's envelope ----------------------------------------------------------------------
    Mutant(
        "multi-gpu-envelope-one-bid",
        "a 2-GPU run's envelope holds one GPU's bid: half of what it may spend",
        "client/pods/recovery/prepare.py",
        "return RunEnvelope(opts.bid * opts.gpu_count, disk, opts.max_hours)",
        "return RunEnvelope(opts.bid, disk, opts.max_hours)",
        ("tests/recovery/test_multi_gpu_run_envelope.py",),
    ),
    # -- 8. a dry run and recovery --------------------------------------------------------------------------
    Mutant(
        "dry-recovery",
        "a dry-run reaper pass destroys and re-rents for a recovering run",
        WATCH,
        "    if run.dry_run:\n        return  # a dry run rents nothing and destroys nothing",
        "    if False:\n        return  # a dry run rents nothing and destroys nothing",
        ("tests/recovery/test_dry_run_leaves_recovery_alone.py",),
    ),
    # -- 9. what the recovery destroyed ---------------------------------------------------------------------
    Mutant(
        "recovery-destroyed-unrecorded",
        "an attempt the recovery destroyed stays 'ok': a later pass tells the user it is gone at the provider",
        RECOVERING,
        "    _mark_destroyed(run, old, acting.why)\n",
        "    pass\n",
        ("tests/recovery/test_recovery_destroyed_is_recorded.py",),
    ),
    Mutant(
        "recovery-destroyed-not-by-recovery",
        "an attempt the recovery destroyed is not recorded as ended by the recovery",
        RECOVERING,
        "changes.update(end_at=run.now, ended_by=RECOVERY_ENDED_BY)",
        "changes.update(end_at=run.now)",
        ("tests/recovery/test_recovery_destroyed_is_recorded.py",),
    ),
    # -- 10. a push to a new destination --------------------------------------------------------------------
    Mutant(
        "push-new-dest-as-old",
        "a push to a new destination sends only what changed since the OLD one's last push",
        "instance_side/push.py",
        "        if last.destination and last.destination != where:\n            last = PushManifest()",
        "        if False:\n            last = PushManifest()",
        ("tests/instance_side/test_push_to_a_new_destination.py",),
    ),
    # -- found by hand: a replayed ping after a store loss --------------------------------------------------
    Mutant(
        "claim-restores-unlisted",
        "a replayed ping re-creates, as healthy, a pod its provider no longer lists (then 'gone at the provider')",
        CLAIMS,
        '    if listed is None or listed.origin != "adopted":\n        return None',
        "    if False:\n        return None",
        (REPLAY,),
    ),
    Mutant(
        "claim-restores-old-ping",
        "a ping signed before the store was born re-creates an ended (stopped, still listed) pod as healthy",
        CLAIMS,
        "    if signed_at < math.floor(store_born(deps.store, now, write=False)):",
        "    if False:",
        (REPLAY,),
    ),
    # -- item 5: the laptop's reading of a recovering run; the drill's F9n -----------------------------------
    Mutant(
        "run-end-first-pod",
        "a recovering run's row closes at its first pod's end (the first outbid), its last pod still billing",
        "core/ledger/intake.py",
        "        return None\n    return max(e for e in ends if e is not None)",
        "        return ends[0]\n    return max(e for e in ends if e is not None)",
        (RUN_ROW,),
    ),
    Mutant(
        "register-over-stray-drops-run",
        "a recovering run's first pod, taken for a stray before `up` registered it, names no run: its row closes "
        "at the first outbid with one attempt's cost",
        "functions/store.py",
        "        if pod.run_id is not None and old.run_id is None:",
        "        if False:",
        (RUN_ROW,),
    ),
    Mutant(
        "run-view-no-pod-ends",
        "the run's view never learns its last pod's end: the run costs to 'now' for ever, its row never closes",
        "functions/recovery/runs.py",
        "    run = with_pod_ends(run, store)\n",
        "",
        (RUN_ROW,),
    ),
    Mutant(
        "stopped-word-no-end",
        "a pod that could only stop itself says so without its end: a lost end notice leaves it 24 h (F9n)",
        "instance_side/ending.py",
        'event = event_body(self.cfg.pod_id, "destroy_failed", text, end_at=end_at)',
        'event = event_body(self.cfg.pod_id, "destroy_failed", text)',
        ("tests/instance_side/test_a_stopped_pod_says_its_end_again.py",),
    ),
)
