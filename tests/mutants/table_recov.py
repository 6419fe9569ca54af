"""Hand mutants of recovery's watchdog side (a stop always wins, a re-rent cut at any step, the same machine, the
webhook Vast sends, nothing left in the store): each breaks one rule a user would lose money or secrets over,
and its tests must fail. The lead merges MUTANTS_RECOV into table.py. Each was tried by hand.

Not listed, because another check catches the same case on purpose (a stop is read again at every step): the
stop read right after the paused instance's destroy (`_act`) is backed by the one written with the intent,
before the create (`_rerent`, listed); the stop read after the create (`_see_through`) by the one after the
register and the ticket's save (listed: `recov-record-ignores-stop`). Before its ticket is saved, a pod boots
only if it is the one the claim names (its id) AND the store holds it registered under the run and attempt:
the second half alone already holds (only the pass registers a pod with a run's marks), so a mutant of the
first half is equivalent and not listed."""

from __future__ import annotations

from mutant import Mutant

RECOVERING = "functions/recovery/rerent.py"
RESPAWN = "functions/recovery/attempts.py"
RUNS = "functions/recovery/runs.py"
HOOK = "functions/recovery/webhook.py"
STOPS = "tests/recovery/test_recovery_stop_and_cuts.py"
LEFT = "tests/recovery/test_recovery_leaves_nothing.py"
VAST_HOOK = "tests/recovery/test_vast_hook.py"
SPOT_RULES = "tests/recovery/test_recover_spot.py"


def stops(name: str) -> str:
    return f"{STOPS}::{name}"


