"""Hand mutants of issue 25.12's Vast survivor: each skips one of `up`'s checks before the rent only for Vast
(every refusal test once used RunPod). tests/client/test_precheck_vast.py must fail on each."""

from __future__ import annotations

from mutant import Mutant

PLAN = "client/pods/plan.py"
VAST_UP = ("tests/client/test_precheck_vast.py",)

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
)
