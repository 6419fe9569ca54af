"""The mutants of Vast's outbid webhook route (POST /v1/hooks/vast, functions/recovery/webhook.py), as exact
replacements in table.py's format: each breaks one check, and `tests` must fail on it. The lead merges
MUTANTS_HOOK into MUTANTS. Each was tried by hand."""

from __future__ import annotations

from mutant import Mutant

HOOK = "functions/recovery/webhook.py"
TESTS = "tests/recovery/test_vast_hook.py"


def hook_test(name: str) -> str:
    return f"{TESTS}::{name}"


MUTANTS_HOOK: tuple[Mutant, ...] = (
    Mutant(
        "hook-forged-taken",
        "a forged webhook (any signature) makes the watchdog read and act",
        HOOK,
        "if not hmac.compare_digest(signature(secret, stamp, body), sig.strip().lower()):",
        "if False:",
        (hook_test("test_a_forged_signature_is_401_and_nothing_is_read_or_stored"),),
    ),
    Mutant(
        "hook-stale-taken",
        "a captured delivery replayed hours later is taken as fresh",
        HOOK,
        "if not abs(now - sent) <= WINDOW_S:",
        "if False:",
        (hook_test("test_a_stale_delivery_is_401_and_nothing_is_read_or_stored"),),
    ),
    Mutant(
        "hook-event-id-unbound",
        "an unsigned event id header dodges the dedupe: one delivery replayed under new ids",
        HOOK,
        "if signed_id != event_id or len(event_id) > MAX_EVENT_ID:",
        "if False:",
        (hook_test("test_an_event_id_header_swapped_to_dodge_the_dedupe_is_refused"),),
    ),
    Mutant(
        "hook-replay-4xx",
        "a replay answered 4xx: Vast's at-least-once delivery retries it for ever",
        HOOK,
        'return Response(200, {"ok": True, "ignored": hint})',
        "raise HttpError(409, hint)",
        (hook_test("test_the_same_delivery_again_is_ignored_and_nothing_acts_twice"),),
    ),
    Mutant(
        "hook-body-logged",
        "a refused delivery's body (its message may name things) reaches the log",
        HOOK,
        '        log.info("vast webhook refused: %s", hint)',
        '        log.info("vast webhook refused: %s %s", hint, req.body)',
        (hook_test("test_the_log_says_the_event_and_outcome_never_the_body_or_headers"),),
    ),
    Mutant(
        "hook-proof-not-hint",
        "the recovery takes the hint as proof: the pod is not read, a running pod is destroyed and re-rented",
        "functions/recovery/attempts.py",
        "reading, confirmed, billing = read_twice(provider, run.latest.pod_id)",
        'reading, confirmed, billing = "paused", True, False',
        (hook_test("test_a_genuine_hint_while_the_pod_runs_destroys_and_rents_nothing"),),
    ),
)
