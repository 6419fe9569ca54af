"""The hand mutants for a pod on a stranger's machine (run-scoped capabilities): what the pod holds
and what its grants reach. Same format as table.py: each one exact replacement that breaks one safety check,
and the tests that must fail on it. The hostile host's tests sign as the host that read the pod's token and
claim, against a real S3 API (tests/fakes/s3world.py)."""

from __future__ import annotations

from mutant import Mutant

GRANTS = "functions/grants.py"
HOSTILE = "tests/hostile/test_pod_grants.py"
TRANSFER = "tests/instance_side/test_grants_transfer.py"
ALLOW = "tests/secrets/test_pod_allowlist.py"


def hostile(name: str) -> str:
    return f"{HOSTILE}::{name}"


MUTANTS_GRANTS: tuple[Mutant, ...] = (
    Mutant(
        "grant-no-prefix",
        "grants: a pod whose run has no s3:// destination at this watchdog is granted anyway",
        GRANTS,
        "    if not auth.results_at:\n",
        "    if False:\n",
        (hostile("test_a_pod_without_an_s3_destination_is_granted_nothing"),),
    ),
    Mutant(
        "grant-after-end",
        "grants: a pod whose run ended still gets URLs (its host keeps reading and writing the results)",
        GRANTS,
        "    if auth.state in FINISHED_STATES:",
        "    if False:",
        (hostile("test_no_grant_once_the_run_ended_or_past_its_deadline"),),
    ),
    Mutant(
        "grant-past-deadline",
        "grants: a pod past its deadline + margin still gets URLs",
        GRANTS,
        "    if now >= end:",
        "    if False:",
        (hostile("test_no_grant_once_the_run_ended_or_past_its_deadline"),),
    ),
    Mutant(
        "grant-ttl-uncapped",
        "grants: a URL minted just before the cut-off lives its whole TTL past the run's end + margin",
        GRANTS,
        "int(min(GRANT_TTL_S, end - now)) or 1",
        "GRANT_TTL_S",
        (hostile("test_a_grant_never_outlives_the_deadline_and_its_margin"),),
    ),
    Mutant(
        "grant-seq-not-spent",
        "grants: a captured grant request replays",
        GRANTS,
        "    if not deps.store.claim_event_seq(",
        "    if False and not deps.store.claim_event_seq(",
        (hostile("test_a_replayed_grant_request_is_refused"),),
    ),
    Mutant(
        "grant-dotdot-name",
        "grants: a name with `..` is signed (a store or proxy that normalises the path reaches another run)",
        "core/destinations.py",
        'part in ("", ".", "..")',
        'part in ("",)',
        (hostile("test_a_name_outside_the_prefix_is_refused_and_nothing_is_stored"),),
    ),
    Mutant(
        "grant-any-bucket",
        "registration: a results_at outside the watchdog's bucket is taken (a pod granted what the user never set)",
        GRANTS,
        "    if where.bucket != scope.bucket or not scope.holds(root):",
        "    if False:",
        (hostile("test_a_registration_naming_a_prefix_outside_its_run_is_refused"),),
    ),
    Mutant(
        "grant-any-run",
        "registration: a results_at not ending in the pod's own run is taken (a prefix wider than its run)",
        GRANTS,
        '    if root is None or (root and not where.prefix.endswith("/" + tail)) or grant_name_problem(where.prefix):',
        "    if root is None and False:",
        (hostile("test_a_registration_naming_a_prefix_outside_its_run_is_refused"),),
    ),
    Mutant(
        "grant-list-sibling",
        "grants: the listing's prefix lacks its slash (run01 lists run01x's objects)",
        GRANTS,
        '    prefix = base + "/"',
        "    prefix = base",
        (hostile("test_the_listing_holds_the_pods_own_run_only"),),
    ),
    Mutant(
        "grant-claim-no-prefix",
        "claims: the run's prefix is not in the claim (a watchdog that lost its store grants nothing, or guesses)",
        "functions/claims.py",
        '    "results_at": "g",\n',
        "",
        (hostile("test_a_store_rebuilt_from_the_claim_grants_the_same_prefix_never_a_wider_one"),),
    ),
    Mutant(
        "grant-complete-any-parts",
        "uploads: completed whatever parts are there (a part left from a failed try becomes the file)",
        "functions/bucket.py",
        "        if numbers != list(range(1, count + 1)) or sum(s for _, _, s in parts) != size:",
        "        if False:",
        (hostile("test_an_upload_is_completed_only_with_the_parts_the_pod_names"),),
    ),
    Mutant(
        "pod-put-changed-file",
        "pod: a file that changed since it was listed is sent as if whole",
        "instance_side/grants.py",
        "            if os.fstat(fh.fileno()).st_size != whole:",
        "            if False:",
        (f"{TRANSFER}::test_a_file_that_changed_since_it_was_listed_fails_the_push",),
    ),
    Mutant(
        "pod-expired-url-fatal",
        "pod: a URL that expired before its use fails the push (a slow uplink keeps the pod)",
        "instance_side/grants.py",
        "                url = fresh()",
        "                pass",
        (f"{TRANSFER}::test_a_url_that_expired_before_its_use_is_signed_again",),
    ),
    Mutant(
        "git-default-branch",
        "git: the pod pushes to the default branch (a protected main meets a stranger's token)",
        "instance_side/gitsync.py",
        '    return f"{RUN_BRANCH_PREFIX}{run_id}"',
        '    return "main"',
        (hostile("test_the_git_push_goes_to_the_runs_own_branch_only_never_forced"),),
    ),
    Mutant(
        "s3-key-may-go",
        "allowlist: the results bucket's key may be named for a pod",
        "core/podsecrets.py",
        "    **dict.fromkeys(S3_KEYS, _RESULTS),\n",
        "",
        (f"{ALLOW}::test_every_forbidden_name_is_covered",),
    ),
    Mutant(
        "up-no-grant-check",
        "up: rents with an s3:// destination the watchdog cannot grant (every result stays on the pod)",
        "client/pods/up.py",
        "    plan.check_results_grant(watched, ctx.settings)",
        "    pass",
        ("tests/aws/test_destcheck_s3.py::test_up_refuses_before_renting_when_the_watchdog_cannot_grant_the_bucket",),
    ),
    Mutant(
        "restore-other-run",
        "restore: an s3:// source other than the pod's own run is read through its grant",
        "instance_side/resume.py",
        "        if objects is None or not _same_place(url, objects.describe()):",
        "        if objects is None:",
        ("tests/recovery/test_resume_s3.py::test_nothing_pushed_to_s3_and_another_runs_prefix_are_refused",),
    ),
)
