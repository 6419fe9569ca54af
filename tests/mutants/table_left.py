"""Hand mutants of the hostile-input and any-part-may-die round: `up`'s checks before the rent skipped only for Vast
(every refusal test once used RunPod), a watchdog from an older gpuc rented against, a provider's words
in an alert undefanged, a link the pod refuses sent after the rent, and a pod's stream uncapped."""

from __future__ import annotations

from mutant import Mutant

PLAN = "client/pods/plan.py"
VAST_UP = ("tests/client/test_plan_vast.py",)

MUTANTS_LEFT: tuple[Mutant, ...] = (
    Mutant(
        "vast-skips-destination",
        "up -p vast: the results destination never probed; a pod whose sync must fail is rented",
        PLAN,
        "        require_destination(ctx.settings, opts.experiment, ctx.echo)",
        '        opts.provider == "vast" or require_destination(ctx.settings, opts.experiment, ctx.echo)',
        VAST_UP,
    ),
    Mutant(
        "vast-skips-watchdog-reachable",
        "up -p vast: a loopback watchdog accepted; the pod's heartbeats never arrive and it is destroyed",
        PLAN,
        "        check_watchdog_reachable(ctx.settings)",
        '        opts.provider == "vast" or check_watchdog_reachable(ctx.settings)',
        VAST_UP,
    ),
    Mutant(
        "vast-skips-ssh-key",
        "up -p vast: no ssh key, yet a pod is rented that `up` cannot reach",
        PLAN,
        "        check_ssh_key(ctx.settings)",
        '        opts.provider == "vast" or check_ssh_key(ctx.settings)',
        VAST_UP,
    ),
    Mutant(
        "up-ignores-watchdog-protocol",
        "up: a watchdog from an older gpuc rented against; it refuses the pod's heartbeats and destroys the pod",
        PLAN,
        "    if status.protocol >= WIRE_PROTOCOL:",
        "    if True:",
        VAST_UP,
    ),
    Mutant(
        "watchdog-says-no-protocol",
        "the watchdog no longer says its protocol: every `up` against it refused",
        "functions/handlers.py",
        "            protocol=api.WIRE_PROTOCOL,",
        "",
        ("tests/functions/test_wire_protocol.py",),
    ),
    Mutant(
        "provider-error-undefanged",
        "a provider's error text reaches a destroy FAILED alert as it came: its link a link on the phone",
        "functions/app.py",
        "        return provider_says(redact(exc.message, deps.secrets()), 300)",
        "        return redact(exc.message, deps.secrets())[:300]",
        ("tests/functions/test_provider_error_defanged.py",),
    ),
    Mutant(
        "upload-link-unjudged",
        "up: a link the pod's unpack refuses (x -> b/../c) sent anyway; up fails after the rent",
        "client/onpod/upload.py",
        "    if link_stays_inside(target, depth=len(rel.parts) - 1):",
        "    if True:",
        ("tests/client/test_upload_links.py",),
    ),
    Mutant(
        "copy-stream-uncapped",
        "results/cp: a pod's endless tar stream written whole into a temporary file on the laptop",
        "client/jobs/copyout.py",
        "        if self.written + len(data) > self.cap:",
        "        if False:",
        ("tests/client/test_copy_stream_cap.py",),
    ),
)
