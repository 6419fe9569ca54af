"""Hand mutants of the phone's side (the status page, its links, the event limit, the provider's words): each breaks
one safety property, and its `tests` must fail on it. The lead merges MUTANTS_PAGE into table.py's table;
until then run.py does not see them; test_table_page.py keeps them applicable."""

from __future__ import annotations

from mutant import Mutant

LINKS = "functions/links.py"
PAGE = "functions/actions/status_page.py"
SERVER = "functions/server.py"
LAMBDA = "functions/aws.py"
EVENTS = "functions/eventlimit.py"
RULES = "functions/reaper/rules.py"
NEVER_LOGGED = "tests/functions/test_links_never_logged.py"

MUTANTS_PAGE: tuple[Mutant, ...] = (
    Mutant(
        "links-mac-16-bits",
        "links: the signature cut to 16 bits, forgeable online in ~33,000 tries",
        LINKS,
        "MAC_BYTES = 10",
        "MAC_BYTES = 2",
        ("tests/functions/test_links_strength.py",),
    ),
    Mutant(
        "page-form-empty",
        "status page: its forms POST an empty body, taken for a channel's bare button: destroy refused",
        PAGE,
        "danger=not o.safe, fields=(CONFIRM,))",
        "danger=not o.safe)",
        ("tests/functions/test_status_page_forms.py",),
    ),
    Mutant(
        "page-stray-buttons",
        "status page: a stray gpuc did not start gets destroy buttons",
        PAGE,
        'if pod.origin == "adopted":',
        'if pod.origin == "never":',
        ("tests/functions/test_status_page_forms.py::test_a_stray_gpuc_did_not_start_has_no_button",),
    ),
    Mutant(
        "tap-pushes-each",
        "phone tap: each transition it makes pushes too: two or three pushes for one tap",
        "functions/actions/verbs.py",
        "sentence = spec.do(deps if spec.told else replace(deps, notifier=held), pod, claim, now, via)",
        "sentence = spec.do(deps, pod, claim, now, via)",
        ("tests/functions/test_status_page_forms.py::test_one_tap_on_a_kept_pod_is_one_push",),
    ),
    Mutant(
        "serve-logs-link",
        "watchdog serve: a refused link's path (the capability itself) written to the log",
        SERVER,
        "shown = path_for_log(path)",
        "shown = path",
        (f"{NEVER_LOGGED}::test_the_loopback_server_logs_no_link",),
    ),
    Mutant(
        "lambda-logs-link",
        "Lambda handler: every link's path written to CloudWatch",
        LAMBDA,
        "path_for_log(parsed.path), response.status)",
        "parsed.path, response.status)",
        (f"{NEVER_LOGGED}::test_the_lambda_handler_logs_no_link",),
    ),
    Mutant(
        "events-one-budget",
        "event limit: every kind in one budget, a burst of progress hides the job's end",
        EVENTS,
        "    if kind in PROGRESS_KINDS:",
        "    if True:",
        ("tests/functions/test_event_limit.py",),
    ),
    Mutant(
        "provider-words-raw",
        "alerts: a provider's raw status text quoted as it came (a link on the phone, gpuc's name above)",
        RULES,
        "f\"provider status {pod.status} ({provider_says(pod.raw_status) or '-'})",
        "f\"provider status {pod.status} ({pod.raw_status or '-'})",
        ("tests/functions/test_provider_text_defanged.py",),
    ),
)
