"""The RunPod mutants of a first rental: its traps let through, and an emulator that invents what RunPod's
published spec does not say. Each breaks one thing a user would pay for (a pod nobody can reach, a dearer
pool rented unasked, a quote for the wrong count) or one thing the emulators must never be (kinder or
more inventive than the real API); `tests` must fail on it."""

from __future__ import annotations

from mutant import Mutant

RUNPOD = "core/providers/runpod.py"
EMULATOR = "testkit/emulators/runpod.py"
RENTAL = "tests/client/test_runpod_first_rental.py"
CONFORMANCE = "tests/providers/test_runpod_conformance.py"
COUNT = "tests/money/test_money_runpod_count.py"


def rental(name: str) -> str:
    return f"{RENTAL}::{name}"


WHOLE = "test_every_request_gpuc_sends_and_every_answer_the_emulator_gives_keep_the_published_spec"


def conformance(name: str = WHOLE) -> str:
    return f"{CONFORMANCE}::{name}"


MUTANTS_RENTAL: tuple[Mutant, ...] = (
    Mutant(
        "rental-no-public-key",
        "runpod: the create carries no PUBLIC_KEY: with no key registered the pod has no ssh, paid for, unreachable",
        RUNPOD,
        "            env[PUBLIC_KEY_ENV] = spec.ssh_public_key.strip()",
        "            pass",
        (rental("test_with_no_key_registered_the_pod_is_handed_gpucs_key_and_the_user_is_told"),),
    ),
    Mutant(
        "rental-up-hands-no-key",
        "up: the key it logs in with is never put on the spec (the pod gets none)",
        "client/pods/plan.py",
        '    return spec.model_copy(update={"ssh_public_key": key})',
        "    return spec",
        (rental("test_with_no_key_registered_the_pod_is_handed_gpucs_key_and_the_user_is_told"),),
    ),
    Mutant(
        "rental-small-volume",
        "runpod: a 3 GB volume sent: RunPod's 422 comes back as 'upgrade gpuc', the user's fix unsaid",
        RUNPOD,
        "        if spec.volume_gb < MIN_VOLUME_GB:",
        "        if False:",
        (rental("test_a_volume_under_10_gb_is_refused_before_any_call_with_the_fix"),),
    ),
    Mutant(
        "rental-403-bad-key",
        "runpod: a pool the account cannot use read as a refused key ('check RUNPOD_API_KEY')",
        "core/providers/runpod_refusals.py",
        "CREATE_REFUSALS = (400, 402, 403, 422)",
        "CREATE_REFUSALS = (400, 402, 422)",
        (rental("test_a_pool_the_account_cannot_use_is_said_as_such_never_a_bad_key"),),
    ),
    Mutant(
        "rental-pool-unbounded",
        "runpod: after a 403 a dearer pool is rented, above the price the user was shown",
        RUNPOD,
        "            if denied and price > ceiling + 1e-9:",
        "            if False:",
        (rental("test_after_a_403_the_next_pool_is_tried_within_the_price_shown_and_said"),),
    ),
    Mutant(
        "rental-count-one",
        "runpod: the catalog read for one GPU whatever the count: a 4-GPU quote shows the stock for one",
        RUNPOD,
        '            params = {**CATALOG_PARAMS, "count": str(count), "cloud": cloud}',
        '            params = {**CATALOG_PARAMS, "count": "1", "cloud": cloud}',
        (rental("test_a_4_gpu_quote_is_the_catalogs_price_and_stock_for_4"), COUNT),
    ),
    Mutant(
        "rental-list-limit",
        "runpod: the pod list sent with `limit` (not in v2: only RunPod ignoring it saves the listing)",
        RUNPOD,
        "        params: dict[str, str] = {}\n        for _ in range(MAX_V2_PAGES):",
        '        params: dict[str, str] = {"limit": "50"}\n        for _ in range(MAX_V2_PAGES):',
        (conformance(), "tests/providers/test_runpod_provider.py"),
    ),
    Mutant(
        "rental-cursor-dropped",
        "runpod: a nextCursor not followed: the day RunPod pages, the first page is read as the account",
        RUNPOD,
        '            params = {"cursor": cursor}',
        "            params = {}",
        ("tests/providers/test_runpod_provider.py::test_should_runpod_ever_page_the_list_gpuc_follows_the_cursor",),
    ),
    Mutant(
        "rental-rate-words-refused",
        "runpod: GraphQL's rate limit in words read as a refusal: the balance shown as an error",
        "core/providers/answers.py",
        "    if any(GRAPHQL_LIMIT_WORDS.search(m) for m in [*messages, *codes]):",
        "    if False:",
        (
            "tests/money/test_money_balance.py::test_a_rate_limited_balance_read_is_not_read_now_never_an_error_or_a_bad_key",
        ),
    ),
    Mutant(
        "rental-balance-429-error",
        "balance: a 429 shown as an error (doctor's ✗: 'cannot read it'), not 'later'",
        "client/money/balance.py",
        "        if exc.status == 429:",
        "        if False:",
        (
            "tests/money/test_money_balance.py::test_a_rate_limited_balance_read_is_not_read_now_never_an_error_or_a_bad_key",
        ),
    ),
    Mutant(
        "rental-savings-hide-overbill",
        "reconcile: a RunPod row billed ABOVE its ledger cost hidden as a savings plan",
        "client/money/reconcile.py",
        "mismatch.billed_usd < mismatch.ledger_usd",
        "mismatch.billed_usd != mismatch.ledger_usd",
        ("tests/money/test_money_reconcile.py::test_a_runpod_row_billed_above_its_ledger_cost_is_still_a_mismatch",),
    ),
    Mutant(
        "emulator-direct-omitted",
        "emulator: ssh.direct left out instead of null (the spec requires the key)",
        EMULATOR,
        '"direct": direct},',
        '**({"direct": direct} if direct else {})},',
        (conformance(),),
    ),
    Mutant(
        "emulator-invents-paging",
        "emulator: the pod list answered with a pagination object RunPod does not send",
        EMULATOR,
        '            return EmuResponse.json(200, {"pods": [self._v2_pod(p) for p in ordered]})',
        '            return EmuResponse.json(200, {"pods": [self._v2_pod(p) for p in ordered], "pagination": {}})',
        (conformance(),),
    ),
    Mutant(
        "emulator-takes-small-volume",
        "emulator: a 3 GB persistent volume created (RunPod refuses it: a fake kinder than the real API)",
        "testkit/emulators/runpod_contract.py",
        "PERSISTENT_MIN_GB = 10",
        "PERSISTENT_MIN_GB = 1",
        (
            conformance("test_and_so_for_the_gpu_and_the_mounts_inside"),
            "tests/providers/test_runpod_v2.py::test_the_emulator_refuses_a_create_request_v2_would_refuse",
        ),
    ),
    Mutant(
        "emulator-ignores-public-key",
        "emulator: a pod's sshd takes the registered keys even when the create sent its own PUBLIC_KEY",
        EMULATOR,
        "        keys = sent.splitlines() if sent is not None else self.ssh_keys if start_ssh else []",
        "        keys = self.ssh_keys if start_ssh else []",
        (rental("test_with_no_key_registered_the_pod_is_handed_gpucs_key_and_the_user_is_told"),),
    ),
)