MUTANTS_RECOV: tuple[Mutant, ...] = (
    Mutant(
        "recov-rents-after-stop",
        "a stop that landed before the create is not read again: the next attempt is rented after it",
        RECOVERING,
        "    if stored.stop_asked:\n        _stopped(run, stored)  # before the create: nothing rented",
        "    if False:\n        _stopped(run, stored)  # before the create: nothing rented",
        (stops("test_a_stop_at_any_step_of_a_re_rent_leaves_no_instance_billing"),),
    ),
    Mutant(
        "recov-record-ignores-stop",
        "a stop that landed just before the ticket is saved is overwritten: the new attempt bills on",
        RECOVERING,
        "        if r.done or r.stop_asked or r.acting is None or r.acting.since != acting.since:",
        "        if r.done or r.acting is None or r.acting.since != acting.since:",
        (stops("test_a_stop_at_any_step_of_a_re_rent_leaves_no_instance_billing"),),
    ),
    Mutant(
        "recov-undo-not-destroyed",
        "the attempt rented as the user stopped is recorded as ended but never destroyed",
        RECOVERING,
        "    pod_id = acting.pod_id\n    provider.destroy(pod_id)",
        "    pod_id = acting.pod_id",
        (stops("test_a_stop_at_any_step_of_a_re_rent_leaves_no_instance_billing"),),
    ),
    Mutant(
        "recov-takeover-rents-again",
        "the pass that takes over a cut re-rent does not look the pod up by name: a second instance bills",
        RECOVERING,
        "        found = provider.find_by_name(pod_name(runs.attempt_run_id(stored.run_id, acting.attempt)))",
        "        found = None",
        (stops("test_a_re_rent_cut_at_any_step_boots_after_the_next_pass_and_the_user_is_told"),),
    ),
    Mutant(
        "recov-boot-never-before-register",
        "the pod of a re-rent cut before its register is told 'never' (403): onstart gives up, it bills unbooted",
        RUNS,
        '    return "ok" if mine and acting.step == "registered" else "later"',
        '    return "ok" if mine and acting.step == "registered" else "never"',
        (stops("test_a_re_rent_cut_at_any_step_boots_after_the_next_pass_and_the_user_is_told"),),
    ),
    Mutant(
        "recov-one-gpu",
        "a 2-GPU run's re-rent searches 1-GPU machines (Vast's default num_gpus)",
        RESPAWN,
        "listed = provider.offers(spec.gpu_type, interruptible, num_gpus=spec.gpu_count)",
        "listed = provider.offers(spec.gpu_type, interruptible)",
        (stops("test_a_2_gpu_run_is_re_rented_on_2_gpus_at_its_bid_per_gpu_and_verifies_2"),),
    ),
    Mutant(
        "recov-floor-per-gpu",
        "a machine's floor (min_bid, for the whole machine) is counted per GPU: a 2-GPU machine under the cap "
        "is refused",
        RESPAWN,
        "if o.min_bid is not None and o.min_bid <= plan.price_cap",
        "if o.min_bid is not None and o.min_bid * spec.gpu_count <= plan.price_cap",
        (stops("test_a_2_gpu_run_is_re_rented_on_2_gpus_at_its_bid_per_gpu_and_verifies_2"),),
    ),
    Mutant(
        "recov-no-recheck",
        "the offer is not listed again before the create: a floor that rose past the cap is bid at",
        RECOVERING,
        "        offer = recheck(provider, stored, chosen)",
        "        offer = chosen",
        (stops("test_a_floor_that_rose_past_the_cap_before_the_create_rents_elsewhere_or_nothing"),),
    ),
    Mutant(
        "recov-gpu-count-not-verified",
        "a re-rented pod's verification expects one GPU whatever the run rented",
        RUNS,
        "    config.update(gpu_count=run.request.spec.gpu_count)",
        "    config.update()",
        (stops("test_a_2_gpu_run_is_re_rented_on_2_gpus_at_its_bid_per_gpu_and_verifies_2"),),
    ),
    Mutant(
        "recov-frozen-not-billed",
        "a frozen instance (its GPU still bills) is counted as disk only in the envelope and the ledger",
        RESPAWN,
        '        run.attempts[-1] = last.model_copy(update={"paused_at": None if gpu_billed else now})',
        '        run.attempts[-1] = last.model_copy(update={"paused_at": now})',
        (stops("test_a_frozen_instance_counts_its_gpu_in_the_envelope_and_the_ledger"),),
    ),
    Mutant(
        "recov-secrets-kept",
        "an ended run keeps its kit's secrets in the store for ever",
        RUNS,
        '            "secrets": {},',
        '            "secrets": kit.secrets,',
        (f"{LEFT}::test_an_ended_run_leaves_no_secret_in_the_store_then_or_a_year_later",),
    ),
    Mutant(
        "recov-dedupe-forever",
        "a webhook's dedupe record is never swept: it outlives its 300 s window (a year later, still there)",
        "functions/store.py",
        '            db.execute("DELETE FROM seen_once WHERE expires_at <= ?", (now,))\n'
        '            db.execute("DELETE FROM meta',
        '            db.execute("DELETE FROM meta',
        (f"{LEFT}::test_an_ended_run_leaves_no_secret_in_the_store_then_or_a_year_later",),
    ),
    Mutant(
        "recov-hook-bare-hex",
        "the webhook reads a bare hex signature: every delivery Vast sends (sha256=<hex>) is refused",
        HOOK,
        "    if not hmac.compare_digest(signature(secret, stamp, body), sig.strip().lower()):",
        "    if not hmac.compare_digest(signature(secret, stamp, body)[7:], sig.strip().lower()):",
        (f"{SPOT_RULES}::test_the_signature_is_read_as_vast_sends_it_and_nothing_else",),
    ),
    Mutant(
        "recov-hook-prefixed-slug",
        "the webhook waits for `client:outbid` in the body: Vast's `outbid` is ignored",
        HOOK,
        'OUTBID = "outbid"  # the body\'s short slug',
        'OUTBID = "client:outbid"  # the body\'s short slug',
        (f"{SPOT_RULES}::test_the_short_slug_is_an_outbid_and_a_test_delivery_is_not",),
    ),
    Mutant(
        "recov-hook-acts-in-answer",
        "the webhook runs a reaper pass inside its answer: provider calls within Vast's 10 s (and the ingest's)",
        HOOK,
        "    if deps.wake is not None:\n        deps.wake()",
        "    if True:\n        __import__('gpuc.functions.reaper.sweep').functions.reaper.sweep.reap_once(deps, now)",
        (f"{VAST_HOOK}::test_the_delivery_vast_sends_is_answered_with_no_provider_call_and_the_pass_acts",),
    ),
    Mutant(
        "recov-hook-no-wake",
        "the local server's reaper is not woken by a hint: the outbid waits for the next timed pass",
        HOOK,
        "    if deps.wake is not None:\n        deps.wake()",
        "    if deps.wake is not None:\n        pass",
        (f"{VAST_HOOK}::test_on_the_local_server_a_hint_wakes_the_reaper_at_once",),
    ),
    Mutant(
        "recov-phone-says-nothing-of-the-re-rent",
        "the phone's stop, tapped while a pass is renting, does not say the attempt is still being dealt with",
        "functions/actions/verbs.py",
        '    now_doing = f"; right now the watchdog is {busy}: you are told once it is confirmed gone" if busy else ""',
        '    now_doing = ""',
        (stops("test_the_phones_stop_during_a_re_rent_says_what_the_watchdog_is_doing"),),
    ),
    Mutant(
        "recov-down-claims-while-busy",
        "gpuc down says no further attempt is rented while the watchdog is still renting one",
        "client/pods/down.py",
        "    if recovering.busy is not None:",
        "    if False:",
        (
            "tests/recovery/test_down_recovery.py::test_down_says_plainly_what_the_watchdog_is_still_doing_and_claims_nothing",
        ),
    ),
)
