"""The command table, kept free of imports so `gpuc --help` can print without loading click."""

from __future__ import annotations

# name -> "module:attribute"; a module is imported only when its command runs (or shows its help).
COMMANDS: dict[str, tuple[str, str]] = {
    "up": ("gpuc.client.pods.commands:up", "Start a pod for an experiment (and optionally run a job on it)."),
    "run": ("gpuc.client.jobs.commands:run", "Run a job on a pod under the wrapper (sync, notify, destroy)."),
    "down": (
        "gpuc.client.pods.commands:down",
        "Sync results, destroy a pod, confirm it is gone, close its ledger row.",
    ),
    "ls": ("gpuc.client.pods.commands:ls", "List pods at every configured provider, and the watchdog's health."),
    "keep": ("gpuc.client.pods.commands:keep", "Suspend a pod's idle destroy for a while (a lease)."),
    "extend": ("gpuc.client.pods.commands:extend", "Move a pod's deadline (--max-hours) later, within your cap."),
    "results": ("gpuc.client.jobs.commands:results", "Copy a kept or stopped pod's results here, then end it."),
    "cp": ("gpuc.client.jobs.commands:cp", "Copy files between here and a pod's workspace (POD:PATH)."),
    "logs": (
        "gpuc.client.jobs.commands:logs",
        "Show a job's output: from the live pod, or from its results once gone.",
    ),
    "ledger": ("gpuc.client.money.commands:ledger", "What was spent: month summary, plot, reconcile, notes."),
    "pick": ("gpuc.client.money.commands:pick", "Choose a GPU for a model: fit, bandwidth, price."),
    "offers": (
        "gpuc.client.money.commands:offers",
        "Live offers from Vast.ai and RunPod, filtered, with bid advice.",
    ),
    "balance": ("gpuc.client.money.commands:balance", "Provider balances, spend per hour, hours left."),
    "doctor": (
        "gpuc.client.setup.commands:doctor",
        "Check the setup before you rent: keys, .env, watchdog, hook.",
    ),
    "watchdog": (
        "gpuc.client.watchdog.commands:watchdog",
        "The out-of-band watchdog: serve, reap, deploy, status.",
    ),
    "notify": (
        "gpuc.client.watchdog.commands:notify",
        "Send a test message through every channel and the watchdog (--test).",
    ),
    "page": ("gpuc.client.watchdog.page:page", "A link (or QR code) to the watchdog's status page for your phone."),
    "demo": ("gpuc.testkit.commands:demo", "Run the whole pod life end to end on the embedded default."),
    "drill": (
        "gpuc.testkit.commands:drill",
        "Run the failure matrix (docs/failure-matrix.md) and report the money each wastes.",
    ),
    "completion": (
        "gpuc.client.cli:completion",
        'Print the shell completion script: eval "$(gpuc completion bash)".',
    ),
}


HELP_HEAD = """Usage: gpuc [OPTIONS] COMMAND [ARGS]...

  gpuc: rented GPUs that destroy themselves, watched out of band, with every
  cent on record.

  Start with `gpuc demo` (no accounts needed), then `gpuc doctor`.

Options:
  --version   Show the version and exit.
  -h, --help  Show this message and exit.

Commands:
"""


def top_help() -> str:
    width = max(len(n) for n in COMMANDS) + 2
    return HELP_HEAD + "".join(f"  {n:<{width}}{COMMANDS[n][1]}\n" for n in sorted(COMMANDS))


def require_testkit(command: str) -> None:
    """`gpuc demo` and `gpuc drill` run on gpuc.testkit (emulators, fakes): the wheel ships it beside the
    product; an install without it (a trimmed or broken one) is told how to get it."""
    # Lazy: this module is read on every `gpuc --help` and must import nothing.
    import importlib.util

    from gpuc.core.errors import ConfigError

    if importlib.util.find_spec("gpuc.testkit") is None:
        raise ConfigError(
            f"`gpuc {command}` needs gpuc's emulators and fakes (gpuc.testkit), which this install lacks",
            hint="reinstall gpuc with them: pip install --force-reinstall 'gpuc[rehearse]' (or, in a clone, make demo)",
        )
