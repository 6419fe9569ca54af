"""Hand mutants of the house's rules: a layer broken (core reaching up into the pod's code), a cycle made
(core depending on the client's run store), the watchdog's old setting names forgotten (a .env written
before the rename silently points gpuc at the default loopback watchdog). Each must fail its `tests`.
The lead merges MUTANTS_HOUSE into table.py's table."""

from __future__ import annotations

from mutant import Mutant

LAYERS = "tests/docs/test_layers.py"

MUTANTS_HOUSE: tuple[Mutant, ...] = (
    Mutant(
        "layers-core-imports-the-pod",
        "layers: core imports the pod's sync again (lazily), so the watchdog's Lambda and the laptop carry the pod",
        "core/destcheck.py",
        "    # The pod's own runner (stdin closed, output captured).\n",
        "    from gpuc.instance_side.sync import git_runner  # noqa: F811\n",
        (LAYERS,),
    ),
    Mutant(
        "layers-context-imports-pods",
        "cycle: the commands' context builds its run store from client/pods again, pods and context in a loop",
        "client/context.py",
        "from gpuc.client.runs import RunStore  # sqlite: only for the commands that read runs",
        "from gpuc.client.pods.listing import RunStore  # type: ignore[attr-defined]",
        (LAYERS,),
    ),
    Mutant(
        "watchdog-old-names-dropped",
        "settings: GPUC_FUNCTIONS_URL in an old .env ignored: up registers with the default loopback watchdog",
        "core/settingsload.py",
        "    env, from_file = with_current_names(env), with_current_names(from_file)\n",
        "",
        (
            "tests/core/test_env_mistakes.py::test_the_watchdog_settings_are_named_watchdog_and_the_old_names_still_work",
        ),
    ),
)
